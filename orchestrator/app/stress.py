"""The engine of ``reverie stress`` (DECISIONS S21): concurrent writers against one memory repo.

Each of ``writers`` writers is a reflection-like session in its own worktree making ``commits``
commits, merged in batches of 5 through the same merge-back reflections use
(:func:`orchestrator.memfs.merge.merge_back`). Meanwhile a main writer commits on the main
checkout, as the primary agent does (without the merge lock). A commit edits the shared hot file
``notes/hot.md`` with probability ``conflict_rate`` (so concurrent sessions conflict), else the
writer's own file.

Every commit is validated in-process before it is made (the whole tree, with the MemFS
validator) and then committed with hooks bypassed (S21); its SHA is recorded at commit time.
A batch kept because the parent was momentarily dirty is retried (turn-loop 5.15 step 8);
a batch kept on a conflict stays on its branch and the writer continues on a fresh worktree.

Counting:

* ``merged``: commits that reached ``HEAD`` through merge-back;
* ``kept``: commits left on kept branches;
* ``lost``: recorded commits no ref reaches. A rebase replaces commits by copies; merge-back
  reports each old → new pair and the recorded SHA is followed through them;
* ``invalid``: recorded commits (after the same mapping) whose tree fails the audit
  (frontmatter rules and tree constraints, S13), each checked in-process;
* merge latency: wall time of each ``merge_back`` call, lock wait included.
"""

from __future__ import annotations

import math
import os
import random
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import anyio.to_thread
from anyio import Path as AsyncPath
from anyio import create_task_group, sleep

from orchestrator.base.errors import UsageError
from orchestrator.memfs.git import arun
from orchestrator.memfs.hook import install_hook
from orchestrator.memfs.merge import REASON_DIRTY, AuditFn, MergeOutcome, default_audit, merge_back
from orchestrator.memfs.policy import ROOT_MARKER
from orchestrator.memfs.repo import DEFAULT_MEMORY_FILES
from orchestrator.memfs.snapshot import Entry, Snapshot, build_snapshot, diff_status, path_order_key
from orchestrator.memfs.validator import audit_snapshot, validate_snapshot
from orchestrator.memfs.worktrees import Worktree, create_worktree, remove_worktree

__all__ = ["BATCH_SIZE", "HOT_FILE", "ProgressFn", "StressConfig", "StressReport", "percentile", "run_stress"]

BATCH_SIZE = 5
HOT_FILE = "notes/hot.md"
ProgressFn = Callable[[int, int], None]
"""Called with ``(commits made by the session writers, their total)``."""

_AGENT = "stress"
_SHA_IN_SUMMARY = re.compile(r"^\[[^\n]* ([0-9a-f]{40})\]", re.MULTILINE)
_DIRTY_RETRIES = 50
_COMMIT_RETRIES = 50


@dataclass(frozen=True)
class StressConfig:
    writers: int
    commits: int
    conflict_rate: float = 0.1
    seed: int = 0
    main_interval: float = 0.25

    def __post_init__(self) -> None:
        if self.writers < 1:
            raise UsageError(f"--writers must be at least 1, got {self.writers}")
        if self.commits < 1:
            raise UsageError(f"--commits must be at least 1, got {self.commits}")
        if not 0.0 <= self.conflict_rate <= 1.0:
            raise UsageError(f"--conflict-rate must be between 0 and 1, got {self.conflict_rate}")


@dataclass(frozen=True)
class StressReport:
    merged: int
    kept: int
    lost: int
    invalid: int
    merge_p50_ms: float
    merge_p99_ms: float
    recorded: int = 0
    main_commits: int = 0
    merges: int = 0
    elapsed_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """Exactly the keys the CLI's ``--json`` promises."""
        return {
            "merged": self.merged,
            "kept": self.kept,
            "lost": self.lost,
            "invalid": self.invalid,
            "merge_p50_ms": self.merge_p50_ms,
            "merge_p99_ms": self.merge_p99_ms,
        }


def percentile(values: Iterable[float], pct: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def _note(name: str, body: str) -> str:
    return f"---\nname: {name}\ndescription: stress test file {name}\n---\n{body}\n"


def _initial_files(writers: int) -> dict[str, str]:
    files = dict(DEFAULT_MEMORY_FILES)
    files["notes/MEMORY.md"] = "# Notes\n\nFiles written by `reverie stress`.\n"
    files[HOT_FILE] = _note("hot", "initial")
    files["notes/main.md"] = _note("main", "initial")
    for i in range(writers):
        files[f"notes/writer-{i:02d}.md"] = _note(f"writer-{i:02d}", "initial")
    return files


def _write_files(repo: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text, encoding="utf-8")


async def _init_repo(repo: Path, files: dict[str, str]) -> None:
    """A fresh v2 memory repo with the hook installed, committed with the harness identity.

    (``repo.init_memory_repo`` commits with the ambient git identity, which a bare machine lacks.)
    """
    await AsyncPath(repo).mkdir(parents=True)
    await arun(repo, "init", "-q", "-b", "main", harness=True)
    await anyio.to_thread.run_sync(lambda: install_hook(repo, ROOT_MARKER))
    await anyio.to_thread.run_sync(_write_files, repo, files)
    snapshot = await anyio.to_thread.run_sync(lambda: build_snapshot(_read_tree_files(repo)))
    errors = validate_snapshot(snapshot, ROOT_MARKER).errors
    if errors:
        raise RuntimeError(f"stress repository would be invalid: {errors[0]}")
    await arun(repo, "add", "-A", harness=True)
    await arun(repo, "commit", "-q", "-m", "chore: initialize local memory", harness=True)


@dataclass
class _State:
    """Mutable bookkeeping shared by the writers (one event loop, no threads touch it)."""

    total: int
    progress: ProgressFn | None
    recorded: list[str] = field(default_factory=list)
    mapping: dict[str, str] = field(default_factory=dict)
    kept: set[str] = field(default_factory=set)
    merged: int = 0
    latencies: list[float] = field(default_factory=list)
    done: int = 0
    main_commits: int = 0

    def record(self, sha: str) -> None:
        self.recorded.append(sha)

    def absorb(self, outcome: MergeOutcome, latency: float) -> None:
        self.latencies.append(latency)
        for old, new in outcome.rewritten:
            self.mapping[old] = new

    def final(self, sha: str) -> str:
        seen = {sha}
        while sha in self.mapping:
            sha = self.mapping[sha]
            if sha in seen:
                break
            seen.add(sha)
        return sha


def _read_tree_files(checkout: Path) -> dict[str, bytes]:
    """Every file of the working tree outside ``.git`` (blocking)."""
    files: dict[str, bytes] = {}
    for folder, dirs, names in os.walk(checkout):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in names:
            if name == ".git":
                continue
            path = Path(folder, name)
            files[path.relative_to(checkout).as_posix()] = path.read_bytes()
    return files


def _write_and_validate(checkout: Path, rel: str, text: str) -> tuple[str, ...]:
    """Write one file, then validate the whole working tree in-process (blocking)."""
    (checkout / rel).write_text(text, encoding="utf-8")
    snapshot = build_snapshot(_read_tree_files(checkout))
    return validate_snapshot(snapshot, ROOT_MARKER).errors


async def _commit(checkout: Path, rel: str, text: str, message: str) -> str:
    """Validate in-process, commit with hooks bypassed (one git process), return the full SHA."""
    errors = await anyio.to_thread.run_sync(_write_and_validate, checkout, rel, text)
    if errors:
        raise RuntimeError(f"stress commit {message!r} would be invalid: {errors[0]}")
    for attempt in range(_COMMIT_RETRIES):
        out = await arun(checkout, "-c", "core.abbrev=40", "commit", "-a", "-m", message, check=False, harness=True)
        found = _SHA_IN_SUMMARY.search(out.stdout)
        if out.ok and found:
            return found.group(1)
        await sleep(0.005 * (attempt + 1))
    raise RuntimeError(f"stress commit {message!r} failed: {out.stderr.strip() or out.stdout.strip()}")


async def _writer(
    index: int,
    repo: Path,
    root: Path,
    config: StressConfig,
    state: _State,
    audit: AuditFn,
) -> None:
    rng = random.Random(config.seed * 1_000_003 + index)
    own = f"notes/writer-{index:02d}.md"
    wt: Worktree = await create_worktree(repo, agent_id=_AGENT, root=root)
    try:
        for start in range(0, config.commits, BATCH_SIZE):
            for k in range(start, min(start + BATCH_SIZE, config.commits)):
                message = f"writer {index} commit {k}"
                if rng.random() < config.conflict_rate:
                    sha = await _commit(wt.path, HOT_FILE, _note("hot", message), message)
                else:
                    sha = await _commit(wt.path, own, _note(f"writer-{index:02d}", message), message)
                state.record(sha)
                state.done += 1
                if state.progress is not None:
                    state.progress(state.done, state.total)
            outcome = await _merge_batch(repo, wt, state, audit)
            if outcome.status == "kept":
                state.kept.update(outcome.commits)
                await remove_worktree(repo, wt)
                wt = await create_worktree(repo, agent_id=_AGENT, root=root)
            elif outcome.status == "merged":
                state.merged += len(outcome.commits)
    finally:
        await remove_worktree(repo, wt)


async def _merge_batch(repo: Path, wt: Worktree, state: _State, audit: AuditFn) -> MergeOutcome:
    for attempt in range(_DIRTY_RETRIES):
        started = time.perf_counter()
        outcome = await merge_back(repo, wt.path, wt.branch, audit=audit)
        state.absorb(outcome, (time.perf_counter() - started) * 1000)
        if outcome.reason != REASON_DIRTY:
            return outcome
        await sleep(0.01 * min(attempt + 1, 10))
    return outcome


async def _main_writer(repo: Path, config: StressConfig, state: _State, stop: list[bool]) -> None:
    rng = random.Random(config.seed * 1_000_003 - 1)
    n = 0
    while not stop[0]:
        message = f"main commit {n}"
        rel, name = (HOT_FILE, "hot") if rng.random() < config.conflict_rate else ("notes/main.md", "main")
        state.record(await _commit(repo, rel, _note(name, message), message))
        state.main_commits += 1
        n += 1
        await sleep(config.main_interval)


def _read_object(proc: subprocess.Popen[bytes], oid: str) -> tuple[str, bytes]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(oid.encode() + b"\n")
    proc.stdin.flush()
    header = proc.stdout.readline().split()
    if len(header) != 3:
        raise RuntimeError(f"object {oid} is missing")
    data = proc.stdout.read(int(header[2]))
    proc.stdout.read(1)
    return header[1].decode(), data


def _sweep_invalid(repo: Path, commits: list[str]) -> int:
    """Audit every commit's tree in-process over one ``git cat-file --batch`` (blocking)."""
    proc = subprocess.Popen(["git", "cat-file", "--batch"], cwd=repo, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    trees: dict[str, dict[str, Entry]] = {}
    blobs: dict[str, bytes] = {}

    def tree(oid: str, prefix: str = "") -> dict[str, Entry]:
        key = prefix + "\0" + oid
        if key not in trees:
            _, data = _read_object(proc, oid)
            entries: dict[str, Entry] = {}
            pos = 0
            while pos < len(data):
                space = data.index(b" ", pos)
                nul = data.index(b"\0", space)
                mode = data[pos:space].decode()
                name = data[space + 1 : nul].decode("utf-8", "surrogateescape")
                sha = data[nul + 1 : nul + 21].hex()
                pos = nul + 21
                if mode == "40000":
                    entries.update(tree(sha, f"{prefix}{name}/"))
                else:
                    entries[prefix + name] = Entry(mode.zfill(6), sha)
            trees[key] = entries
        return trees[key]

    def commit_tree(oid: str) -> tuple[dict[str, Entry], dict[str, Entry]]:
        _, data = _read_object(proc, oid)
        lines = data.split(b"\n\n", 1)[0].decode().splitlines()
        own = tree(lines[0].split()[1])
        parents = [line.split()[1] for line in lines if line.startswith("parent ")]
        parent = commit_tree_only(parents[0]) if parents else {}
        return own, parent

    def commit_tree_only(oid: str) -> dict[str, Entry]:
        _, data = _read_object(proc, oid)
        return tree(data.split(b"\n", 1)[0].decode().split()[1])

    invalid = 0
    try:
        for sha in commits:
            index, head = commit_tree(sha)
            for entry in [*index.values(), *head.values()]:
                if entry.oid not in blobs and entry.mode.startswith("100"):
                    blobs[entry.oid] = _read_object(proc, entry.oid)[1]
            ordered = {p: index[p] for p in sorted(index, key=path_order_key)}
            snapshot = Snapshot(
                index=MappingProxyType(ordered),
                head=MappingProxyType(head),
                blobs=MappingProxyType(blobs),
                changes=MappingProxyType(diff_status(ordered, head)),
            )
            if not audit_snapshot(snapshot, ROOT_MARKER).ok:
                invalid += 1
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait()
    return invalid


async def run_stress(
    config: StressConfig,
    *,
    workdir: Path | None = None,
    progress: ProgressFn | None = None,
    audit: AuditFn = default_audit,
) -> StressReport:
    """Run the stress test in a fresh repository under ``workdir`` (a temporary dir when None)."""
    started = time.perf_counter()
    owned = workdir is None
    base = Path(await anyio.to_thread.run_sync(tempfile.mkdtemp, "", "reverie-stress-")) if owned else workdir
    assert base is not None
    repo, root = base / "memory", base / "worktrees"
    try:
        await _init_repo(repo, _initial_files(config.writers))
        state = _State(total=config.writers * config.commits, progress=progress)
        stop = [False]
        async with create_task_group() as outer:
            outer.start_soon(_main_writer, repo, config, state, stop)
            async with create_task_group() as tg:
                for i in range(config.writers):
                    tg.start_soon(_writer, i, repo, root, config, state, audit)
            stop[0] = True
        finals = [state.final(sha) for sha in state.recorded]
        reachable = set((await arun(repo, "rev-list", "--all", harness=True)).stdout.split())
        lost = sum(1 for sha in finals if sha not in reachable)
        present = [sha for sha in dict.fromkeys(finals) if sha in reachable]
        invalid = await anyio.to_thread.run_sync(_sweep_invalid, repo, present)
        return StressReport(
            merged=state.merged,
            kept=len(state.kept),
            lost=lost,
            invalid=invalid,
            merge_p50_ms=round(percentile(state.latencies, 50), 1),
            merge_p99_ms=round(percentile(state.latencies, 99), 1),
            recorded=len(state.recorded),
            main_commits=state.main_commits,
            merges=len(state.latencies),
            elapsed_s=round(time.perf_counter() - started, 2),
        )
    finally:
        if owned:
            await anyio.to_thread.run_sync(lambda: shutil.rmtree(base, ignore_errors=True))
