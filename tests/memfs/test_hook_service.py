"""The hook asks the reverie process that ran the command, and validates by itself otherwise: the same
verdict and report either way, with real ``git commit`` and the installed hook."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.memfs import hook_service
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.gitsnapshot import read_staged_snapshot, read_staged_snapshot_local
from orchestrator.memfs.hook import SOCKET_ENV, install_hook
from orchestrator.memfs.hook_service import HookService
from orchestrator.memfs.names import APPROVALS_FILE
from orchestrator.memfs.policy import AGENT_APPROVAL, NEEDS_APPROVAL
from orchestrator.memfs.validator import format_report, validate_staged

REFUSED_NOTE = "  notes/b.md: missing required index notes/MEMORY.md\n"


def _git(repo: Path, *args: str, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=check,
                          env={**os.environ, **(env or {})})


def _note(repo: Path) -> None:
    (repo / "notes").mkdir(exist_ok=True)
    (repo / "notes" / "b.md").write_text("---\nname: B\ndescription: a note\n---\nhello\n")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "memory"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "MEMORY.md").write_text("# Memory\n")
    (repo / "persona.md").write_text("---\nname: persona\ndescription: Test memory\n---\nI am.\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "init")
    install_hook(repo)
    return repo


@pytest.fixture
def service() -> Iterator[HookService]:
    service = HookService()
    yield service
    service.close()


def test_a_registered_repository_is_validated_by_the_service(repo: Path, service: HookService) -> None:
    service.allow(repo)
    env = {SOCKET_ENV: str(service.address)}
    _note(repo)
    _git(repo, "add", "notes/b.md")
    refused = _git(repo, "commit", "-m", "add note", env=env, check=False)
    assert refused.returncode == 1 and REFUSED_NOTE in refused.stderr
    assert refused.stderr == format_report(validate_staged(repo))
    assert service.answered == 1
    (repo / "notes" / "MEMORY.md").write_text("# Notes\n")
    _git(repo, "add", "notes/MEMORY.md")
    assert _git(repo, "commit", "-q", "-m", "add index", env=env, check=False).returncode == 0
    assert service.answered == 2
    assert _git(repo, "rev-list", "--count", "HEAD").stdout.strip() == "2"


def test_a_pathspec_commit_is_judged_on_git_s_temporary_index(repo: Path, service: HookService) -> None:
    service.allow(repo)
    env = {SOCKET_ENV: str(service.address)}
    _note(repo)
    _git(repo, "add", "notes/b.md")
    with (repo / "persona.md").open("a") as out:
        out.write("More.\n")
    assert _git(repo, "commit", "-q", "-m", "persona only", "--", "persona.md", env=env, check=False).returncode == 0
    assert service.answered == 1
    assert _git(repo, "show", "--name-only", "--format=", "HEAD").stdout.split() == ["persona.md"]
    assert _git(repo, "diff", "--cached", "--name-only").stdout.split() == ["notes/b.md"]


@pytest.mark.parametrize("case", ["unregistered", "index elsewhere", "nobody listening"])
def test_declined_or_unanswered_requests_are_validated_by_the_hook_itself(
    repo: Path, service: HookService, tmp_path: Path, case: str
) -> None:
    env = {SOCKET_ENV: str(service.address)}
    if case == "index elsewhere":
        service.allow(repo)
        env["GIT_INDEX_FILE"] = str(tmp_path / "other-index")
        _git(repo, "read-tree", "HEAD", env=env)
    elif case == "nobody listening":
        service.allow(repo)
        env[SOCKET_ENV] = str(tmp_path / "no-such-socket")
    _note(repo)
    _git(repo, "add", "notes/b.md", env=env)
    refused = _git(repo, "commit", "-m", "add note", env=env, check=False)
    assert refused.returncode == 1 and REFUSED_NOTE in refused.stderr
    assert service.answered == 0
    assert _git(repo, "rev-list", "--count", "HEAD").stdout.strip() == "1"


def test_malformed_requests_are_declined(service: HookService, repo: Path) -> None:
    service.allow(repo)
    assert service.answer(b"not json") == {"fallback": True}
    assert service.answer(b'{"index": ""}') == {"fallback": True}
    assert service.answer(b'{"cwd": "%s", "index": "/etc/passwd"}' % str(repo).encode()) == {"fallback": True}
    assert service.answer(b'{"cwd": "%s", "index": ""}' % str(repo).encode()) == {"code": 0, "report": ""}


def test_libgit2_reads_the_staged_index_as_git_does(repo: Path, tmp_path: Path) -> None:
    """The service's libgit2 snapshot equals the hook's git snapshot: adds, edits, deletes, a rename,
    a type change, and an index other than the repository's own."""
    (repo / "notes").mkdir()
    body = "---\nname: long\ndescription: a long note\n---\n" + "".join(f"line {i}\n" for i in range(40))
    (repo / "notes" / "long.md").write_text(body)
    (repo / "gone.md").write_text("---\nname: gone\ndescription: x\n---\nbye\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "--no-verify", "-m", "more")
    _git(repo, "mv", "notes/long.md", "notes/renamed.md")
    _git(repo, "rm", "-q", "gone.md")
    (repo / "persona.md").write_text("---\nname: persona\ndescription: Test memory\n---\nChanged.\n")
    (repo / "new.md").write_text("---\nname: new\ndescription: y\n---\nhi\n")
    (repo / "MEMORY.md").unlink()
    (repo / "MEMORY.md").symlink_to("persona.md")
    _git(repo, "add", "-A")
    other = tmp_path / "other-index"
    _git(repo, "read-tree", "HEAD", env={"GIT_INDEX_FILE": str(other)})
    for index_file in (None, str(repo / ".git" / "index"), str(other)):
        with GitRepo(repo).open() as local:
            assert local is not None
            mine = read_staged_snapshot_local(local, index_file)
        theirs = read_staged_snapshot(repo, index_file)
        assert dict(mine.index) == dict(theirs.index)
        assert list(mine.changes.items()) == list(theirs.changes.items())
        assert dict(mine.blobs) == dict(theirs.blobs)
        assert (None if mine.head is None else dict(mine.head)) == (None if theirs.head is None else dict(theirs.head))
    with GitRepo(repo).open() as local:
        assert local is not None
        changes = dict(read_staged_snapshot_local(local).changes)
    assert changes == {"notes/renamed.md": "R", "gone.md": "D", "persona.md": "M", "new.md": "A", "MEMORY.md": "T"}


def test_a_temporary_directory_too_long_for_a_socket_falls_back_to_tmp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setattr(hook_service, "_service", None)
    monkeypatch.setenv("TMPDIR", str(deep))
    monkeypatch.setattr(tempfile, "tempdir", None)
    with pytest.raises(OSError):
        HookService()
    address = hook_service.hook_socket(tmp_path)
    assert address is not None and address.startswith("/tmp/rvh-") and len(address) < 108
    assert hook_service._service is not None
    hook_service._service.close()


def test_an_approval_sent_to_the_service_does_not_count(repo: Path, service: HookService) -> None:
    """Only the bash tool hands out the socket: an approval arriving there is the agent's own."""
    service.allow(repo)
    (repo / ".memfs.config.json").write_text('{"version": 1, "maxDepth": 3}\n')
    _git(repo, "add", ".memfs.config.json")
    env = {SOCKET_ENV: str(service.address), "REVERIE_MEMORY_CONSTRAINTS_UPDATE": "1"}
    refused = _git(repo, "commit", "-qm", "cfg", env=env, check=False)
    assert refused.returncode == 1 and service.answered == 1
    assert f"  {NEEDS_APPROVAL}\n" in refused.stderr and refused.stderr.endswith(f"{AGENT_APPROVAL}\n")
    assert not (repo / ".git" / APPROVALS_FILE).exists()
