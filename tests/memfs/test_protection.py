"""The accepted revision and the user's config approvals (``memfs.protection``), and the repaired
commit that keeps what the accepted protection covers as accepted; real git in temporary folders."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.names import ACCEPTED_FILE
from orchestrator.memfs.protection import (
    approval_recorded,
    config_change_approved,
    read_accepted,
    record_accepted,
    record_approval,
    repaired_commit,
)
from orchestrator.memfs.validator import audit_head

PROTECT = '{"version": 1, "readOnlyFiles": ["persona.md"]}\n'


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True, env=dict(os.environ))
    return done.stdout.strip()


def _commit(repo: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (repo / name).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "--no-verify", "-m", message)
    return _git(repo, "rev-parse", "HEAD")


def _persona(body: str) -> str:
    return f"---\nname: persona\ndescription: who I am\n---\n{body}\n"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "memory"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    human = "---\nname: human\ndescription: the user\n---\nnothing yet\n"
    _commit(repo, {"MEMORY.md": "# Memory\n", "persona.md": _persona("kind"), "human.md": human}, "init")
    return repo


def test_the_accepted_revision_is_a_commit_id_or_nothing(tmp_path: Path) -> None:
    assert read_accepted(tmp_path) is None
    record_accepted(tmp_path, "a" * 40)
    assert read_accepted(tmp_path) == "a" * 40
    (tmp_path / ACCEPTED_FILE).write_text("HEAD~1\n")
    assert read_accepted(tmp_path) is None, "a name is not a record: only a commit id is"


def test_an_approval_is_of_one_change_from_one_blob_to_another(tmp_path: Path) -> None:
    record_approval(tmp_path, None, "b" * 40)
    record_approval(tmp_path, None, "b" * 40)
    assert approval_recorded(tmp_path, None, "b" * 40)
    assert not approval_recorded(tmp_path, "b" * 40, None), "the way back is another change"
    assert not approval_recorded(tmp_path, "c" * 40, "b" * 40)


def test_a_repaired_commit_puts_back_the_protected_file_and_the_unapproved_config(repo: Path) -> None:
    accepted = _commit(repo, {".memfs.config.json": PROTECT}, "protect")
    edited = _commit(
        repo,
        {".memfs.config.json": '{"version": 1}\n', "persona.md": _persona("evil"), "human.md": "---\nname: human\ndescription: the user\n---\ntea\n"},
        "drop and edit",
    )
    repair = repaired_commit(repo, accepted, edited)
    assert repair is not None and repair.paths == ("persona.md", ".memfs.config.json")
    assert _git(repo, "show", f"{repair.commit}:persona.md") == _persona("kind").strip()
    assert _git(repo, "show", f"{repair.commit}:.memfs.config.json") == PROTECT.strip()
    assert _git(repo, "show", f"{repair.commit}:human.md").endswith("tea"), "the rest of the revision stays"
    assert _git(repo, "rev-parse", f"{repair.commit}^") == edited
    assert repaired_commit(repo, accepted, edited) == repair, "the same overlay is the same commit"
    assert not audit_head(repo, revision=repair.commit, base=accepted, config_approved=True).errors


def test_an_approved_config_change_is_not_put_back(repo: Path) -> None:
    accepted = _commit(repo, {".memfs.config.json": PROTECT}, "protect")
    before = _git(repo, "rev-parse", "HEAD:.memfs.config.json")
    changed = _commit(repo, {".memfs.config.json": '{"version": 1, "readOnlyFiles": ["persona.md", "human.md"]}\n'}, "more")
    common = repo / ".git"
    with GitRepo(repo).open() as local:
        assert local is not None and not config_change_approved(local, common, accepted, changed)
        record_approval(common, before, _git(repo, "rev-parse", "HEAD:.memfs.config.json"))
        assert config_change_approved(local, common, accepted, changed)
    assert repaired_commit(repo, accepted, changed) is None, "nothing protected changed"


def test_the_audit_keeps_the_accepted_protection_and_judges_the_config_change(repo: Path) -> None:
    accepted = _commit(repo, {".memfs.config.json": PROTECT}, "protect")
    edited = _commit(repo, {".memfs.config.json": '{"version": 1}\n', "persona.md": _persona("evil")}, "drop and edit")
    read_only = "persona.md: read-only file cannot be created, changed or removed"
    assert audit_head(repo, revision=edited, base=accepted).errors == (read_only,)
    errors = audit_head(repo, revision=edited, base=accepted, config_approved=False).errors
    assert errors[0].startswith(".memfs.config.json: changed since the last accepted revision without the user's approval")
    assert errors[1:] == (read_only,)
    assert audit_head(repo, revision=edited, base=accepted, config_approved=True).errors == (read_only,)
