"""One task of a batch run, start to finish: the code every executor runs (in-process or in a Ray
worker), so results have one shape whatever runs them.

Layout under the run directory ``OUT``: ``OUT/home`` is the run's ``REVERIE_HOME`` (each task's
agent is named by the task id, its memory repository is ``OUT/home/agents/<id>/memory``),
``OUT/home/stores/<id>.sqlite3`` is the task's own store, ``OUT/work/<id>`` its bash workspace and
``OUT/events/<id>.jsonl`` its event log. A task always starts from nothing: whatever an
interrupted earlier attempt left is removed first (S24), and its memory repository is a
fresh copy of the run's template for its seed files (``OUT/templates/<key>/memory``).

Settings precedence (D15), as for ``chat``: the run's command-line overrides
(``RunOptions.overrides``) > the environment > the task's own ``settings`` > the user's
``config.toml`` (``RunOptions.config_file``, read where the command started, since each task's
``REVERIE_HOME`` is the run's) > defaults.
"""

from __future__ import annotations

import gc
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import anyio

from orchestrator.agent.budget import Meter
from orchestrator.agent.turn import TurnOutcome
from orchestrator.app.session import ChatSession
from orchestrator.app.telemetry import workflow
from orchestrator.app.usage import cost_usd
from orchestrator.base import blocking
from orchestrator.base.limits import Prices, limits_for
from orchestrator.base.paths import Home, using_home
from orchestrator.batch.eventlog import EventRecord, append_records, event_log_path
from orchestrator.batch.grading import grade_answer
from orchestrator.batch.judge import Judge, build_judge
from orchestrator.batch.results import CheckResult, TaskResult, reflection_outcomes, task_quality
from orchestrator.batch.suite import Task
from orchestrator.batch.templates import copy_template, template_repo
from orchestrator.memfs import collation, gitprocess, libgit
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.history import committed_bytes, read_committed
from orchestrator.memfs.provenance import scoped
from orchestrator.memfs.repo import head_revision
from orchestrator.models.scripted import ScriptedModel
from orchestrator.models.types import ModelClient
from orchestrator.store.records import utc_now
from orchestrator.store.worker import LANES_VARIABLE, SQLITE_LANES

__all__ = [
    "BATCH_GC_THRESHOLDS",
    "COUNTED_KINDS",
    "ProgressSink",
    "RUN_LIMIT_FILE",
    "RunOptions",
    "batch_process",
    "batch_sqlite_lanes",
    "load_backends",
    "run_home",
    "run_limit_reached",
    "run_task",
    "task_paths",
]

BATCH_GC_THRESHOLDS = (20_000, 10, 10)
"""``gc.set_threshold`` while a process's work is a batch run (``batch_process``)."""


def batch_sqlite_lanes(processes: int) -> int:
    """SQLite lanes for one of ``processes`` batch processes: the cores each has, at most the
    default. A lane only helps while a core is free to run SQLite beside the event loop, and every
    idle lane a job is handed to must be woken (a futex round trip, a context switch); the
    measurement is in ``bench/README.md`` ("SQLite lanes per batch process")."""
    return max(1, min(SQLITE_LANES, (os.cpu_count() or 1) // max(1, processes)))


def load_backends() -> None:
    """Import what every task needs and imports on first use (libgit2, ICU, tenacity: ~0.15 s), once
    per process, before a run's clock starts and before a worker says it is ready (and before
    workers are forked, so they inherit it). They are lazy so that ``chat -p`` and the pre-commit
    hook start fast; ``elapsed`` is the tasks' time (bench/scale.py prints the whole process's wall
    time beside it). So are the modules a chat loads after its first reply (the post-turn sync, the
    compiler and validator, merge-back and worktrees, the bash tool, reflection's trigger policy and
    the subagents' events): every task needs some of them,
    and the first task of each process would otherwise pay for them inside the clock. So is
    GitPython's command runner (~60 ms of CPU with its ``git version``): the run's first git process
    builds the template repository every task waits for, so its import held up the whole run."""
    import tenacity  # noqa: F401

    from orchestrator.agent import audit, memory_sync  # noqa: F401
    from orchestrator.base import subagent_events  # noqa: F401
    from orchestrator.memfs import merge, validator, worktrees  # noqa: F401
    from orchestrator.tools import bash  # noqa: F401
    from subagents import triggers  # noqa: F401

    libgit.load_pygit2()
    gitprocess.load_runner()
    collation.collation_key("")


ProgressSink = Callable[[str, str, Mapping[str, Any]], Awaitable[None]]
"""``(task_id, kind, payload)`` for live progress: every non-transient event of the task."""

COUNTED_KINDS: Mapping[str, str] = {
    "reflection.launch": "reflections_launched",
    "reflection.merged": "reflections_merged",
    "reflection.kept": "reflections_conflicted",
    "compaction.done": "compactions",
}


@dataclass(frozen=True)
class RunOptions:
    """What a run adds to every task. ``latency`` > 0 gives the scripted model a simulated latency
    (benchmarks); prices are USD per million tokens and make ``cost`` appear in results;
    ``estimate`` runs every task on the embedded model whatever is configured (``batch/estimate.py``)."""

    out_dir: Path
    overrides: Mapping[str, Any] = field(default_factory=dict)
    latency: float = 0.0
    price_in: float | None = None
    price_out: float | None = None
    config_file: str | None = None
    judge_model: str | None = None
    judge_base_url: str | None = None
    estimate: bool = False
    run_limits: Mapping[str, float] = field(default_factory=dict)
    """The run's own limits (B1), by measure: ``tokens``, ``cost`` (USD at the run's prices),
    ``seconds``; once one is reached no further task starts (``batch/run.py``)."""
    on_limit: str = "finish"
    """What a reached run limit does to the tasks running then: ``finish`` lets them end, ``stop``
    stops them (they get no result, so ``--resume`` runs them again)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "estimate": self.estimate,
            "run_limits": dict(self.run_limits),
            "on_limit": self.on_limit,
            "judge_model": self.judge_model,
            "judge_base_url": self.judge_base_url,
            "config_file": self.config_file,
            "out_dir": str(self.out_dir),
            "overrides": dict(self.overrides),
            "latency": self.latency,
            "price_in": self.price_in,
            "price_out": self.price_out,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> RunOptions:
        return cls(
            out_dir=Path(raw["out_dir"]),
            overrides=dict(raw.get("overrides") or {}),
            latency=float(raw.get("latency") or 0.0),
            price_in=raw.get("price_in"),
            price_out=raw.get("price_out"),
            config_file=raw.get("config_file"),
            judge_model=raw.get("judge_model"),
            judge_base_url=raw.get("judge_base_url"),
            estimate=bool(raw.get("estimate")),
            run_limits=dict(raw.get("run_limits") or {}),
            on_limit=str(raw.get("on_limit") or "finish"),
        )


@dataclass(frozen=True)
class _Paths:
    """Where one task's home, agent, memory, store, workspace and event log live in a run."""

    home: Path
    agent: Path
    memory: Path
    store: Path
    workspace: Path
    events: Path


def task_paths(out_dir: Path, task_id: str) -> _Paths:
    home = out_dir / "home"
    agent = home / "agents" / task_id
    return _Paths(
        home=home,
        agent=agent,
        memory=agent / "memory",
        store=home / "stores" / f"{task_id}.sqlite3",
        workspace=out_dir / "work" / task_id,
        events=event_log_path(out_dir, task_id),
    )


def run_home(out_dir: Path) -> Home:
    """The run's home, ``OUT/home``: every task's agent, store and worktrees live there, and its
    task stores skip syncs (``Home.scratch``). ``run_task`` makes it the current home for the task
    itself, so whoever calls it (an executor, a worker process, a library user) keeps its own."""
    home = Path(os.path.abspath(out_dir / "home"))
    return Home(root=home, worktrees=home / "worktrees", scratch=True)


@contextmanager
def batch_process(processes: int = 1) -> Iterator[None]:
    """Process-wide tuning for a process whose work is a batch run: only a process's own entry uses
    it (the ``run`` and ``sweep`` commands, a batch worker process), never the library, which must
    not change what the rest of a program's process sees.

    ``processes``: how many processes share the machine's cores for this run. Each gets
    ``batch_sqlite_lanes(processes)`` SQLite lanes unless ``REVERIE_SQLITE_LANES`` says otherwise
    (it applies where the lane pool has not started yet).

    The cyclic collector runs less often meanwhile (``BATCH_GC_THRESHOLDS``): a batch task
    allocates some ten thousand containers, nearly all freed by reference counting, so at the
    default first threshold (700) the collector ran about once per task and each run re-scanned the
    young objects of every task in flight (figures: ``bench/README.md``, "the collector in a batch").
    What is cyclic garbage is still collected, later. Both come back afterwards."""
    lanes_given = LANES_VARIABLE in os.environ
    if not lanes_given:
        os.environ[LANES_VARIABLE] = str(batch_sqlite_lanes(processes))
    thresholds = gc.get_threshold()
    gc.set_threshold(*BATCH_GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        if not lanes_given:
            os.environ.pop(LANES_VARIABLE, None)


def _reset(paths: _Paths, memory_files: Mapping[str, str] | None, first: Sequence[EventRecord] = ()) -> str:
    """Remove every trace of an earlier attempt, then create the seeded memory repository and start
    the event log with ``first`` (``task.start``, in the same hand-off); returns the repository's
    first commit (the task's memory base, what the report diffs against)."""
    for folder in (paths.agent, paths.workspace):
        if os.path.lexists(folder):
            shutil.rmtree(folder, ignore_errors=True)
    store = str(paths.store)
    for leftover in (store, f"{store}-wal", f"{store}-shm", f"{store}-journal", str(paths.events)):
        try:
            os.unlink(leftover)
        except FileNotFoundError:
            pass
    os.makedirs(paths.store.parent, exist_ok=True)
    template, base, tree = template_repo(paths.home.parent / "templates", memory_files or {})
    os.makedirs(paths.memory.parent, exist_ok=True)
    copy_template(template, paths.memory, tree)
    append_records(paths.events, first)
    return base


def _read_committed(memory: Path, rel: str) -> str | None:
    found = read_committed(memory, rel)
    return None if found is None else found.decode("utf-8", "replace")


def _head(memory: Path) -> str | None:
    """In-process (the pooled libgit2 handle): the runner asks after every turn."""
    with GitRepo(memory).open() as repo:
        if repo is not None:
            return repo.head()
    return head_revision(memory)


_FLUSH_SECONDS = 1.0
"""How long a batch task's event log may trail its events (``_EventPump``)."""


class _EventPump:
    """Copies the task's store events into its JSONL log and tallies the kinds the results count.

    It follows the store (``Store.follow_events``) rather than querying it per event, and writes the
    records gathered since the last write in one append. The runner flushes after every turn: the
    progress sink hears of them then, and the log is appended when ``_FLUSH_SECONDS`` have passed
    since its last append (and always with ``task.end``). So ``reverie events --follow`` lags a
    task by at most that much, while a batch of short tasks pays one thread hand-off per task for
    its log instead of one per turn (what is not yet written when a process dies belongs to a task
    without a result, which a resumed run starts again from scratch)."""

    def __init__(self, task_id: str, path: Path, sink: ProgressSink | None) -> None:
        self.task_id = task_id
        self.path = path
        self.sink = sink
        self.after_id = 0
        self.seq = 0
        self.counts: dict[str, int] = dict.fromkeys(COUNTED_KINDS.values(), 0)
        self.tokens_in = 0
        self.tokens_out = 0
        self._pending: list[EventRecord] = []
        self._unwritten: list[EventRecord] = []
        self._written_at = time.monotonic()
        self.subagent_in = 0
        self.subagent_out = 0
        self.replayed_tokens = 0
        self.calls = 0
        self.subagent_calls = 0
        self._lock = anyio.Lock()

    def _count_call(self, payload: Mapping[str, Any]) -> None:
        """Every call counts in the totals; calls made for another purpose than the chat (summaries,
        reflections, merge resolution) are also counted apart, so their cost shows. A replayed
        recorded reply (purpose ``replay``) made no call: it is counted apart and costs nothing."""
        prompt, completion = int(payload.get("prompt_tokens", 0)), int(payload.get("completion_tokens", 0))
        purpose = payload.get("purpose", "chat")
        if purpose == "replay":
            self.replayed_tokens += prompt + completion
            return
        self.tokens_in += prompt
        self.tokens_out += completion
        self.calls += 1
        if purpose != "chat":
            self.subagent_in += prompt
            self.subagent_out += completion
            self.subagent_calls += 1

    async def local(self, kind: str, payload: Mapping[str, Any], at: str) -> None:
        """A line the runner writes itself (``task.end``), after what is pending."""
        async with self._lock:
            self.seq += 1
            self._pending.append(EventRecord(self.seq, at, self.task_id, kind, dict(payload)))
        await self.flush(write=True)

    def first(self, kind: str, payload: Mapping[str, Any], at: str) -> list[EventRecord]:
        """The log's first line (``task.start``), for the caller to write; then ``announce`` it."""
        self.seq += 1
        return [EventRecord(self.seq, at, self.task_id, kind, dict(payload))]

    async def announce(self, records: Sequence[EventRecord]) -> None:
        """Tell the progress sink about records written elsewhere."""
        if self.sink is not None:
            for record in records:
                await self.sink(self.task_id, record.kind, record.payload)

    async def follow(self, store: Any) -> Callable[[], None]:
        """Catch up on what the store holds already, then take each new event as it is recorded.
        The listener is in place before the catch-up query, so an event committed while it runs is
        not missed: it waits in ``early`` and is taken after the query's rows (or skipped as one of
        them); the store tells listeners in id order, so ``_take`` may skip what it has seen by id."""
        early: list[Any] = []
        stop: Callable[[], None] = store.follow_events(early.append)
        try:
            caught_up = await store.events(after_id=self.after_id)
        except BaseException:
            stop()
            raise
        stop()
        for event in [*caught_up, *early]:
            self._take(event)
        return store.follow_events(self._take)

    def _take(self, event: Any) -> None:
        if event.id <= self.after_id:
            return
        self.after_id = event.id
        self.seq += 1
        self._pending.append(
            EventRecord(
                self.seq, event.at, self.task_id, event.kind, dict(event.payload),
                event.agent_id, event.conversation_id,
            )
        )
        if event.kind in COUNTED_KINDS:
            self.counts[COUNTED_KINDS[event.kind]] += 1
        elif event.kind == "model.call":
            self._count_call(event.payload)

    async def flush(self, *, write: bool = False) -> None:
        """Hand what is pending to the progress sink; append the log too when ``write`` or when it
        was last appended ``_FLUSH_SECONDS`` ago."""
        async with self._lock:
            records, self._pending = self._pending, []
            self._unwritten.extend(records)
            if self._unwritten and (write or time.monotonic() - self._written_at >= _FLUSH_SECONDS):
                lines, self._unwritten = self._unwritten, []
                await blocking.run_sync("files", partial(append_records, self.path, lines))
                self._written_at = time.monotonic()
        if self.sink is not None:
            for record in records:
                await self.sink(self.task_id, record.kind, record.payload)


def _judge(options: RunOptions, settings: Any) -> Judge | None:
    if not options.judge_model:
        return None
    return build_judge(options.judge_model, options.judge_base_url or settings.base_url, settings.api_key)


async def _grade(task: Task, answer: str, make_judge: Callable[[], Judge | None]) -> dict[str, Any] | None:
    """The result's ``grade`` for a task with an answer key (None without one): the deterministic
    grader's, or the verdict of the judge ``make_judge`` builds, if any (its client closed afterwards)."""
    if task.grade is None:
        return None
    graded = grade_answer(answer, task.grade.answer, task.grade.accept)
    grade: dict[str, Any] = {
        "ability": task.grade.ability,
        "answer": task.grade.answer,
        "passed": graded.passed,
        "matched": graded.matched,
        "method": "deterministic",
    }
    judge = make_judge()
    if judge is not None:
        try:
            grade["judge"] = await judge.verdict(question=task.turns[-1], key=task.grade.answer, reply=answer)
        finally:
            await judge.aclose()
        grade["passed"] = bool(grade["judge"]["passed"])
        grade["method"] = "judge"
    return grade


def _gap(earlier: str, later: str) -> float:
    """Seconds between two recorded sessions' dates (``suite.py`` writes them as UTC ISO 8601)."""
    def moment(date: str) -> datetime:
        return datetime.fromisoformat(date.replace("Z", "+00:00"))

    return (moment(later) - moment(earlier)).total_seconds()


def _now() -> str:
    return utc_now()


RUN_LIMIT_FILE = ".reverie-run-limit"
"""Written into the run directory by the driver when the run reached one of its limits (its name is
the content): a task that starts after it does not run (B1), whichever process or executor holds it."""


def run_limit_reached(out_dir: Path) -> str | None:
    """The run limit that was reached (``run.tokens``), or None while the run may launch tasks (blocking)."""
    try:
        return (out_dir / RUN_LIMIT_FILE).read_text(encoding="utf-8").strip() or "run"
    except FileNotFoundError:
        return None


def _meter_task(session: ChatSession, options: RunOptions) -> None:
    """The task's ``[limits] task_*`` (B1) above its session's: every turn and subagent charges both."""
    settings = session.runtime.settings
    limits = limits_for(settings, "task")
    meter = session.context.meter
    if meter is None or not limits.any:
        return
    prices = Prices(options.price_in or settings.price_in or 0.0, options.price_out or settings.price_out or 0.0)
    meter.parent = Meter(limits, prices)
    meter.prices = prices


async def run_task(task: Task, options: RunOptions, *, progress: ProgressSink | None = None) -> TaskResult:
    """Run one task in a fresh agent and memory repository and check the outcome.

    A task with ``history`` first replays each recorded session into a new conversation of the
    agent (``ChatSession.replay``), then sends its turns in one more new conversation, so only the
    agent's memory and ``conversation_search`` carry the history to the question. A task with a
    ``grade`` is graded deterministically (``orchestrator.batch.grading``), or by the judge
    ``options.judge_model`` names (``orchestrator.batch.judge``).

    The task runs in the run's home (``run_home``), set for this call only: the caller's home, and
    the process environment, are left as they were. Every commit the task's agent and reflections
make names the run (the run directory's name) and the task in its trailers (H1). Never raises for a task's own failure (that is
    an ``error`` result); cancellation propagates.
    """
    with using_home(run_home(options.out_dir)), scoped(run=options.out_dir.name, task=task.id):
        return await _run_task(task, options, progress)


async def _run_task(task: Task, options: RunOptions, progress: ProgressSink | None) -> TaskResult:
    started = time.perf_counter()
    paths = task_paths(options.out_dir, task.id)
    flags = {k: v for k, v in options.overrides.items() if v is not None}
    settings = {**task.settings, **flags}
    pump = _EventPump(task.id, paths.events, progress)
    turns = steps = replayed = 0
    memory_bytes: int | None = None
    outcomes: dict[str, int] = {}
    held: tuple[str, ...] = ()
    grade: dict[str, Any] | None = None
    settings_used: Any = None
    answer = ""
    error: str | None = None
    head: str | None = None
    base: str | None = None
    check_results: list[CheckResult] = []
    limited: str | None = None
    stopped = await blocking.run_sync("files", partial(run_limit_reached, options.out_dir))
    if stopped is not None:
        return TaskResult(id=task.id, status="limit", checks_passed=0, checks_total=len(task.checks),
                          error=f"not started: the run reached its {stopped} limit", limit=stopped,
                          worker_pid=os.getpid(), settings=settings)  # fmt: skip
    try:
        start = pump.first("task.start", {"task": task.id, "settings": settings, "pid": os.getpid()}, _now())
        base = await blocking.run_sync("git", partial(_reset, paths, task.memory_files, start))
        await pump.announce(start)
        embedded = options.latency > 0 or options.estimate
        model: ModelClient | None = ScriptedModel(latency=options.latency) if embedded else None
        session_cm = ChatSession.open(
            agent_id=task.id,
            new=True,
            cli=flags,
            suite=task.settings,
            config_file=Path(options.config_file) if options.config_file else None,
            model=model,
            workspace=paths.workspace,
            store_path=paths.store,
        )
        async with workflow(f"task {task.id}", {"reverie.task.id": task.id}), session_cm as session:
            store = session.runtime.store
            stop_following = await pump.follow(store)
            _meter_task(session, options)

            async def after(outcome: TurnOutcome, label: str) -> str | None:
                """The turn's error, if it ended in one (its memory commits are the session's own
                ``memory.commit`` events, V2; a turn stopped at a limit ends the task too, as ``limit``)."""
                nonlocal limited
                await pump.flush()
                if outcome.status == "limit":
                    limited = outcome.limit
                    return f"{label}: {outcome.error}"
                return f"{label}: {outcome.error}" if outcome.status == "error" else None

            for number, recorded in enumerate(task.history, start=1):
                if number > 1:
                    # the recorded gap between two sessions is idle time (docs/suite-format.md)
                    await session.idle(_gap(task.history[number - 2].date, recorded.date))
                await session.new_conversation()
                for user, assistant in recorded.exchanges:
                    outcome = await session.replay(user, assistant, at=recorded.date)
                    # no one waits on a recorded exchange: the subagents it started finish before the
                    # next one, so a replay's compactions and reflections, and its tokens, repeat exactly
                    await session.supervisor.drain()
                    replayed += 1
                    steps += outcome.steps
                    error = await after(outcome, f"history session {number}")
                    if error is not None:
                        break
                if error is not None:
                    break
            if error is None:
                if task.history:
                    await session.new_conversation()  # only memory and search carry the history over
                for text in task.turns:
                    outcome = await session.send(text)
                    turns += 1
                    steps += outcome.steps
                    answer = outcome.text
                    error = await after(outcome, f"turn {turns}")
                    if error is not None:
                        break
            await session.finish_one_shot()
            records = await store.reflections(task.id)
            outcomes = reflection_outcomes([r.status for r in records])
            held = tuple(r.branch for r in records if r.status == "kept_review")
            settings_used = session.runtime.settings
            stop_following()  # what it took last is written with task.end
        head = await blocking.run_sync("git", partial(_head, paths.memory))
        memory_bytes = await blocking.run_sync("git", partial(committed_bytes, paths.memory))
        for check in task.checks:
            if check.where == "answer":
                text_or_none: str | None = answer
            else:
                text_or_none = await blocking.run_sync("git", partial(_read_committed, paths.memory, check.file or ""))
            check_results.append(CheckResult(check.describe(), check.passes(text_or_none)))
        if error is None:
            grade = await _grade(task, answer, partial(_judge, options, settings_used))
    except anyio.get_cancelled_exc_class():
        raise
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    passed = sum(c.passed for c in check_results)
    graded_ok = grade is None or bool(grade["passed"])
    if limited is not None:
        status = "limit"
    elif error is not None:
        status = "error"
    elif passed == len(task.checks) and graded_ok:
        status = "passed"
    else:
        status = "failed"
    quality = task_quality(status, grade)
    cost = cost_usd(pump.tokens_in, pump.tokens_out, options.price_in, options.price_out)
    subagent_cost = cost_usd(pump.subagent_in, pump.subagent_out, options.price_in, options.price_out)
    result = TaskResult(
        id=task.id,
        status=status,
        checks_passed=passed,
        checks_total=len(task.checks),
        checks=tuple(check_results),
        turns=turns,
        steps=steps,
        tokens_in=pump.tokens_in,
        tokens_out=pump.tokens_out,
        cost=cost,
        subagent_tokens_in=pump.subagent_in,
        subagent_tokens_out=pump.subagent_out,
        subagent_cost=subagent_cost,
        wall_time=round(time.perf_counter() - started, 3),
        memory_head=head,
        memory_base=base,
        final_answer=answer,
        error=error,
        worker_pid=os.getpid(),
        settings=settings,
        # the store's records are the launches, one each: counted so, the outcomes always add up (once, under
        # load, the event log held one launch event fewer than the records; cause not found)
        reflections_launched=sum(outcomes.values()) if outcomes else pump.counts["reflections_launched"],
        reflections_merged=pump.counts["reflections_merged"],
        reflections_conflicted=pump.counts["reflections_conflicted"],
        compactions=pump.counts["compactions"],
        replayed_turns=replayed,
        replayed_tokens=pump.replayed_tokens,
        reflection_outcomes=outcomes,
        held_branches=held,
        memory_bytes=memory_bytes,
        grade=grade,
        quality=quality,
        model_calls=pump.calls,
        subagent_calls=pump.subagent_calls,
        limit=limited,
    )
    try:
        await pump.local("task.end", {"status": status, "checks_passed": passed, "error": error}, _now())
    except OSError:
        pass
    return result

