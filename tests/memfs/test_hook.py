"""The installed pre-commit hook, exercised with real ``git commit`` as a user types it."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.memfs.hook import hook_script, install_hook
from orchestrator.memfs.names import APPROVALS_FILE
from orchestrator.memfs.policy import AGENT_APPROVAL, NEEDS_APPROVAL
from orchestrator.memfs.validator import format_report, validate_staged


def _git(repo: Path, *args: str, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=check, env=full_env)


def v2(body: str, name: str = "Notes") -> str:
    return f"---\nname: {name}\ndescription: Test memory\n---\n{body}"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "memory"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "MEMORY.md").write_text("# Memory\n")
    (repo / "persona.md").write_text(v2("I am.\n", "persona"))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "init")
    install_hook(repo)
    return repo


def test_install_writes_executable_hook_and_policy(repo: Path) -> None:
    hook = repo / ".git" / "hooks" / "pre-commit"
    assert hook.read_text() == hook_script()
    assert hook.stat().st_mode & stat.S_IXUSR
    assert os.path.abspath(sys.executable) in hook.read_text()
    assert (repo / ".git" / "letta-memory-layout-policy").read_text() == "root-marker\n"
    install_hook(repo, "shared-memory")
    assert (repo / ".git" / "letta-memory-layout-policy").read_text() == "shared-memory\n"
    with pytest.raises(ValueError, match="unknown layout policy"):
        install_hook(repo, "v3")


def test_invalid_commit_rejected_with_reference_message(repo: Path) -> None:
    (repo / "notes").mkdir()
    (repo / "notes" / "b.md").write_text("---\nname: B\ndescription: a note\n---\nhello\n")
    _git(repo, "add", "notes/b.md")
    result = _git(repo, "commit", "-m", "add note", check=False)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == (
        "Memory validation blocked this commit.\n"
        "No files were committed. Your staged changes are still present.\n"
        "Validation checks the complete repository, so these problems may predate your staged changes.\n"
        "\n"
        "Fix these problems:\n"
        "  notes/b.md: missing required index notes/MEMORY.md\n"
        "\n"
        "Move non-core detail out of root Markdown and behind MEMORY.md indexes.\n"
        "Split files above their per-file limit, then retry the commit.\n"
        "Limits come from .memfs.config.json, or the reverie defaults when it is absent.\n"
        "Do not raise or disable these limits unless the user explicitly approves it.\n"
    )
    assert _git(repo, "rev-list", "--count", "HEAD").stdout.strip() == "1"
    in_process = validate_staged(repo)
    assert format_report(in_process) == result.stderr
    (repo / "notes" / "MEMORY.md").write_text("# Notes\n")
    _git(repo, "add", "notes/MEMORY.md")
    assert _git(repo, "commit", "-q", "-m", "add index", check=False).returncode == 0
    assert _git(repo, "rev-list", "--count", "HEAD").stdout.strip() == "2"


def test_commit_all_validates_the_index_git_commits(repo: Path) -> None:
    (repo / "persona.md").write_text("no frontmatter\n")
    result = _git(repo, "commit", "-a", "-q", "-m", "break persona", check=False)
    assert result.returncode == 1
    assert result.stderr == "Memory validation failed:\n\n  persona.md: missing frontmatter (must start with ---)\n"
    (repo / "persona.md").write_text(v2("Changed.\n", "persona"))
    assert _git(repo, "commit", "-a", "-q", "-m", "fine", check=False).returncode == 0


def test_config_approval_with_reverie_variable(repo: Path) -> None:
    (repo / ".memfs.config.json").write_text('{"version": 1, "maxDepth": 3}\n')
    _git(repo, "add", ".memfs.config.json")
    denied = _git(repo, "commit", "-q", "-m", "cfg", check=False)
    assert "  .memfs.config.json is protected and requires human approval to change\n" in denied.stderr
    approved = _git(repo, "commit", "-q", "-m", "cfg", env={"REVERIE_MEMORY_CONSTRAINTS_UPDATE": "1"}, check=False)
    assert approved.returncode == 0, approved.stderr


def test_an_approved_config_change_is_recorded_for_the_audit(repo: Path) -> None:
    (repo / ".memfs.config.json").write_text('{"version": 1, "maxDepth": 3}\n')
    _git(repo, "add", ".memfs.config.json")
    _git(repo, "commit", "-q", "-m", "cfg", env={"LETTA_MEMORY_CONSTRAINTS_UPDATE": "1"})
    blob = _git(repo, "rev-parse", "HEAD:.memfs.config.json").stdout.strip()
    assert (repo / ".git" / APPROVALS_FILE).read_text() == f"- {blob}\n"


def test_an_approval_that_cannot_be_recorded_refuses_the_commit(repo: Path) -> None:
    """As inside the bash tool's sandbox, where reverie's folder is mounted read-only (here a file
    stands where the folder goes, since the tests may run as root)."""
    (repo / ".git" / "reverie").write_text("")
    (repo / ".memfs.config.json").write_text('{"version": 1, "maxDepth": 3}\n')
    _git(repo, "add", ".memfs.config.json")
    refused = _git(repo, "commit", "-q", "-m", "cfg", env={"REVERIE_MEMORY_CONSTRAINTS_UPDATE": "1"}, check=False)
    assert refused.returncode == 1
    assert f"  {NEEDS_APPROVAL}\n" in refused.stderr and f"{AGENT_APPROVAL}\n" in refused.stderr
    assert _git(repo, "log", "-1", "--format=%s").stdout.strip() == "init"


def test_hook_runs_in_linked_worktrees(repo: Path, tmp_path: Path) -> None:
    worktree = tmp_path / "wt"
    _git(repo, "worktree", "add", "-q", "-b", "reflection", str(worktree))
    (worktree / "zeta.md").write_text("no frontmatter\n")
    _git(worktree, "add", "zeta.md")
    result = _git(worktree, "commit", "-q", "-m", "wt", check=False)
    assert result.returncode == 1
    assert "  zeta.md: missing frontmatter (must start with ---)\n" in result.stderr
    (worktree / "zeta.md").write_text(v2("z", "zeta"))
    _git(worktree, "add", "zeta.md")
    assert _git(worktree, "commit", "-q", "-m", "wt", check=False).returncode == 0


def test_symlinked_index_rejected(repo: Path) -> None:
    blob = subprocess.run(
        ["git", "hash-object", "-w", "--stdin"], cwd=repo, input="huge.txt", capture_output=True, text=True, check=True
    ).stdout.strip()
    _git(repo, "update-index", "--cacheinfo", f"120000,{blob},MEMORY.md")
    result = _git(repo, "commit", "-q", "-m", "link", check=False)
    assert result.returncode == 1
    assert "  MEMORY.md: memory Markdown must be a regular file\n" in result.stderr
