"""Memory templates are validated with the suite: a seed the hook would refuse stops the run before
any task runs, naming the task and the reason; the check agrees with the real first commit."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.batch.template_check import template_errors
from orchestrator.cli.app import build_app
from orchestrator.memfs.repo import MemoryCommitRejected, init_memory_repo
from tests.batch.helpers import TINY, write_suite

BAD = {"id": "bad-seed", "turns": ["hi"], "template": {"files": {"persona.md": "no frontmatter at all\n"}},
       "checks": [{"contains": "hi"}]}


def test_an_invalid_template_stops_the_run_before_any_task(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", [*TINY[:2], BAD])
    out = tmp_path / "out"
    result = CliRunner().invoke(build_app("run"), ["run", str(suite), "--out", str(out), "-q"])
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "'bad-seed'" in lines[0] and "persona.md: missing frontmatter" in lines[0], result.output
    assert not (out / "results.jsonl").exists(), "nothing ran"


@pytest.mark.parametrize(
    "seeds",
    [
        {"persona.md": "---\nname: persona\ndescription: rules\n---\n- always end answers with [t]\n"},
        {"persona.md": "no frontmatter at all\n"},
        {"notes/x.md": "---\ndescription: x\n---\nx\n"},
    ],
)
def test_the_check_agrees_with_the_hook_on_a_real_first_commit(tmp_path: Path, seeds: dict[str, str]) -> None:
    predicted = template_errors(seeds)
    try:
        init_memory_repo(tmp_path / "memory", files={**_defaults(), **seeds})
        refused: tuple[str, ...] = ()
    except MemoryCommitRejected as exc:
        refused = tuple(exc.errors)
    assert bool(predicted) == bool(refused) and set(predicted) == set(refused)


def _defaults() -> dict[str, str]:
    from orchestrator.memfs.repo import DEFAULT_MEMORY_FILES

    return dict(DEFAULT_MEMORY_FILES)
