"""Compiler behaviour beyond the golden cases: worked examples of MEMFS-3.10, revisions,
repository states (M6), the working tree and deferred files being irrelevant, the repository pool."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.memfs import CompiledPrompt, compile_system_prompt
from orchestrator.memfs.compiler import (
    MemoryRecord,
    clear_render_cache,
    format_compiled_at,
    inject_core_memory,
    render_metadata,
    render_v1,
)
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.markup import STRUCTURAL_TAGS
from orchestrator.memfs.repopool import REPOS, RepoPool

NOW = datetime(2026, 10, 8, 15, 4, 5, 678901, tzinfo=UTC)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True).stdout.decode().strip()


def _commit(repo: Path, files: Mapping[str, str | None], message: str = "c") -> str:
    if not (repo / ".git").exists():
        repo.mkdir(parents=True, exist_ok=True)
        _git(repo, "init", "-q", "-b", "main")
    for path, text in files.items():
        target = repo / path
        if text is None:
            target.unlink()
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(text.encode("utf-8"))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "--allow-empty", "--no-verify", "-m", message)
    return _git(repo, "rev-parse", "HEAD")


def _compile(repo: Path, raw: str = "SYSTEM {CORE_MEMORY}", revision: str | None = None) -> CompiledPrompt:
    return compile_system_prompt(repo, raw, agent_id="agent-demo", conversation_id="conv-1", now=NOW, revision=revision)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


SEED = {
    "MEMORY.md": "# Memory\n\n- [persona](persona.md) — Who I am and how I behave.\n- [human](human.md) — What I know about the user.\n- [projects](projects/MEMORY.md) — project notes, read on demand\n",
    "human.md": "---\nname: human\ndescription: What I know about the user.\n---\n\n- 我叫小陆，主要写 TypeScript\n- 我更喜欢用 tabs 缩进\n",
    "persona.md": "---\nname: persona\ndescription: Who I am and how I behave.\n---\nI am mini-letta, a helpful assistant that remembers.\n- 回答末尾总是加上 🦉\n",
    "projects/MEMORY.md": "# Projects\n\n- [mini-letta](mini-letta.md)\n",
    "projects/mini-letta.md": "---\nname: mini-letta\ndescription: The mini-letta project\n---\nTypeScript, bun.\n",
    "skills/release-notes/SKILL.md": "---\nname: release-notes\ndescription: This skill should be used when writing release notes.\n---\nSteps.\n",
}


def test_seed_example(tmp_path: Path) -> None:
    head = _commit(tmp_path / "m", SEED)
    compiled = compile_system_prompt(tmp_path / "m", "SYSTEM {CORE_MEMORY}", agent_id="a", now=NOW)
    assert len(compiled.core_memory.encode()) == 599
    assert _sha(compiled.core_memory) == "9ee76aa4b401a419854b1e679551a1e30be56367a8c4fa31164ea7e93bcb6f8b"
    assert compiled.content == "SYSTEM " + compiled.core_memory
    assert compiled.raw_system_hash == "3a265b08b0acae3db3e6b3a3b9fceaa5a21c66dbba27fb78de92a1eb91f73b52"
    assert compiled.memfs_revision == head
    assert compiled.memory_format == "memfs-v2"
    assert compiled.compiled_at == "2026-10-08T15:04:05.678Z"


def test_v2_edge_example(tmp_path: Path) -> None:
    files = {
        "MEMORY.md": "\n# Memory\r\n\r\n- [projects](projects/MEMORY.md)\n\n",
        "persona.md": '---\nname: "Persona"\ndescription: "Who the agent is"\n---\n',
        "human.md": "---\nname: human\ndescription: >\n  The user,\n  in brief.\n---\n\n\n  - prefers pnpm\n\n",
        "my notes.md": "---\nname: n\ndescription: notes\n---\nuses <b> & co\n",
        "zeta.md": "no frontmatter\n",
        "projects/MEMORY.md": "# Projects\n",
        "projects/a.md": "---\nname: a\ndescription: a\n---\nA\n",
        "projects/archive/MEMORY.md": "# Archive\n",
        "notes/idea.md": "x\n",
        "skills/MEMORY.md": "# not listed\n",
        "skills/pdf/SKILL.md": "---\nname: pdf\ndescription: This skill should be used when reading PDFs.\n---\nSkill body.\n",
        "q&a's <x>/MEMORY.md": "# odd\n",
        "profile.png": "\x89PNG",
    }
    _commit(tmp_path / "m", files)
    compiled = _compile(tmp_path / "m")
    assert len(compiled.core_memory.encode()) == 497
    assert _sha(compiled.core_memory) == "62c61e851d86941a7bd57abb2d1aaf0da1f41428d229f20e74fa9b3887d32793"


def test_v1_example_with_metadata(tmp_path: Path) -> None:
    files = {
        "system/persona.md": "---\ndescription: Who I am\n---\nI am a local agent.\n",
        "system/human.md": "---\ndescription: The user\n---\nLikes tea.\nSecond line.\n",
        "system/project/gotchas.md": "---\ndescription: Project gotchas\n---\nUse Bun for tests.\n",
        "reference/details.md": "---\ndescription: Detailed reference\n---\nOnly projected as an external file.\n",
        "notes/a.md": "n\n",
        "notes/B.md": "n\n",
        "skills/x/SKILL.md": "s\n",
        "top.md": "t\n",
    }
    _commit(tmp_path / "m", files)
    compiled = compile_system_prompt(
        tmp_path / "m", "You are helpful.  \n", agent_id="agent-demo", conversation_id="conv-1", now=NOW, previous_message_count=3
    )
    assert len(compiled.content.encode()) == 936
    assert _sha(compiled.content) == "e75b3dafa59067a6982082397730ecd28f7513c50920297f20d09070b90b0c77"
    assert compiled.raw_system_hash == "f46afa40d2eaf79db5fbcbd093dafa251eb666f234dde61ebc690ad198b537c5"
    assert compiled.memory_format == "memfs-v1"


def _metadata_only(compiled: CompiledPrompt) -> None:
    assert compiled.memfs_revision is None
    assert compiled.memory_format == "memfs-v1"
    assert compiled.core_memory.startswith("<memory_metadata>")


def test_directory_inside_another_repository_is_no_revision(tmp_path: Path) -> None:
    _commit(tmp_path / "outer", {"MEMORY.md": "# outer\n", "inner/persona.md": "p\n"})
    _metadata_only(_compile(tmp_path / "outer" / "inner"))


def test_missing_plain_and_empty_repositories_are_no_revision(tmp_path: Path) -> None:
    _metadata_only(_compile(tmp_path / "missing"))
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "MEMORY.md").write_text("# x\n")
    _metadata_only(_compile(tmp_path / "plain"))
    empty = tmp_path / "empty"
    empty.mkdir()
    _git(empty, "init", "-q")
    (empty / "MEMORY.md").write_text("# staged\n")
    _git(empty, "add", "-A")
    _metadata_only(_compile(empty))


def test_explicit_revision_compiles_that_commit(tmp_path: Path) -> None:
    repo = tmp_path / "m"
    first = _commit(repo, {"MEMORY.md": "# one\n"})
    second = _commit(repo, {"MEMORY.md": "# two\n"})
    old = _compile(repo, revision=first)
    assert old.memfs_revision == first and "# one" in old.core_memory
    assert _compile(repo, revision="HEAD~1").core_memory == old.core_memory
    assert _compile(repo).memfs_revision == second
    _metadata_only(_compile(repo, revision="no-such-branch"))


def test_working_tree_and_index_are_ignored(tmp_path: Path) -> None:
    repo = tmp_path / "m"
    _commit(repo, SEED)
    before = _compile(repo)
    (repo / "persona.md").write_text("---\nname: p\ndescription: changed\n---\nnew\n")
    (repo / "extra.md").write_text("untracked\n")
    (repo / "human.md").unlink()
    _git(repo, "add", "persona.md")
    _forget_everything()
    assert _compile(repo) == before


def test_new_commits_are_seen_by_a_warm_reader(tmp_path: Path) -> None:
    repo = tmp_path / "m"
    _commit(repo, {"MEMORY.md": "# one\n"})
    assert "# one" in _compile(repo).core_memory
    head = _commit(repo, {"MEMORY.md": "# two\n", "new.md": "fresh\n"})
    compiled = _compile(repo)
    assert compiled.memfs_revision == head
    assert "# two" in compiled.core_memory and "<new>\nfresh\n</new>" in compiled.core_memory
    _git(repo, "gc", "-q")
    clear_render_cache()
    assert _compile(repo) == compiled


def test_repository_recreated_at_the_same_path(tmp_path: Path) -> None:
    repo = tmp_path / "m"
    _commit(repo, {"MEMORY.md": "# old\n"})
    assert "# old" in _compile(repo).core_memory
    shutil.rmtree(repo)
    head = _commit(repo, {"MEMORY.md": "# new\n"})
    compiled = _compile(repo)
    assert compiled.memfs_revision == head and "# new" in compiled.core_memory


def _forget_everything() -> None:
    """Drop the render cache and every reader (and its object caches): the next compile is cold."""
    clear_render_cache()
    REPOS.close_all()


def _object_path(repo: Path, oid: str) -> Path:
    return repo / ".git" / "objects" / oid[:2] / oid[2:]


def test_deferred_objects_are_never_read(tmp_path: Path) -> None:
    repo = tmp_path / "m"
    _commit(repo, {**SEED, "projects/archive/MEMORY.md": "# a\n", "projects/archive/2025.md": "old\n"})
    before = _compile(repo)
    for path in ("projects/mini-letta.md", "projects/archive"):
        _object_path(repo, _git(repo, "rev-parse", f"HEAD:{path}")).unlink()
    _forget_everything()
    assert _compile(repo) == before


def test_git_failure_keeps_revision_and_renders_no_files(tmp_path: Path) -> None:
    repo = tmp_path / "m"
    head = _commit(repo, SEED)
    _object_path(repo, _git(repo, "rev-parse", "HEAD^{tree}")).unlink()
    compiled = _compile(repo)
    assert compiled.memfs_revision == head
    assert compiled.memory_format == "memfs-v1"
    assert compiled.core_memory.startswith("<memory_metadata>")


def test_exact_names_and_symlinks_from_the_reader(tmp_path: Path) -> None:
    repo = tmp_path / "m"
    _commit(repo, {"MEMORY.md": "# m\n", "say \"hi\"\t.md": "q\n", " lead.md": "l\n", "back\\slash.md": "b\n"})
    os.symlink("MEMORY.md", repo / "alias.md")
    (repo / os.fsdecode(b"bad\xff.md")).write_bytes(b"x\n")
    _commit(repo, {})
    files = GitRepo(repo).tree_files()
    assert files is not None
    assert files["alias.md"] == b"MEMORY.md"
    assert {"say \"hi\"\t.md", " lead.md", "back\\slash.md"} <= set(files)
    entries = {entry.path: entry for entry in GitRepo(repo).tree_entries() or []}
    assert entries["alias.md"].is_symlink and entries["MEMORY.md"].is_regular_file
    core = _compile(repo).core_memory
    assert "<say \"hi\"\t>\nq\n</say \"hi\"\t>" in core and "< lead>" in core and "<back\\slash>" in core
    assert "<bad\ufffd>\nx\n</bad\ufffd>" in core
    assert "<alias>\nMEMORY.md\n</alias>" in core


def test_pool_bounds_processes_and_recovers_after_eviction(tmp_path: Path) -> None:
    pool = RepoPool(2)
    repos = [tmp_path / f"r{i}" for i in range(4)]
    heads = [_commit(repo, {"MEMORY.md": f"# {i}\n"}) for i, repo in enumerate(repos)]
    for _ in range(2):
        for repo, head in zip(repos, heads, strict=True):
            with pool.open(repo) as reader:
                assert reader is not None
                resolved = reader.revision()
                assert resolved is not None and resolved.commit == head
            assert len(pool) <= 2
    pool.close_all()
    assert len(pool) == 0


def test_pool_follows_a_spelling_whose_symlink_now_points_elsewhere(tmp_path: Path) -> None:
    pool = RepoPool(4)
    first, second = tmp_path / "a", tmp_path / "b"
    heads = [_commit(first, {"MEMORY.md": "# a\n"}), _commit(second, {"MEMORY.md": "# b\n"})]
    link = tmp_path / "memory"
    link.symlink_to(first)
    for target, head in ((first, heads[0]), (second, heads[1]), (first, heads[0])):
        link.unlink()
        link.symlink_to(target)
        with pool.open(link) as reader:
            assert reader is not None
            resolved = reader.revision()
            assert resolved is not None and resolved.commit == head


def test_injection_is_literal() -> None:
    core = "<memory>\nidx $` | $' | $& | $$\n</memory>"
    assert inject_core_memory("Base prompt.   ", core) == "Base prompt.\n\n" + core
    assert inject_core_memory("A {CORE_MEMORY} B {CORE_MEMORY}", "M") == "A M B M"
    assert inject_core_memory("no placeholder \t\n\u00a0\ufeff", "M") == "no placeholder\n\nM"
    assert inject_core_memory("", "M") == "\n\nM"
    assert inject_core_memory("{{CORE_MEMORY}}", "M") == "{M}"
    assert inject_core_memory("  lead", "M") == "  lead\n\nM"


@pytest.mark.parametrize(
    ("moment", "clock"),
    [
        (datetime(2026, 9, 1, 13, 5, 9, tzinfo=UTC), "2026-09-01 01:05:09 PM"),
        (datetime(2026, 9, 1, 0, 0, 0, tzinfo=UTC), "2026-09-01 12:00:00 AM"),
        (datetime(2026, 9, 1, 12, 30, 0, tzinfo=UTC), "2026-09-01 12:30:00 PM"),
    ],
)
def test_metadata_clock(moment: datetime, clock: str) -> None:
    block = render_metadata("a", "c", moment, 1234)
    assert f"- System prompt last recompiled: {clock} UTC+0000" in block
    assert "- 1234 previous messages between you and the user are stored in recall memory" in block


def test_compiled_at_truncates_milliseconds_and_converts_to_utc() -> None:
    from datetime import timedelta, timezone

    moment = datetime(2026, 1, 2, 3, 4, 5, 999999, tzinfo=timezone(timedelta(hours=2)))
    assert format_compiled_at(moment) == "2026-01-02T01:04:05.999Z"


def test_conversation_defaults_and_lone_surrogate_hash(tmp_path: Path) -> None:
    compiled = compile_system_prompt(tmp_path / "none", "x\ud800", agent_id="a", now=NOW)
    assert "- CONVERSATION_ID: default" in compiled.core_memory
    assert compiled.raw_system_hash == _sha("x\ufffd")


@pytest.mark.parametrize("label", sorted(STRUCTURAL_TAGS))
def test_a_file_named_like_a_structural_tag_renders_its_block_as_the_reference(tmp_path: Path, label: str) -> None:
    """A committed root file whose label is one of the prompt's own tags opens ``<label>`` and closes
    ``</label>`` (the reference renders any label so); only a forged tag in its description is
    neutralised."""
    repo = tmp_path / "memory"
    _commit(repo, {"MEMORY.md": "# Memory\n", f"{label}.md": f"---\ndescription: d </{label}> e\n---\nbody\n"})
    core = _compile(repo).core_memory
    assert core.startswith(f"<{label}>\n<description>d &lt;/{label}> e</description>\nbody\n</{label}>\n\n<memory>")
    assert "&lt;" + label + ">" not in core and f"&lt;{label}>" not in core.replace(f"&lt;/{label}>", "")


@pytest.mark.parametrize("label", sorted(STRUCTURAL_TAGS))
def test_a_legacy_system_file_named_like_a_structural_tag_nests_under_its_own_tag(tmp_path: Path, label: str) -> None:
    repo = tmp_path / "memory"
    _commit(repo, {f"system/{label}.md": "---\ndescription: d\n---\nbody\n"})
    core = _compile(repo).core_memory
    assert f"\n<memory>\n<{label}>\n  <projection>$MEMORY_DIR/system/{label}.md</projection>\n" in core
    assert f"  body\n</{label}>\n</memory>" in core


def test_a_structural_tag_written_inside_a_label_is_still_neutralised(tmp_path: Path) -> None:
    """Only a label's own name is rendered raw: a committed name that holds a tag (refused for new
    files, D10) cannot close the block around it."""
    repo = tmp_path / "memory"
    _commit(repo, {"MEMORY.md": "# Memory\n", "x><system-reminder.md": "---\ndescription: d\n---\nb\n"})
    core = _compile(repo).core_memory
    assert core.startswith("<x>&lt;system-reminder>\n") and "<system-reminder>" not in core


def test_legacy_rendering_of_a_deep_label_needs_no_recursion() -> None:
    """``render_v1`` keeps a stack of open folders: a label 2,000 folders deep (deeper than the
    walk ever hands it) renders without reaching Python's recursion limit."""
    label = "system/" + "/".join(["d"] * 2000)
    rendered = render_v1([MemoryRecord(path=f"{label}.md", label=label, value="deep"), MemoryRecord(path="x/" * 1500 + "f.md", label="x")])
    lines = rendered.split("\n")
    assert lines.count("<d>") == 1 and lines.count("  " * 1999 + "</d>") == 1 and ("  " * 2000 + "deep") in lines
    assert ("    " * 1500 + "└── f.md") in lines
