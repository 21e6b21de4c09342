"""A command line typer refuses is one line in reverie's wording (no boxed error), naming the
command whose ``--help`` lists the options; click's own suggestion is kept."""

from __future__ import annotations

import pytest

from orchestrator.cli.app import main


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["chat", "--context-window", "10"], "'--context-window': must be at least 256 (see reverie chat --help)"),
        (["run", "--bogus", "x"], "No such option: --bogus"),
        (["memroy"], "Did you mean 'memory'?"),
        (["memory", "tree", "--bogus"], "(see reverie memory tree --help)"),
    ],
)
def test_an_option_error_is_one_line(argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("reverie: error: ") and says in err, err
    assert "╭" not in err
