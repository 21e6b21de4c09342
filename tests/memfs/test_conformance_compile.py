"""Every golden compile case in tests/conformance/compile (M1).

New case files are picked up automatically; ``expected_reverie`` wins over ``expected``.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from orchestrator.memfs import compile_system_prompt
from tests.memfs.conformance_repo import CONFORMANCE, case_files, git, load_case, materialize

_CASES = case_files("compile")


def test_every_vendored_case_is_collected() -> None:
    """The copy in tests/conformance is what a fresh clone runs: it must never be empty."""
    vendored = case_files("compile", folders=(CONFORMANCE,))
    assert vendored, f"no compile cases in {CONFORMANCE / 'compile'}"
    assert {p.name for p in vendored} <= {p.name for p in _CASES}


@pytest.mark.parametrize("case_path", _CASES, ids=lambda p: p.stem)
def test_compile_case(case_path: Path, tmp_path: Path) -> None:
    case = load_case(case_path)
    given = case["input"]
    expected = case.get("expected_reverie") or case["expected"]
    memory_dir = tmp_path / "memory"
    materialize(given["repo"], memory_dir)

    compiled = compile_system_prompt(
        memory_dir,
        given["raw_system"],
        agent_id=given["agent_id"],
        conversation_id=given["conversation_id"],
        now=datetime.fromisoformat(given["now"].replace("Z", "+00:00")),
        previous_message_count=given["previous_message_count"],
    )

    assert compiled.core_memory == expected["core_memory"]
    assert compiled.content == expected["content"]
    assert compiled.raw_system_hash == expected["raw_system_hash"]
    assert compiled.compiled_at == expected["compiled_at"]
    assert (compiled.memfs_revision is not None) == expected["memfs_revision_present"]
    if expected["memfs_revision_present"]:
        head = git(memory_dir, "rev-parse", "HEAD").stdout.decode().strip()
        assert (compiled.memfs_revision == head) == expected["memfs_revision_is_head"]
    if "format_at_head" in expected:
        assert compiled.memory_format == expected["format_at_head"]
