"""The engine of ``reverie stress`` (DECISIONS S21): concurrent writers against one memory repo.

Each of ``writers`` writers is a reflection-like session in its own worktree making ``commits``
commits, merged in batches of 5 through the same merge-back reflections use
(:func:`orchestrator.memfs.merge.merge_back`). Meanwhile a main writer commits on the main
checkout, as the primary agent does through the ``git`` wrapper: under the repository lock (D1).
A commit edits the shared hot file ``notes/hot.md`` with probability ``conflict_rate`` (so
concurrent sessions conflict), else the writer's own file.

Every commit is validated in-process before it is made (the whole tree, with the MemFS
validator) and then committed with hooks bypassed (S21); its SHA is recorded at commit time.
A ``pending`` batch (D2) is retried at once by its writer, and whatever is still pending when the
writers stop is settled as an idle agent would (retried until it merges or is kept) before
counting. A kept batch stays on its branch and the writer continues on a fresh worktree.

Merge policy (D3): ``keep`` (the default here, so the figures measure raw conflicts) or
``resolve`` (the resolver callable given by the caller, e.g. the scripted resolver subagent).

Counting (the ``--json`` keys; ``merged + resolved + kept + pending`` covers every session commit
unless a batch had nothing to merge):

* ``merged``: commits that reached ``HEAD`` through a clean merge-back;
* ``resolved``: commits that reached ``HEAD`` after the resolver reconciled a conflict;
* ``kept``: commits left on kept branches (D2's kept only: a real conflict, or invalid), named in
  ``kept_branches``; ``pending``: commits still pending after settling (0 unless git is stuck);
* ``retried``: how many times a merge started over because ``HEAD`` moved under it;
* ``lost``: recorded commits no ref reaches, neither themselves nor a copy. A rebase replaces
  commits by copies; merge-back reports each old → new pair and the recorded SHA is followed
  through them. A merge cancelled between rewriting and reporting (Ctrl-C) leaves pairs unreported:
  such a commit counts as carried when a reachable commit has its ``git patch-id --stable``;
* ``invalid``: recorded commits (after the same mapping) whose tree fails the audit
  (frontmatter rules and tree constraints, S13), each checked in-process;
* merge latency: wall time of each ``merge_back`` call, lock wait included.

Interrupted (``interrupt`` set, e.g. Ctrl-C in the CLI), the writers stop, pending work is
settled and the partial report says ``interrupted``.

Why one module of ~530 lines: it is one command's harness (writers, the main writer, settling, and the
counting sweep), and the counting rules above are only trustworthy read next to the code that counts.
"""

from __future__ import annotations

import math
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Any

import anyio.to_thread
from anyio import CancelScope, create_task_group, sleep
from anyio import Path as AsyncPath

from orchestrator.base import blocking
from orchestrator.base.errors import UsageError
from orchestrator.memfs.git import GitError, LocalRepo, ask, open_repo
from orchestrator.memfs.history import patch_ids, reachable_commits
from orchestrator.memfs.hook import install_hook
from orchestrator.memfs.locks import merge_lock
from orchestrator.memfs.merge import AuditFn, MergeOutcome, default_audit, delete_merged_branch, merge_back
from orchestrator.memfs.policy import ROOT_MARKER
from orchestrator.memfs.repo import (
    DEFAULT_MEMORY_FILES,
    harness_commit_all,
    harness_commit_tracked,
    harness_init,
)
from orchestrator.memfs.resolution import Resolver
from orchestrator.memfs.snapshot import Entry, Snapshot, build_snapshot, diff_status, path_order_key
from orchestrator.memfs.validator import audit_snapshot, validate_snapshot
from orchestrator.memfs.worktrees import Worktree, create_worktree, remove_worktree

__all__ = [
    "BATCH_SIZE",
    "HOT_FILE",
    "MERGE_POLICIES",
    "ProgressFn",
    "StressConfig",
    "StressReport",
    "percentile",
    "run_stress",
]

BATCH_SIZE = 5
HOT_FILE = "notes/hot.md"
ProgressFn = Callable[[int, int], None]
"""Called with ``(commits made by the session writers, their total)``."""

_AGENT = "stress"
_PENDING_RETRIES = 50
_COMMIT_RETRIES = 50
MERGE_POLICIES = ("keep", "resolve")


@dataclass(frozen=True)
class StressConfig:
    """The shape of a stress run: writers, commits each, how often they conflict, the merge policy."""

    writers: int
    commits: int
    conflict_rate: float = 0.1
    seed: int = 0
    main_interval: float = 0.25
    merge_policy: str = "keep"

    def __post_init__(self) -> None:
        if self.merge_policy not in MERGE_POLICIES:
            raise UsageError(f"--merge-policy must be keep or resolve, got {self.merge_policy!r}")
        if self.writers < 1:
            raise UsageError(f"--writers must be at least 1, got {self.writers}")
        if self.commits < 1:
            raise UsageError(f"--commits must be at least 1, got {self.commits}")
        if not 0.0 <= self.conflict_rate <= 1.0:
            raise UsageError(f"--conflict-rate must be between 0 and 1, got {self.conflict_rate}")


@dataclass(frozen=True)
class StressReport:
    """What a stress run measured; ``lost`` must be 0."""

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
    resolved: int = 0
    pending: int = 0
    retried: int = 0
    kept_branches: tuple[str, ...] = ()
    interrupted: bool = False

    def to_json(self) -> dict[str, Any]:
        """Exactly the keys the CLI's ``--json`` promises (and its table shows)."""
        return {
            "merged": self.merged,
            "kept": self.kept,
            "lost": self.lost,
            "invalid": self.invalid,
            "merge_p50_ms": self.merge_p50_ms,
            "merge_p99_ms": self.merge_p99_ms,
            "resolved": self.resolved,
            "pending": self.pending,
            "retried": self.retried,
            "kept_branches": list(self.kept_branches),
            "interrupted": self.interrupted,
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
    await harness_init(repo)
    await blocking.run_sync("git", lambda: install_hook(repo, ROOT_MARKER))
    await blocking.run_sync("files", partial(_write_files, repo, files))
    snapshot = await blocking.run_sync("files", lambda: build_snapshot(_read_tree_files(repo)))
    errors = validate_snapshot(snapshot, ROOT_MARKER).errors
    if errors:
        raise RuntimeError(f"stress repository would be invalid: {errors[0]}")
    await harness_commit_all(repo, "chore: initialize local memory")


@dataclass
class _State:
    """Mutable bookkeeping shared by the writers (one event loop, no threads touch it)."""

    total: int
    progress: ProgressFn | None
    recorded: list[str] = field(default_factory=list)
    mapping: dict[str, str] = field(default_factory=dict)
    kept: set[str] = field(default_factory=set)
    kept_branches: list[str] = field(default_factory=list)
    waiting: list[Worktree] = field(default_factory=list)
    merged: int = 0
    resolved: int = 0
    retried: int = 0
    latencies: list[float] = field(default_factory=list)
    done: int = 0
    main_commits: int = 0

    def record(self, sha: str) -> None:
        self.recorded.append(sha)

    def absorb(self, outcome: MergeOutcome, latency: float) -> None:
        self.latencies.append(latency)
        self.retried += outcome.retried
        for old, new in outcome.rewritten:
            self.mapping[old] = new

    def count(self, outcome: MergeOutcome) -> None:
        """Book a settled batch."""
        if outcome.status == "merged":
            self.merged += len(outcome.commits)
        elif outcome.status == "resolved":
            self.resolved += len(outcome.commits)
        elif outcome.status == "kept":
            self.kept.update(outcome.commits)
            self.kept_branches.append(outcome.branch)

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
    errors = await blocking.run_sync("files", partial(_write_and_validate, checkout, rel, text))
    if errors:
        raise RuntimeError(f"stress commit {message!r} would be invalid: {errors[0]}")
    for attempt in range(_COMMIT_RETRIES):
        try:
            return await harness_commit_tracked(checkout, message)
        except GitError as error:
            said = error.stderr.strip() or str(error)
        await sleep(0.005 * (attempt + 1))
    raise RuntimeError(f"stress commit {message!r} failed: {said}")


async def _writer(
    index: int,
    repo: Path,
    root: Path,
    config: StressConfig,
    state: _State,
    audit: AuditFn,
    resolver: Resolver | None,
) -> None:
    rng = random.Random(config.seed * 1_000_003 + index)
    own = f"notes/writer-{index:02d}.md"
    wt: Worktree | None = await create_worktree(repo, agent_id=_AGENT, root=root)
    try:
        for start in range(0, config.commits, BATCH_SIZE):
            assert wt is not None
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
            outcome = await _merge_batch(repo, wt, state, audit, resolver)
            if outcome.status == "pending":
                # Left for the idle-agent settling pass; the writer goes on on a fresh branch.
                state.waiting.append(wt)
                wt = await create_worktree(repo, agent_id=_AGENT, root=root)
                continue
            state.count(outcome)
            if outcome.status == "kept":
                await remove_worktree(repo, wt)
                wt = await create_worktree(repo, agent_id=_AGENT, root=root)
            elif outcome.status == "no_changes":
                continue
    finally:
        if wt is not None:
            with CancelScope(shield=True):
                await remove_worktree(repo, wt)
                await delete_merged_branch(repo, wt.branch)


async def _merge_batch(
    repo: Path, wt: Worktree, state: _State, audit: AuditFn, resolver: Resolver | None, retries: int = _PENDING_RETRIES
) -> MergeOutcome:
    for attempt in range(retries):
        started = time.perf_counter()
        outcome = await merge_back(repo, wt.path, wt.branch, audit=audit, resolver=resolver)
        state.absorb(outcome, (time.perf_counter() - started) * 1000)
        if outcome.status != "pending":
            return outcome
        await sleep(0.01 * min(attempt + 1, 10))
    return outcome


async def _settle(repo: Path, state: _State, audit: AuditFn, resolver: Resolver | None) -> int:
    """Retry every pending batch as an idle agent would (nothing else writes now); the commits
    still pending afterwards."""
    still = 0
    for wt in state.waiting:
        outcome = await _merge_batch(repo, wt, state, audit, resolver)
        if outcome.status == "pending":
            still += len(outcome.commits)
        else:
            state.count(outcome)
            if outcome.status == "kept":
                continue
        await remove_worktree(repo, wt)
        await delete_merged_branch(repo, wt.branch)
    return still


async def _main_writer(repo: Path, config: StressConfig, state: _State, stop: list[bool]) -> None:
    rng = random.Random(config.seed * 1_000_003 - 1)
    n = 0
    while not stop[0]:
        message = f"main commit {n}"
        rel, name = (HOT_FILE, "hot") if rng.random() < config.conflict_rate else ("notes/main.md", "main")
        async with merge_lock(repo):
            state.record(await _commit(repo, rel, _note(name, message), message))
        state.main_commits += 1
        n += 1
        await sleep(config.main_interval)


def _read_object(local: LocalRepo, oid: str) -> tuple[str, bytes]:
    found = local.read(oid)
    if found is None:
        raise GitError(("cat-file",), 128, f"fatal: object {oid} is missing", local.top_level)
    return found


def _sweep_invalid(repo: Path, commits: list[str]) -> int:
    """Audit every commit's tree in-process, objects read through the git seam (blocking)."""
    with open_repo(repo) as local:
        if local is None:
            raise GitError(("cat-file",), 128, "fatal: not the top level of a git repository", repo)
        return _sweep_with(local, commits)


def _sweep_with(local: LocalRepo, commits: list[str]) -> int:
    trees: dict[str, dict[str, Entry]] = {}
    blobs: dict[str, bytes] = {}

    def tree(oid: str, prefix: str = "") -> dict[str, Entry]:
        key = prefix + "\0" + oid
        if key not in trees:
            _, data = _read_object(local, oid)
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
        _, data = _read_object(local, oid)
        lines = data.split(b"\n\n", 1)[0].decode().splitlines()
        own = tree(lines[0].split()[1])
        parents = [line.split()[1] for line in lines if line.startswith("parent ")]
        parent = commit_tree_only(parents[0]) if parents else {}
        return own, parent

    def commit_tree_only(oid: str) -> dict[str, Entry]:
        _, data = _read_object(local, oid)
        return tree(data.split(b"\n", 1)[0].decode().split()[1])

    invalid = 0
    for sha in commits:
        index, head = commit_tree(sha)
        for entry in [*index.values(), *head.values()]:
            if entry.oid not in blobs and entry.mode.startswith("100"):
                blobs[entry.oid] = _read_object(local, entry.oid)[1]
        ordered = {p: index[p] for p in sorted(index, key=path_order_key)}
        snapshot = Snapshot(
            index=MappingProxyType(ordered),
            head=MappingProxyType(head),
            blobs=MappingProxyType(blobs),
            changes=MappingProxyType(diff_status(ordered, head)),
        )
        if not audit_snapshot(snapshot, ROOT_MARKER).ok:
            invalid += 1
    return invalid


async def _count_lost(repo: Path, unreached: list[str]) -> int:
    """How many of the recorded commits no ref reaches have no reachable copy either."""
    if not unreached:
        return 0
    carried = set((await blocking.run_sync("git", lambda: patch_ids(repo))).values())
    theirs = await blocking.run_sync("git", lambda: patch_ids(repo, unreached))
    return sum(1 for sha in unreached if theirs.get(sha) not in carried)


async def _pins_left(repo: Path) -> list[str]:
    return [name for name, _ in await ask(repo, lambda local: local.refs("refs/reverie/"))]


async def run_stress(
    config: StressConfig,
    *,
    workdir: Path | None = None,
    progress: ProgressFn | None = None,
    audit: AuditFn = default_audit,
    resolver: Resolver | None = None,
    interrupt: anyio.Event | None = None,
) -> StressReport:
    """Run the stress test in a fresh repository under ``workdir`` (a temporary dir when None).

    ``resolver`` is used only with ``merge_policy="resolve"``. Setting ``interrupt`` stops the
    writers early; the report then covers what was done (``interrupted``).
    """
    started = time.perf_counter()
    owned = workdir is None
    base = Path(await blocking.run_sync("files", partial(tempfile.mkdtemp, "", "reverie-stress-"))) if owned else workdir
    assert base is not None
    repo, root = base / "memory", base / "worktrees"
    policy_resolver = resolver if config.merge_policy == "resolve" else None
    try:
        await _init_repo(repo, _initial_files(config.writers))
        state = _State(total=config.writers * config.commits, progress=progress)
        stop = [False]
        interrupted = False
        async with create_task_group() as outer:
            outer.start_soon(_main_writer, repo, config, state, stop)
            async with create_task_group() as watch:
                with CancelScope() as writers_scope:
                    if interrupt is not None:
                        watch.start_soon(_cancel_on, interrupt, writers_scope)
                    async with create_task_group() as tg:
                        for i in range(config.writers):
                            tg.start_soon(_writer, i, repo, root, config, state, audit, policy_resolver)
                watch.cancel_scope.cancel()
            interrupted = writers_scope.cancelled_caught or (interrupt is not None and interrupt.is_set())
            # The main writer finishes the commit it is making (never leaves the checkout dirty).
            stop[0] = True
        with CancelScope(shield=True):
            pending = await _settle(repo, state, audit, policy_resolver)
            finals = [state.final(sha) for sha in state.recorded]
            reachable = await blocking.run_sync("git", lambda: reachable_commits(repo))
            lost = await _count_lost(repo, [sha for sha in finals if sha not in reachable])
            present = [sha for sha in dict.fromkeys(finals) if sha in reachable]
            invalid = await blocking.run_sync("git", partial(_sweep_invalid, repo, present))
            pins = await _pins_left(repo)
        if pins and not interrupted:
            raise RuntimeError(f"stress left {len(pins)} pre-rebase ref(s) behind, e.g. {pins[0]}")
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
            resolved=state.resolved,
            pending=pending,
            retried=state.retried,
            kept_branches=tuple(sorted(set(state.kept_branches))),
            interrupted=interrupted,
        )
    finally:
        if owned:
            with CancelScope(shield=True):
                await blocking.run_sync("files", lambda: shutil.rmtree(base, ignore_errors=True))


async def _cancel_on(event: anyio.Event, scope: CancelScope) -> None:
    await event.wait()
    scope.cancel()
