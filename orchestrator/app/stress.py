"""The engine of ``reverie stress`` (S21, O7): concurrent writers against one memory repo.

Session writers commit in worktrees of their own and merge in batches through the same merge-back
reflections use, while a main writer commits on the main checkout under the repository lock (D1);
conflicts and limit-breaking combinations are made on purpose. Every commit is accounted for
(``recorded = merged + resolved + kept + pending + unmerged + main``, checked against git alone),
and the report ends in a verdict line. This module keeps the writers and the bookkeeping together
because the booking rules the equation checks are only trustworthy read next to the code that
books. How a run goes, the merge policies, interrupts and the harness's other modules are in
docs/architecture.md, "The stress harness"."""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from collections.abc import Callable
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import anyio
from anyio import CancelScope, create_task_group, sleep
from anyio import Path as AsyncPath

from orchestrator.app.stress_audit import count_invalid_heads, count_lost, unmerged_branches
from orchestrator.app.stress_faults import (
    FaultPlan,
    FaultTally,
    child_commit,
    child_merge,
    fill_disk,
    inject_stale_lock,
    plan_faults,
    recover_except,
    small_disk,
)
from orchestrator.app.stress_repo import (
    COMMIT_RETRIES,
    HOT_FILE,
    commit,
    init_repo,
    initial_files,
    note,
    would_be_valid,
)
from orchestrator.app.stress_report import StressConfig, StressReport, percentile
from orchestrator.base import blocking
from orchestrator.memfs.errors import GitError
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.history import commit_message
from orchestrator.memfs.indexlock import clear_stale_git_locks
from orchestrator.memfs.localrepo import LocalRepo
from orchestrator.memfs.locks import merge_lock
from orchestrator.memfs.merge import (
    AuditFn,
    MergeOutcome,
    ReflectionBranchError,
    default_audit,
    delete_merged_branch,
    merge_back,
    merge_branch,
)
from orchestrator.memfs.resolution import Resolver
from orchestrator.memfs.worktrees import Worktree, create_worktree, git_common_dir, remove_worktree

__all__ = ["BATCH_SIZE", "ProgressFn", "run_stress"]

BATCH_SIZE = 5
ProgressFn = Callable[[int, int], None]
"""Called with ``(commits made by the session writers, their total)``."""

_AGENT = "stress"
_PENDING_RETRIES = 50
_PRESSURE_STEP = 400
_PRESSURE_CHANCE = 0.5



# -- bookkeeping --------------------------------------------------------------------------------


@dataclass
class _State:
    """Mutable bookkeeping shared by the writers (one event loop, no threads touch it)."""

    config: StressConfig
    repo: Path
    root: Path
    audit: AuditFn
    resolver: Resolver | None
    plan: FaultPlan
    progress: ProgressFn | None
    disk: Path | None = None
    faults: FaultTally = field(default_factory=FaultTally)
    fault_lock: anyio.Lock = field(default_factory=anyio.Lock)
    recorded: list[str] = field(default_factory=list)
    heads: list[str] = field(default_factory=list)
    kept: int = 0
    kept_branches: list[str] = field(default_factory=list)
    waiting: list[tuple[Worktree, list[str]]] = field(default_factory=list)
    merged: int = 0
    resolved: int = 0
    retried: int = 0
    invalid_combined: int = 0
    latencies: list[float] = field(default_factory=list)
    done: int = 0
    main_commits: int = 0

    @property
    def total(self) -> int:
        return self.config.writers * self.config.commits

    def record(self, sha: str) -> None:
        self.recorded.append(sha)

    def record_main(self, sha: str) -> None:
        self.record(sha)
        self.heads.append(sha)
        self.main_commits += 1

    def absorb(self, outcome: MergeOutcome, latency: float) -> None:
        self.latencies.append(latency)
        self.retried += outcome.retried

    def book(self, outcome: MergeOutcome) -> None:
        """Book a settled batch by reverie's own outcome (what the equation checks)."""
        if outcome.status in {"merged", "resolved"} and outcome.new_head:
            self.heads.append(outcome.new_head)
        if outcome.status == "merged":
            self.merged += len(outcome.commits)
        elif outcome.status == "resolved":
            self.resolved += len(outcome.commits)
        elif outcome.status == "kept":
            self.kept += len(outcome.commits)
            self.kept_branches.append(outcome.branch)
            if outcome.reason_code == "invalid-combined":
                self.invalid_combined += 1

    def tick(self) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.total)


# -- a session writer ---------------------------------------------------------------------------


@dataclass
class _Writer:
    """One reflection-like session: commits in batches, merges, survives the faults aimed at it."""

    index: int
    state: _State
    wt: Worktree | None = None
    batch: list[str] = field(default_factory=list)
    pressure: int = 0

    async def run(self) -> None:
        config = self.state.config
        rng = random.Random(config.seed * 1_000_003 + self.index)
        self.wt = await self._fresh()
        try:
            for k in range(config.commits):
                await self._one_commit(k, rng)
                if (k + 1) % BATCH_SIZE == 0 or k == config.commits - 1:
                    await self._end_batch(k // BATCH_SIZE)
        finally:
            with CancelScope(shield=True):
                await self._leave()

    async def _fresh(self) -> Worktree:
        """A new worktree; retried while the disk is full (``enospc``) as a commit is."""
        for attempt in range(COMMIT_RETRIES):
            try:
                return await create_worktree(self.state.repo, agent_id=_AGENT, root=self.state.root)
            except GitError:
                if self.state.disk is None or attempt == COMMIT_RETRIES - 1:
                    raise
                await sleep(0.005 * (attempt + 1))
        raise AssertionError("unreachable")

    async def _edit(self, k: int, rng: random.Random) -> tuple[str, str, str]:
        message = f"writer {self.index} commit {k}"
        assert self.wt is not None
        if self.state.config.limit_pressure and rng.random() < _PRESSURE_CHANCE:
            name = f"pressure-{self.index:02d}"
            text = note(name, "p" * (self.pressure + _PRESSURE_STEP))
            errors = await blocking.run_sync("files", partial(would_be_valid, self.wt.path, f"{name}.md", text))
            if not errors:
                self.pressure += _PRESSURE_STEP
                return f"{name}.md", text, message
        if rng.random() < self.state.config.conflict_rate:
            rel, text = HOT_FILE, note("hot", message)
        else:
            rel, text = f"notes/writer-{self.index:02d}.md", note(f"writer-{self.index:02d}", message)
        errors = await blocking.run_sync("files", partial(would_be_valid, self.wt.path, rel, text))
        if errors:
            raise RuntimeError(f"stress commit {message!r} would be invalid: {errors[0]}")
        return rel, text, message

    async def _one_commit(self, k: int, rng: random.Random) -> None:
        rel, text, message = await self._edit(k, rng)
        assert self.wt is not None
        step = self.state.plan.commits.get((self.index, k))
        if step is not None:
            async with self.state.fault_lock:
                sha = await child_commit(self.wt.path, rel, message, text, step)
                made = sha is None and await self._restart_after_commit_kill(message)
            if made:
                self.state.tick()
                return
            if sha is None:
                rel, text, message = await self._edit(k, rng)
                assert self.wt is not None
                await commit(self.wt.path, rel, text, message, self._made)
            else:
                self._made(sha)
        else:
            await commit(self.wt.path, rel, text, message, self._made)
        self.state.tick()

    def _made(self, sha: str) -> None:
        self.state.record(sha)
        self.batch.append(sha)

    async def _restart_after_commit_kill(self, message: str) -> bool:
        """The killed writer restarts: reports its commit if git has it, recovery clears the dead
        worktree, its branch is re-queued, and it goes on in a fresh worktree. Whether the commit
        had been made (then it is reported and re-queued with its branch)."""
        state, wt = self.state, self.wt
        assert wt is not None
        state.faults.hit("kill-writer")
        found = await blocking.run_sync("git", partial(commit_message, wt.path))
        sha, body = found or ("", "")
        made = body.strip() == message
        if made:
            state.record(sha)
            self.batch.append(sha)
        state.faults.settle("kill-writer", await self._recover_and_requeue())
        return made

    async def _recover_and_requeue(self) -> str | None:
        """Start-up recovery for this writer's dead run, then its branch merged as start-up would."""
        state, wt = self.state, self.wt
        assert wt is not None
        report = await recover_except(state.repo, wt.id)
        problem = None
        if await AsyncPath(wt.path).exists():
            problem = f"worktree {wt.path} survived recovery"
        pending = {b.branch for b in report.pending}
        if wt.branch in pending:
            outcome = await _merge_named(state, wt.branch)
            if not outcome.settled or outcome.status == "failed":
                problem = problem or f"re-queued {wt.branch} ended {outcome.status}"
            if outcome.status == "pending":
                state.waiting.append((_gone(wt), list(self.batch)))
            else:
                state.book(outcome)
        elif self.batch:
            # The dead merge had fast-forwarded (recovery deleted the merged branch): booked as merged.
            state.book(MergeOutcome("merged", None, wt.branch, tuple(self.batch), (), None))
        self.batch = []
        self.wt = await self._fresh()
        return problem or await _dangling_pin(state.repo, wt)

    async def _end_batch(self, batch_no: int) -> None:
        """A lock holder may die here (``stale-lock``); then the batch is merged, if a restart
        after a kill has not already re-queued it."""
        state = self.state
        if (self.index, batch_no) in state.plan.locks:
            async with state.fault_lock:
                state.faults.hit("stale-lock")
                state.faults.settle("stale-lock", await inject_stale_lock(state.repo))
        if self.batch:
            await self._merge(batch_no)

    async def _merge(self, batch_no: int) -> None:
        state, wt = self.state, self.wt
        assert wt is not None
        step = state.plan.merges.get((self.index, batch_no))
        if (self.index, batch_no) in state.plan.disk_full and state.disk is not None:
            async with state.fault_lock:
                await self._merge_on_full_disk(state.disk)
            return
        if step is not None:
            async with state.fault_lock:
                started = time.perf_counter()
                policy = "resolve" if state.resolver is not None else "keep"
                killed = await child_merge(state.repo, wt.path, wt.branch, policy, step)
                if killed is None:
                    state.faults.hit("kill-merger")
                    state.faults.settle("kill-merger", await self._recover_and_requeue())
                    return
            state.absorb(killed, (time.perf_counter() - started) * 1000)
            outcome = killed
        else:
            outcome = await _merge_batch(state, wt)
        await self._take(outcome)

    async def _merge_on_full_disk(self, disk: Path) -> None:
        """``enospc``: the batch's merge meets a full disk; the disk is freed, recovery runs, and the
        batch is merged again. Recovered when that second merge settles and the checkout holds no
        half-done merge."""
        state, wt = self.state, self.wt
        assert wt is not None
        state.faults.hit("enospc")
        filler = await blocking.run_sync("files", partial(fill_disk, disk))
        try:
            full = await merge_back(state.repo, wt.path, wt.branch, audit=state.audit, resolver=state.resolver)
        finally:
            with CancelScope(shield=True):
                await AsyncPath(filler).unlink()
        await recover_except(state.repo, None)
        outcome = full if full.status != "failed" else await _merge_batch(state, wt)
        problem = None
        if outcome.status == "failed":
            problem = f"the merge after freeing the disk failed: {'; '.join(outcome.errors)}"
        async with merge_lock(state.repo):
            # Edits a writer is still retrying are fine; a half-done merge (unmerged entries) is not.
            status = await GitRepo(state.repo).ask(lambda local: local.status())
        unmerged = [f"{code} {path}" for code, path in status if code == "UU"]
        if unmerged:
            problem = problem or f"the checkout is left mid-merge: {unmerged[0]}"
        state.faults.settle("enospc", problem)
        await self._take(outcome)

    async def _take(self, outcome: MergeOutcome) -> None:
        """Book a batch's outcome; a pending or failed batch waits for the settling pass."""
        state, wt = self.state, self.wt
        assert wt is not None
        if outcome.status in {"pending", "failed"}:
            state.waiting.append((wt, self.batch))
            self.batch, self.wt = [], await self._fresh()
            return
        state.book(outcome)
        self.batch = []
        if outcome.status == "kept":
            await remove_worktree(state.repo, wt)
            self.wt = await self._fresh()

    async def _leave(self) -> None:
        """On the way out (done or cancelled): remove the worktree; a branch whose commits are all
        in ``HEAD`` (a merge cancelled after its fast-forward) is booked as merged and deleted, any
        other stays for the unmerged count."""
        state, wt = self.state, self.wt
        if wt is None:
            return
        await remove_worktree(state.repo, wt)
        if self.batch:
            if await GitRepo(state.repo).ask(partial(_in_head, f"refs/heads/{wt.branch}")):
                state.book(MergeOutcome("merged", None, wt.branch, tuple(self.batch), (), None))
                self.batch = []
        if not self.batch:
            await _delete_merged(state.repo, wt.branch)
        self.wt = None


async def _delete_merged(repo: Path, branch: str) -> None:
    """``delete_merged_branch`` that outlives a Ctrl-C's leftovers: a ref lock file the interrupt
    left (libgit2 was creating the branch as SIGINT arrived; 1 run in 30) is cleared as start-up
    recovery clears it, then the deletion is tried once more. A branch still not deletable stays:
    its commits are all in ``HEAD``, so no figure counts it and nothing is lost."""
    try:
        await delete_merged_branch(repo, branch)
        return
    except (GitError, OSError):
        pass
    common = await git_common_dir(repo)
    async with merge_lock(repo, common_dir=common):
        await blocking.run_sync("files", partial(clear_stale_git_locks, common, repo))
    with suppress(GitError, OSError):
        await delete_merged_branch(repo, branch)


async def _dangling_pin(repo: Path, wt: Worktree) -> str | None:
    """A pre-rebase pin of ``wt`` left with no branch to protect (a pin beside its branch is kept
    on purpose while the branch holds rebased copies)."""
    pin_name = f"refs/reverie/pre-rebase/{wt.id}"

    def pins_and_branch(local: LocalRepo) -> tuple[list[str], str | None]:
        pins = [name for name, _ in local.refs(pin_name) if name == pin_name or name.startswith(pin_name + "/")]
        return pins, local.ref(f"refs/heads/{wt.branch}")

    pins, branch = await GitRepo(repo).ask(pins_and_branch)
    if pins and branch is None:
        return f"pin {' '.join(pins)} survived recovery without its branch"
    return None


def _in_head(ref: str, local: LocalRepo) -> bool:
    """Whether the ref exists and all its commits are in ``HEAD`` (``git merge-base --is-ancestor``)."""
    tip, head = local.ref(ref), local.head()
    return tip is not None and head is not None and local.is_ancestor(tip, head)


def _gone(wt: Worktree) -> Worktree:
    """A waiting entry whose worktree recovery removed (the settle pass merges the branch alone)."""
    return Worktree(Path(""), wt.branch, wt.base_revision, wt.id)


async def _merge_named(state: _State, branch: str) -> MergeOutcome:
    """``reverie reflections merge``'s path: a branch without a live worktree, as start-up re-queues it."""
    started = time.perf_counter()
    try:
        outcome = await merge_branch(state.repo, branch, audit=state.audit, resolver=state.resolver)
    except ReflectionBranchError:
        return MergeOutcome("no_changes", None, branch, (), (), None)
    state.absorb(outcome, (time.perf_counter() - started) * 1000)
    return outcome


async def _merge_batch(state: _State, wt: Worktree, retries: int = _PENDING_RETRIES) -> MergeOutcome:
    for attempt in range(retries):
        started = time.perf_counter()
        outcome = await merge_back(state.repo, wt.path, wt.branch, audit=state.audit, resolver=state.resolver)
        state.absorb(outcome, (time.perf_counter() - started) * 1000)
        if outcome.status != "pending":
            return outcome
        await sleep(0.01 * min(attempt + 1, 10))
    return outcome


async def _settle(state: _State) -> tuple[int, list[str]]:
    """Retry every pending batch as an idle agent would (nothing else writes now): the commits still
    pending afterwards and their branches."""
    still, branches = 0, []
    for wt, batch in state.waiting:
        if wt.path == Path(""):
            outcome = await _merge_named(state, wt.branch)
        else:
            outcome = await _merge_batch(state, wt)
        if outcome.status == "pending":
            still += len(batch)
            branches.append(wt.branch)
            continue
        state.book(outcome)
        if wt.path != Path(""):
            await remove_worktree(state.repo, wt)
        if outcome.in_head:
            await delete_merged_branch(state.repo, wt.branch)
    return still, branches


# -- the main writer ----------------------------------------------------------------------------


async def _main_writer(state: _State, stop: list[bool]) -> None:
    config, repo = state.config, state.repo
    rng = random.Random(config.seed * 1_000_003 - 1)
    n = 0
    while not stop[0]:
        message = f"main commit {n}"
        rel, name = (HOT_FILE, "hot") if rng.random() < config.conflict_rate else ("notes/main.md", "main")
        text = note(name, message)
        async with merge_lock(repo):
            # Under the lock: a merge's fast-forward writes the checkout's files in place, and a
            # file read mid-write is torn (an empty notes/writer-NN.md, "missing frontmatter").
            errors = await blocking.run_sync("files", partial(would_be_valid, repo, rel, text))
        if errors:
            raise RuntimeError(f"stress commit {message!r} would be invalid: {errors[0]}")
        await commit(repo, rel, text, message, state.record_main, lock=repo)
        n += 1
        await sleep(config.main_interval)


# -- the run ------------------------------------------------------------------------------------


async def run_stress(
    config: StressConfig,
    *,
    workdir: Path | None = None,
    progress: ProgressFn | None = None,
    audit: AuditFn = default_audit,
    resolver: Resolver | None = None,
    interrupt: anyio.Event | None = None,
    plan: FaultPlan | None = None,
) -> StressReport:
    """Run the stress test in a fresh repository under ``workdir`` (a temporary dir when None).

    ``resolver`` is used only with ``merge_policy="resolve"``. ``plan`` pins the faults (a test
    aiming at one step); by default they are drawn from ``config.seed``. Setting ``interrupt`` stops the
    writers at once; the report then covers what was done (``interrupted``). A temporary work
    directory is removed only after a clean, complete run with an OK verdict; otherwise (interrupt,
    failed verdict, an exception) it is kept for inspection, its path in ``workdir``.
    """
    started = time.perf_counter()
    owned = workdir is None
    base = Path(await blocking.run_sync("files", partial(tempfile.mkdtemp, "", "reverie-stress-"))) if owned else workdir
    assert base is not None
    plan = plan or plan_faults(config.faults, config.seed, config.writers, config.commits, BATCH_SIZE)
    policy_resolver = resolver if config.merge_policy == "resolve" else None
    async with AsyncExitStack() as stack:
        home: Path = base
        disk: Path | None = None
        skipped: tuple[tuple[str, str], ...] = ()
        if "enospc" in config.faults:
            why = await stack.enter_async_context(small_disk(base / "disk"))
            if why is None:
                home = disk = base / "disk"
            else:
                skipped = (("enospc", why),)
        state = _State(config, home / "memory", home / "worktrees", audit, policy_resolver, plan, progress, disk)
        await init_repo(state.repo, initial_files(config.writers, config.limit_pressure))
        state.heads.append(await _head(state.repo))
        interrupted = await _run_writers(state, interrupt)
        with CancelScope(shield=True):
            report = replace(await _count(state, interrupted, started, base), faults_skipped=skipped)
            if disk is not None:
                await _copy_out(state.repo, base / "memory")
    with CancelScope(shield=True):
        if owned and report.ok and not report.interrupted:
            await blocking.run_sync("files", partial(shutil.rmtree, base, ignore_errors=True))
            report = replace(report, workdir=None)
    return report


async def _copy_out(repo: Path, to: Path) -> None:
    """The repository off the run's tmpfs before it is unmounted (its worktrees are gone by now)."""
    await blocking.run_sync("files", partial(shutil.copytree, repo, to, symlinks=True))
    await GitRepo(to).ask(lambda local: local.prune_worktrees())


async def _head(repo: Path) -> str:
    """The commit ``HEAD`` names; :class:`GitError` when it names none."""
    head = await GitRepo(repo).ask(lambda local: local.head())
    if head is None:
        raise GitError(("rev-parse", "HEAD"), 128, "fatal: HEAD names no commit", repo)
    return head


async def _run_writers(state: _State, interrupt: anyio.Event | None) -> bool:
    """Run the writers and the main writer; whether an interrupt stopped them."""
    stop = [False]
    async with create_task_group() as outer:
        outer.start_soon(_main_writer, state, stop)
        async with create_task_group() as watch:
            with CancelScope() as writers_scope:
                if interrupt is not None:
                    watch.start_soon(_cancel_on, interrupt, writers_scope)
                async with create_task_group() as tg:
                    for i in range(state.config.writers):
                        tg.start_soon(_Writer(i, state).run)
            watch.cancel_scope.cancel()
        # The main writer finishes the commit it is making (never leaves the checkout dirty).
        stop[0] = True
    return writers_scope.cancelled_caught or (interrupt is not None and interrupt.is_set())


async def _count(state: _State, interrupted: bool, started: float, base: Path) -> StressReport:
    repo = state.repo
    pending, pending_branches = 0, list[str]()
    if interrupted:
        for wt, _ in state.waiting:
            if wt.path != Path(""):
                await remove_worktree(repo, wt)
    else:
        pending, pending_branches = await _settle(state)
    unmerged = await unmerged_branches(repo, {*state.kept_branches, *pending_branches})
    lost, lost_ids = await count_lost(repo, state.recorded)
    reflog = await GitRepo(repo).ask(lambda local: local.reflog("refs/heads/main"))
    heads = [*state.heads, *reflog, await _head(repo)]
    invalid = await blocking.run_sync("git", partial(count_invalid_heads, repo, heads))
    return StressReport(
        merged=state.merged,
        kept=state.kept,
        lost=lost,
        invalid=len(invalid),
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
        unmerged_branches=tuple(sorted(unmerged.items())),
        invalid_combined=state.invalid_combined,
        writer_commits=tuple(state.recorded),
        lost_commits=lost_ids,
        faults_injected=tuple(sorted(state.faults.injected.items())),
        faults_recovered=tuple(sorted(state.faults.recovered.items())),
        faults_unrecovered=tuple(state.faults.unrecovered),
        faults_interrupted=state.faults.open,
        merge_policy=state.config.merge_policy,
        workdir=str(base),
    )


async def _cancel_on(event: anyio.Event, scope: CancelScope) -> None:
    await event.wait()
    scope.cancel()
