"""Properties of the compiler over random repositories (each example builds a real git repo)."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.memfs import CompiledPrompt, compile_system_prompt
from orchestrator.memfs.compiler import clear_render_cache
from orchestrator.memfs.repopool import REPOS

NOW = datetime(2026, 9, 1, 13, 5, 9, tzinfo=UTC)
_SETTINGS = settings(max_examples=30, deadline=None)

_names = st.text(alphabet="abAB_- .é1", min_size=1, max_size=6).filter(lambda s: s not in (".", ".."))
_texts = st.one_of(
    st.text(alphabet="ab \n\r\t-:>|$&<é", max_size=40),
    st.builds(lambda d, b: f"---\nname: n\ndescription: {d}\n---\n{b}", st.text(alphabet="ab :é", max_size=10), st.text(max_size=20)),
)
_root_files = st.dictionaries(_names.map(lambda n: n + ".md"), _texts, max_size=5)
_deferred = st.dictionaries(
    st.tuples(_names, _names).map(lambda t: f"{t[0]}/{t[1]}.md"),
    _texts,
    max_size=6,
)


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def _write(repo: Path, files: Mapping[str, str]) -> None:
    for path, text in files.items():
        target = repo / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8", newline="")


def _repository(root: Path, files: Mapping[str, str], v2: bool) -> Path:
    repo = root / "memory"
    repo.mkdir()
    _git(repo, "init", "-q")
    _write(repo, {**({"MEMORY.md": "# Memory\n"} if v2 else {}), **files})
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "init")
    return repo


def _compile(repo: Path) -> CompiledPrompt:
    return compile_system_prompt(repo, "S {CORE_MEMORY}", agent_id="a", conversation_id="c", now=NOW)


def _indexes(deferred: Mapping[str, str]) -> dict[str, str]:
    return {f"{path.split('/')[0]}/MEMORY.md": "# index\n" for path in deferred}


@_SETTINGS
@given(_root_files, _deferred, st.booleans(), _root_files, st.booleans())
def test_working_tree_changes_never_change_the_output(
    files: dict[str, str], deferred: dict[str, str], v2: bool, edits: dict[str, str], stage: bool
) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        repo = _repository(Path(scratch), {**files, **deferred, **_indexes(deferred)}, v2)
        before = _compile(repo)
        _write(repo, edits)
        for path in list(files)[:1]:
            (repo / path).unlink()
        (repo / "MEMORY.md").write_text("# added or changed\n")
        if stage:
            _git(repo, "add", "-A")
        clear_render_cache()
        assert _compile(repo) == before


@_SETTINGS
@given(_root_files, _deferred, st.lists(_texts, min_size=1, max_size=6))
def test_deferred_contents_never_change_the_output(files: dict[str, str], deferred: dict[str, str], new_texts: list[str]) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        repo = _repository(Path(scratch), {**files, **deferred, **_indexes(deferred)}, True)
        before = _compile(repo)
        changed = {path: new_texts[i % len(new_texts)] for i, path in enumerate(deferred)}
        changed["unindexed-dir/new.md"] = "deferred, unindexed\n"
        _write(repo, changed)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "--allow-empty", "-m", "deferred only")
        after = _compile(repo)
        assert after.core_memory == before.core_memory
        assert after.content == before.content
        assert after.memfs_revision != before.memfs_revision


@_SETTINGS
@given(_root_files, _deferred, st.booleans())
def test_compile_is_deterministic(files: dict[str, str], deferred: dict[str, str], v2: bool) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        repo = _repository(Path(scratch), {**files, **deferred, **_indexes(deferred)}, v2)
        first = _compile(repo)
        assert _compile(repo) == first
        REPOS.close_all()
        clear_render_cache()
        assert _compile(repo) == first
        assert first.memory_format == ("memfs-v2" if v2 else "memfs-v1")
