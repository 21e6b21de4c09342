"""Reverie's own validate cases (tests/memfs/cases/validate, same format as the shared conformance
cases): D10's refusal of names that inject markup, and reverie's rulings on non-UTF-8 names and bodies
(MEMFS-R2.4, MEMFS-R4.6) and non-Markdown root files. Run through a real ``git commit`` with the
installed hook, matched like the shared cases (verdict, exit status, error lines, whole output)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.memfs.validator import audit_head
from tests.memfs.conformance_repo import git, load_case, materialize
from tests.memfs.test_conformance_validate import _run_case

_CASES = sorted((Path(__file__).parent / "cases" / "validate").glob("*.json"))


def test_the_cases_are_there() -> None:
    assert len(_CASES) >= 10


@pytest.mark.parametrize("case_path", _CASES, ids=lambda p: p.stem)
def test_reverie_validate_case(case_path: Path, tmp_path: Path) -> None:
    case, actual = _run_case(case_path, tmp_path)
    expected = case["expected"]
    assert actual["verdict"] == expected["verdict"]
    assert actual["exit_code"] == expected["exit_code"]
    assert actual["errors"] == expected["errors"]
    assert actual["hook_output"] == expected["hook_output"]
    assert all("\n" not in error for error in actual["errors"])


@pytest.mark.parametrize(
    "case_path", [p for p in _CASES if load_case(p)["expected"]["verdict"] == "rejected"], ids=lambda p: p.stem
)
def test_a_no_verify_commit_of_a_refused_name_fails_the_audit(case_path: Path, tmp_path: Path) -> None:
    """M8 sees what the hook would have refused, so such a tree never reaches the model."""
    case = load_case(case_path)
    repo = tmp_path / "memory"
    materialize(case["input"]["repo"], repo)
    from tests.memfs.conformance_repo import stage_entries

    stage_entries(repo, case["input"]["staged"], stage_marked_only=False)
    git(repo, "commit", "-q", "--no-verify", "-m", "smuggle")
    result = audit_head(repo)
    assert list(result.errors) == case["expected"]["errors"]
