"""The validator's verdicts and reports (MEMFS-4.4 to MEMFS-4.13), pure and over real git."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from orchestrator.memfs.snapshot import Symlink, build_snapshot
from orchestrator.memfs.validator import (
    ValidationResult,
    audit_head,
    audit_snapshot,
    format_report,
    validate_head,
    validate_snapshot,
    validate_staged,
)
from tests.memfs.tree_bombs import plant

HEAD = {"MEMORY.md": "# Memory\n"}
BLOCKED = (
    "Memory validation blocked this commit.\n"
    "No files were committed. Your staged changes are still present.\n"
    "Validation checks the complete repository, so these problems may predate your staged changes.\n"
    "\n"
    "Fix these problems:\n"
)
TAIL = (
    "Split files above their per-file limit, then retry the commit.\n"
    "Limits come from .memfs.config.json, or the reverie defaults when it is absent.\n"
    "Do not raise or disable these limits unless the user explicitly approves it.\n"
)
ROOT_LINE = "Move non-core detail out of root Markdown and behind MEMORY.md indexes.\n"


def v2(body: str, name: str = "Notes") -> str:
    return f"---\nname: {name}\ndescription: Test memory\n---\n{body}"


def test_missing_index_report_is_byte_exact() -> None:
    snap = build_snapshot({**HEAD, "notes/b.md": "---\nname: B\ndescription: a note\n---\nhello\n"}, HEAD)
    result = validate_snapshot(snap, "root-marker")
    assert result.errors == ("notes/b.md: missing required index notes/MEMORY.md",)
    assert format_report(result) == (
        BLOCKED + "  notes/b.md: missing required index notes/MEMORY.md\n\n" + ROOT_LINE + TAIL
    )
    with_skill = build_snapshot(
        {**HEAD, "notes/b.md": v2("x"), "skills/x/SKILL.md": "no frontmatter"}, {**HEAD, "notes/b.md": v2("x")}
    )
    assert validate_snapshot(with_skill, "root-marker").errors == result.errors
    fixed = build_snapshot({**HEAD, "notes/b.md": v2("x"), "notes/MEMORY.md": "# Notes\n"}, HEAD)
    assert validate_snapshot(fixed, "root-marker").ok


def test_frontmatter_stage_stops_before_constraints() -> None:
    files = {
        **HEAD,
        "persona.md": '---\nname: "Persona"\ndescription: "Identity"\nextra: "no"\n---\nPersistent.\n',
        "big.md": v2("x" * 30000),
    }
    result = validate_snapshot(build_snapshot(files, HEAD), "root-marker")
    assert format_report(result) == (
        "Memory validation failed:\n\n  persona.md: unknown frontmatter key 'extra' (allowed: name description)\n"
    )


def test_activated_directory_and_skills() -> None:
    staged = {**HEAD, "silent/MEMORY.md": "# S\n", "silent/notes.md": "Not projected.\n", "skills/demo/SKILL.md": "x"}
    assert validate_snapshot(build_snapshot(staged, HEAD), "root-marker").errors == (
        "silent/notes.md: missing frontmatter (must start with ---)",
    )


def test_flat_skills_only_when_staged() -> None:
    head = {**HEAD, "skills/old.md": "x"}
    assert validate_snapshot(build_snapshot(dict(head), head), "root-marker").ok
    staged = {**head, "skills/new.md": "x", "skills/MEMORY.md": "y"}
    assert validate_snapshot(build_snapshot(staged, head), "root-marker").errors == (
        "skills/MEMORY.md: invalid skill path (skills must be folders). Use skills/<name>/SKILL.md",
        "skills/new.md: invalid skill path (skills must be folders). Use skills/<name>/SKILL.md",
    )


def test_deleting_the_root_marker_keeps_v2() -> None:
    config = '{"version": 1, "maxFileCharacters": 80}\n'
    head = {**HEAD, "persona.md": v2("Short.\n"), ".memfs.config.json": config}
    staged = {"persona.md": v2("p" * 100), ".memfs.config.json": config}
    result = validate_snapshot(build_snapshot(staged, head), "root-marker")
    assert result.errors == (
        "MEMORY.md: root memory index is required for MemFS v2",
        "persona.md: 145 characters exceeds 80 from maxFileCharacters",
    )


def test_config_protection_and_approval() -> None:
    head = {**HEAD, ".memfs.config.json": '{"version": 1, "maxDepth": 2}\n'}
    bad = {**HEAD, ".memfs.config.json": '{"maxDepth":"deep"}\n'}
    snap = build_snapshot(bad, head)
    assert validate_snapshot(snap, "root-marker").errors == (
        ".memfs.config.json is protected and requires human approval to change",
        ".memfs.config.json: version must be 1",
        ".memfs.config.json: maxDepth must be a non-negative integer",
    )
    unapproved_valid = build_snapshot({**HEAD, ".memfs.config.json": '{"version": 1, "maxDepth": 3}'}, head)
    assert validate_snapshot(unapproved_valid, "root-marker").errors == (
        ".memfs.config.json is protected and requires human approval to change",
    )
    assert validate_snapshot(snap, "root-marker", {"REVERIE_MEMORY_CONSTRAINTS_UPDATE": "1"}).errors == (
        ".memfs.config.json: version must be 1",
        ".memfs.config.json: maxDepth must be a non-negative integer",
    )
    good = build_snapshot({**HEAD, ".memfs.config.json": '{"version":1,"maxDepth":3}\n'}, head)
    assert validate_snapshot(good, "root-marker", {"LETTA_MEMORY_CONSTRAINTS_UPDATE": "1"}).ok
    deleted = build_snapshot(dict(HEAD), head)
    assert not validate_snapshot(deleted, "root-marker").ok
    symlinked = build_snapshot({**HEAD, ".memfs.config.json": Symlink("elsewhere.json")}, head)
    assert validate_snapshot(symlinked, "root-marker", {"REVERIE_MEMORY_CONSTRAINTS_UPDATE": "1"}).errors == (
        ".memfs.config.json: constraint config must be a regular file",
    )


def test_shared_memory_and_its_report() -> None:
    snap = build_snapshot({"missing-name.md": "---\ndescription: Purpose\n---\nBody.\n"}, {})
    assert validate_snapshot(snap, "shared-memory").errors == ("missing-name.md: missing required field 'name'",)
    config = '{"version": 1, "maxFileCharacters": 70}'
    files = {".memfs.config.json": config, "notes.md": v2("n" * 100)}
    result = validate_snapshot(build_snapshot(files, files), "shared-memory")
    assert result.errors == ("notes.md: 145 characters exceeds 70 from maxFileCharacters",)
    assert format_report(result) == BLOCKED + "  notes.md: 145 characters exceeds 70 from maxFileCharacters\n\n" + TAIL
    assert validate_snapshot(build_snapshot({"notes.md": v2("n" * 100000)}, {}), "shared-memory").ok


def test_legacy_rules_and_unborn_head() -> None:
    staged = {"system/persona.md": "no frontmatter", "notes.md": "free", "memory/skills/flat.md": "x"}
    result = validate_snapshot(build_snapshot(staged, None), "legacy-only")
    assert format_report(result) == (
        "Frontmatter validation failed:\n\n"
        "  memory/skills/flat.md: invalid skill path (skills must be folders). Use skills/<name>/SKILL.md\n"
        "  system/persona.md: missing frontmatter (must start with ---)\n"
    )


def test_root_marker_without_marker_uses_legacy_rules() -> None:
    assert validate_snapshot(build_snapshot({"notes.md": "free"}, {}), "root-marker").ok
    marker_staged = build_snapshot({"notes.md": "---\ndescription: legacy\n---\n", **HEAD}, {"notes.md": "x"})
    assert validate_snapshot(marker_staged, "root-marker").errors == ("notes.md: missing required field 'name'",)


def test_unicode_names_are_ordinary() -> None:
    staged = {**HEAD, "café.md": v2("x", "café"), "项目/会议.md": v2("y")}
    assert validate_snapshot(build_snapshot(staged, HEAD), "root-marker").errors == (
        "项目/会议.md: missing required index 项目/MEMORY.md",
    )


def test_unreadable_blob_is_reported() -> None:
    snap = build_snapshot({**HEAD, "a.md": v2("x")}, HEAD)
    broken = type(snap)(snap.index, snap.head, {}, snap.changes)
    result = validate_snapshot(broken, "root-marker")
    assert format_report(result) == "Memory validation could not read Git contents. No files were committed.\n"


def test_audit_combines_frontmatter_and_constraints() -> None:
    tree = {**HEAD, "bad.md": "no frontmatter", "notes/x.md": v2("x")}
    result = audit_snapshot(build_snapshot(tree, HEAD), "root-marker")
    assert format_report(result) == (
        "Memory constraints failed:\n"
        "  bad.md: missing frontmatter (must start with ---)\n"
        "  notes/x.md: missing required index notes/MEMORY.md\n"
    )
    assert format_report(ValidationResult(())) == ""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True).stdout.decode()


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "mem"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "MEMORY.md").write_text("# Memory\n")
    (repo / "persona.md").write_text(v2("I am.\n", "persona"))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "init")
    (_git_dir(repo) / "letta-memory-layout-policy").write_text("root-marker\n")
    return repo


def _git_dir(repo: Path) -> Path:
    return repo / _git(repo, "rev-parse", "--git-common-dir").strip()


def test_validate_staged_reads_the_index_not_the_work_tree(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    assert validate_staged(repo).ok
    (repo / "café.md").write_text(v2("x", "café"))
    (repo / "say \"hi\" now.md").write_text("broken")
    _git(repo, "add", "café.md")
    assert validate_staged(repo).ok
    _git(repo, "add", "-A")
    result = validate_staged(repo)
    assert result.errors == ('say "hi" now.md: missing frontmatter (must start with ---)',)
    (repo / "say \"hi\" now.md").write_text(v2("fixed"))
    assert not validate_staged(repo).ok
    assert validate_staged(repo, policy="legacy-only").ok


def test_validate_staged_uses_env_for_approval(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    (repo / ".memfs.config.json").write_text('{"version": 1}\n')
    _git(repo, "add", "-A")
    assert validate_staged(repo, env={}).errors == (
        ".memfs.config.json is protected and requires human approval to change",
    )
    assert validate_staged(repo, env={"REVERIE_MEMORY_CONSTRAINTS_UPDATE": "1"}).ok


def test_audit_head_catches_no_verify_commits(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    assert validate_head(repo).ok
    (repo / "notes").mkdir()
    (repo / "notes" / "x.md").write_text("no frontmatter")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "--no-verify", "-m", "smuggle")
    result = audit_head(repo)
    assert result.errors == ("notes/x.md: missing required index notes/MEMORY.md",)
    assert result.kind == "audit"


def test_audit_of_empty_repository_is_ok(tmp_path: Path) -> None:
    repo = tmp_path / "empty"
    repo.mkdir()
    _git(repo, "init", "-q")
    assert audit_head(repo).ok


BOMBS = [pytest.param(10, 7, "MAX_TREE_PATHS", id="ten-million-paths"), pytest.param(1, 5000, "MAX_TREE_DEPTH", id="5000-deep")]


@pytest.mark.parametrize(("fanout", "levels", "cap"), BOMBS)
def test_a_head_over_a_tree_cap_is_invalid_in_one_line_and_its_fix_is_valid(
    tmp_path: Path, fanout: int, levels: int, cap: str
) -> None:
    """The audit names the cap and where it was reached, without expanding the tree; a commit that
    drops the bomb is judged on its own tree (its parent cannot be listed to compare with)."""
    repo = _repo(tmp_path)
    plant(repo, fanout=fanout, levels=levels)
    result = audit_head(repo)
    assert result.kind == "audit" and len(result.errors) == 1
    assert result.errors[0].startswith("bomb/") and f"({cap})" in result.errors[0] and "\n" not in result.errors[0]
    assert audit_head(repo, revision="HEAD~1").ok
    fixed = _git(repo, "commit-tree", "-p", "HEAD", "-m", "drop it", _git(repo, "rev-parse", "HEAD~1^{tree}").strip())
    _git(repo, "update-ref", "HEAD", fixed.strip())
    assert audit_head(repo).ok


@pytest.mark.parametrize(("fanout", "levels", "cap"), BOMBS)
def test_the_hook_judges_the_index_on_its_own_under_a_head_over_a_cap(
    tmp_path: Path, fanout: int, levels: int, cap: str
) -> None:
    """The hook's git-process path reads HEAD a level at a time and stops at the cap (``ls-tree -r``
    would print every path); the index is then checked as a first commit's is."""
    repo = _repo(tmp_path)
    plant(repo, fanout=fanout, levels=levels)
    assert validate_staged(repo).ok
    (repo / "notes.md").write_text("no frontmatter")
    _git(repo, "add", "notes.md")
    assert validate_staged(repo).errors == ("notes.md: missing frontmatter (must start with ---)",)
