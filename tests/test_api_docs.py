"""Every example in docs/api.md runs as written, in an empty directory, on the scripted model."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)


def test_the_document_has_an_example_per_function() -> None:
    text = "\n".join(EXAMPLES)
    for name in ("open_session", "load_effective_settings", "run_suite", "sweep", "stress", "report"):
        assert name in text, name


@pytest.mark.parametrize("source", EXAMPLES, ids=[f"example-{i}" for i in range(len(EXAMPLES))])
def test_the_example_runs(source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(source, f"{DOC.name} example", "exec"), {"__name__": "__main__"})
    assert capsys.readouterr().out.strip(), "every example prints what it did"
