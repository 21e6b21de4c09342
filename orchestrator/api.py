"""reverie as a library: the functions ``orchestrator`` exports, each a thin layer over the code the
command line runs, so a Python program and ``reverie`` behave the same (docs/api.md).

The shape follows the libraries people drive from Python: a session is an async context manager
that owns its state once and every call reads it there (httpx's ``Client``); ``send`` returns the
turn's result and ``stream`` yields its events as they happen (the OpenAI Agents SDK's ``run`` and
``run_streamed``); a suite run returns its report and resumes or retries from its directory as
``reverie run --resume`` does (inspect_ai's ``eval`` and ``eval_retry``).

Nothing here changes the process: no environment variable, no collector threshold. Paths come from
a ``Home`` (the environment's unless one is given) that is set for the session's or the task's own
work only (``orchestrator.base.paths.using_home``), so a program may run a batch and keep a chat
open in the same process without one moving the other's files. Every function is a coroutine and
runs under anyio, on trio or asyncio.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectSendStream

from orchestrator.agent.turn import TurnOutcome
from orchestrator.app.memory_history import (
    LogFilter,
    memory_changes,
    policy_resolver,
    restore_memory,
    undo_changes,
)
from orchestrator.app.review import (
    Decision,
    ReflectionReview,
    discard_reflection,
    merge_reflection,
    show_reflection,
)
from orchestrator.app.session import ChatSession, ContextUse
from orchestrator.app.stress import ProgressFn, run_stress
from orchestrator.app.stress_faults import parse_faults
from orchestrator.app.stress_report import StressConfig, StressReport
from orchestrator.app.usage import Tally
from orchestrator.base import blocking
from orchestrator.base.config import Settings, load_settings, parameter_value
from orchestrator.base.errors import UsageError
from orchestrator.base.events import Event, ModelCalled, Observer
from orchestrator.base.paths import (
    DEFAULT_AGENT_ID,
    Home,
    PathArg,
    agent_memory_dir,
    as_home,
    as_path,
    current_home,
    using_home,
)
from orchestrator.batch.importers import CONTEXT_WINDOW, ImportOptions, import_benchmark, suite_text
from orchestrator.batch.launch import OnResult, PreparedRun, PreparedSweep, prepare_run, prepare_sweep
from orchestrator.batch.report_html import write_report
from orchestrator.batch.request import BatchRequest, triggers_given
from orchestrator.batch.run import RunReport
from orchestrator.batch.runner import ProgressSink
from orchestrator.batch.suite import parse_suite
from orchestrator.batch.sweep import SweepReport, SweepSetting
from orchestrator.compaction.result import CompactionResult
from orchestrator.compaction.settings import CompactionMode
from orchestrator.memfs.gitdir import is_repository
from orchestrator.memfs.history import Change
from orchestrator.memfs.undo import UndoOutcome
from orchestrator.models.scripted import ScriptedModel
from orchestrator.models.types import ModelClient
from orchestrator.store import ReflectionRecord
from subagents.resolver import make_resolver

__all__ = [
    "BatchRequest",
    "Change",
    "CompactionResult",
    "ContextUse",
    "Decision",
    "PreparedRun",
    "PreparedSweep",
    "ReflectionRecord",
    "ImportedSuite",
    "ReflectionReview",
    "Session",
    "TurnOutcome",
    "Usage",
    "import_suite",
    "UndoOutcome",
    "load_effective_settings",
    "memory_log",
    "open_session",
    "prepare_run",
    "prepare_sweep",
    "report",
    "restore",
    "run_suite",
    "stress",
    "sweep",
    "undo",
]

@dataclass(frozen=True)
class Usage:
    """Tokens a session's model calls used so far (its turns and its subagents'), and their cost in
    USD when prices were given (per million tokens), else ``None``."""

    prompt_tokens: int
    completion_tokens: int
    calls: int
    cost: float | None


def load_effective_settings(
    overrides: Mapping[str, Any] | None = None, *, home: Home | None = None, agent: Mapping[str, Any] | None = None
) -> Settings:
    """The settings a session would start with, each remembering its source (``Settings.explain``):
    ``overrides`` (as flags) > environment > ``agent`` > ``home``'s config file > defaults. Blocking."""
    where = home or current_home()
    return load_settings(cli=overrides, agent=agent, path=where.config_path)


def _overrides(settings: Settings | Mapping[str, Any] | None) -> dict[str, Any]:
    """A ``Settings`` value passes on what was set on it (its sources), a mapping passes as flags."""
    if settings is None:
        return {}
    if isinstance(settings, Settings):
        defaults = Settings()
        return {
            name: getattr(settings, name)
            for name in type(settings).__dataclass_fields__
            if name != "sources" and getattr(settings, name) != getattr(defaults, name)
        }
    return dict(settings)


class Session:
    """An open chat session (``open_session``): one agent, one conversation, its subagents.

    Every call runs in the session's ``Home``. The state a call changes (``set_model``) is the
    session's one ``SessionContext``, seen by the turn loop, reflection and compaction alike.
    """

    def __init__(self, chat: ChatSession, home: Home, tasks: TaskGroup) -> None:
        self._chat = chat
        self.home = home
        self._tasks = tasks
        self._listeners: list[MemoryObjectSendStream[Event]] = []
        self._tokens = [0, 0, 0]
        self.last_result: TurnOutcome | None = None
        """The result of the newest turn (``stream`` leaves its turn's here)."""

    async def _observe(self, event: Event) -> None:
        if isinstance(event, ModelCalled):
            self._tokens[0] += event.prompt_tokens
            self._tokens[1] += event.completion_tokens
            self._tokens[2] += 1
        for listener in list(self._listeners):
            listener.send_nowait(event)

    @property
    def agent_id(self) -> str:
        return self._chat.agent.agent_id

    @property
    def conversation_id(self) -> str:
        return self._chat.conversation_id

    @property
    def settings(self) -> Settings:
        return self._chat.settings

    @property
    def chat(self) -> ChatSession:
        """The session underneath, for what this class does not wrap (the CLI's chat uses it)."""
        return self._chat

    @property
    def usage(self) -> Usage:
        """The calls this session's model answered so far, counted as they happen, and their cost."""
        prompt, completion, calls = self._tokens
        return Usage(prompt, completion, calls, self._chat.cost(Tally(calls, prompt, completion)))

    async def cost(self) -> float | None:
        """USD this session spent so far, its turns' and its subagents' calls as the store recorded
        them (as the chat's ``/cost`` prints); None without prices."""
        with using_home(self.home):
            split = await self._chat.usage()
        return self._chat.cost(split.total)

    async def send(self, text: str) -> TurnOutcome:
        """Run one turn and return how it ended; a model failure is a result with ``status ==
        "error"``, not an exception. Reflection may start in the background afterwards."""
        with using_home(self.home):
            result = await self._chat.send(text)
        self.last_result = result
        return result

    async def stream(self, text: str) -> AsyncIterator[Event]:
        """Run one turn, yielding its events (``turn.start``, ``text.delta``, tool events, ...,
        ``turn.end``) as they happen; ``last_result`` holds the outcome afterwards. Closing the
        iterator early (``async with contextlib.aclosing(session.stream(text)) as events``, then
        leaving the loop) cancels the turn: it is stored ``interrupted`` and the store stays
        consistent. A turn whose iterator is dropped without closing runs to its end."""
        send, receive = anyio.create_memory_object_stream[Event](math.inf)
        failure: list[BaseException] = []
        scope = anyio.CancelScope()

        async def turn() -> None:
            with scope:
                try:
                    await self.send(text)
                except Exception as exc:
                    failure.append(exc)
                finally:
                    self._listeners.remove(send)
                    send.close()

        self._listeners.append(send)
        self._tasks.start_soon(turn, name=f"stream turn of {self.conversation_id}")
        try:
            async with receive:
                async for event in receive:
                    yield event
        finally:
            scope.cancel()
        if failure:
            raise failure[0]

    async def reflect(self, *, wait: float = math.inf) -> ReflectionRecord | None:
        """Reflect on the conversation now (as ``reverie reflect``): waits up to ``wait`` seconds for
        it to settle and returns its record (``status``: ``merged``, ``no_changes``, ``kept_*``,
        ``failed``), or ``None`` when there was nothing to reflect on."""
        with using_home(self.home):
            before = {r.id for r in await self._chat.runtime.store.reflections(self.agent_id)}
            await self._chat.reflect_now()
            await self._chat.supervisor.drain(wait)
            records = await self._chat.runtime.store.reflections(self.agent_id)
        fresh = [r for r in records if r.id not in before]
        return fresh[-1] if fresh else None

    async def reflections(self) -> list[ReflectionRecord]:
        """The agent's reflection records, oldest first; ``kept_review`` ones wait for a decision (V1)."""
        with using_home(self.home):
            return await self._chat.runtime.store.reflections(self.agent_id)

    async def show_reflection(self, reflection: str) -> ReflectionReview:
        """A reflection branch (id or name) with its diff and the transcript span it drew on."""
        with using_home(self.home):
            return await show_reflection(self._chat.runtime.store, self.agent_id, self._memory_dir, reflection)

    async def merge_reflection(self, reflection: str, *, by: str, why: str = "") -> Decision:
        """Merge a held or kept branch through merge-back (the lock, validation, the resolver on a
        conflict), recording who decided and why (as ``reverie reflections merge``)."""
        _check_text(by, "by")
        with using_home(self.home):
            async with self._chat.supervisor.conversation_lock(self.conversation_id):
                return await merge_reflection(
                    self._chat.runtime.store, self.agent_id, self._memory_dir, reflection, by=by, why=why,
                    resolver=self._chat.resolver,
                )  # fmt: skip

    async def discard_reflection(self, reflection: str, *, by: str, why: str) -> Decision:
        """Delete a branch and its unmerged commits, recording who decided and why (``why`` is required)."""
        _check_text(by, "by")
        with using_home(self.home):
            return await discard_reflection(
                self._chat.runtime.store, self.agent_id, self._memory_dir, reflection, by=by, why=why
            )

    @property
    def _memory_dir(self) -> Path:
        return self._chat.agent.memory_dir

    async def memory_log(
        self, *, source: str | None = None, path: str | None = None, since: str | None = None, count: int | None = None
    ) -> tuple[Change, ...]:
        """The changes of this agent's memory, newest first, each with who made it and why (as
        ``reverie memory log``)."""
        wanted = LogFilter(source=source, path=path, since=since, count=count)
        with using_home(self.home):
            return await memory_changes(self._chat.agent.memory_dir, wanted)

    async def undo(
        self,
        revision: str | None = None,
        *,
        reflection: str | None = None,
        since: str | None = None,
        run_dir: PathArg | None = None,
        dry_run: bool = False,
    ) -> UndoOutcome:
        """Take back a change (``revision``), a reflection's (its id), everything ``since`` a time or a
        batch run's commits with new commits, merged back as a reflection is (the session's merge
        policy decides a conflict); the session's next turn sees them as a ``<memory_update>``."""
        with using_home(self.home):
            return await undo_changes(
                self._chat.agent.memory_dir, agent_id=self.agent_id, revision=revision, reflection=reflection,
                since=since, run_dir=None if run_dir is None else as_path(run_dir, "run_dir"), dry_run=dry_run,
                resolver=self._chat.resolver,
            )

    async def compact(self, *, mode: CompactionMode | None = None) -> CompactionResult:
        """Compact the conversation now (as ``reverie compact``), between turns; ``mode`` as the
        ``compaction_mode`` setting takes it (``COMPACTION_MODES``)."""
        mode = parameter_value("compaction_mode", mode)
        with using_home(self.home):
            return await self._chat.compact(mode=mode)

    async def set_model(self, name: str) -> None:
        """Every request from now on (the turn's, reflection's, compaction's) names ``name``; it is
        remembered as the agent's setting."""
        with using_home(self.home):
            await self._chat.set_model(name)

    async def context_use(self) -> ContextUse:
        with using_home(self.home):
            return await self._chat.context_use()


def open_session(
    agent: str = DEFAULT_AGENT_ID,
    conversation: str | None = None,
    *,
    new: bool = False,
    home: Home | PathArg | None = None,
    settings: Settings | Mapping[str, Any] | None = None,
    model: ModelClient | None = None,
    workspace: PathArg | None = None,
    observer: Observer | None = None,
    price_in: float | None = None,
    price_out: float | None = None,
) -> AbstractAsyncContextManager[Session]:
    """Open ``agent``'s ``conversation`` (its latest when None, a new one with ``new=True``).

    ``home`` (default: the environment's) holds the agent, the store and the worktrees.
    ``settings`` rank as command-line flags: a mapping of setting names, or a ``Settings`` value
    whose non-default fields apply. ``model`` replaces the configured one (the scripted model or the
    endpoint); ``observer`` sees every event too. ``price_in``/``price_out`` (USD per million
    tokens) rank as flags over ``[model] price_in, price_out`` for ``usage`` and ``cost``. On exit the
    session's background work is cancelled or finished as a chat's is; a failure to open is a
    one-line ``ReverieError``. Paths may be ``str`` or ``os.PathLike``; a wrong type is a
    ``TypeError`` naming the parameter, raised by the call itself (before ``async with``).
    """
    _check_text(agent, "agent")
    if conversation is not None:
        _check_text(conversation, "conversation")
    price_in, price_out = parameter_value("price_in", price_in), parameter_value("price_out", price_out)
    where = current_home() if home is None else as_home(home)
    place = None if workspace is None else as_path(workspace, "workspace")
    return _open_session(
        agent, conversation, new=new, home=where, settings=settings, model=model, workspace=place,
        observer=observer, price_in=price_in, price_out=price_out,
    )


@asynccontextmanager
async def _open_session(
    agent: str,
    conversation: str | None,
    *,
    new: bool,
    home: Home,
    settings: Settings | Mapping[str, Any] | None,
    model: ModelClient | None,
    workspace: Path | None,
    observer: Observer | None,
    price_in: float | None,
    price_out: float | None,
) -> AsyncIterator[Session]:
    where = home
    holder: list[Session] = []

    async def observe(event: Event) -> None:
        if holder:
            await holder[0]._observe(event)
        if observer is not None:
            await observer(event)

    overrides = _overrides(settings)
    overrides.update({k: v for k, v in (("price_in", price_in), ("price_out", price_out)) if v is not None})
    with using_home(where):
        async with (
            ChatSession.open(
                agent_id=agent, conversation_id=conversation, new=new, cli=overrides,
                observer=observe, model=model, workspace=workspace, config_file=where.config_path,
            ) as chat,
            anyio.create_task_group() as tasks,  # inside the chat: a streamed turn ends before it closes
        ):
            session = Session(chat, where, tasks)
            holder.append(session)
            try:
                yield session
            finally:
                tasks.cancel_scope.cancel()


async def run_suite(
    suite: PathArg | None,
    out: PathArg | None = None,
    *,
    concurrency: int | None = None,
    executor: str | None = None,
    processes: int | str | None = None,
    resume: bool = False,
    retry_failed: bool = False,
    tasks: Sequence[str] | None = None,
    limit: int | None = None,
    model: str | None = None,
    context_window: int | None = None,
    price_in: float | None = None,
    price_out: float | None = None,
    scripted_latency: float | None = None,
    ray_address: str | None = None,
    progress: ProgressSink | None = None,
    on_result: OnResult | None = None,
    judge_model: str | None = None,
    judge_base_url: str | None = None,
    estimate: bool = False,
    max_tokens: int | None = None,
    max_cost: float | None = None,
    max_seconds: float | None = None,
    on_limit: str | None = None,
) -> RunReport:
    """``reverie run`` as a function: run ``suite``'s tasks into ``out`` and return the report.

    ``resume=True`` runs only the tasks without a result, with the options the run recorded unless
    given again; ``retry_failed=True`` reruns the failed and errored tasks of the run in ``out`` (its
    own suite when ``suite`` is None). Cancelling leaves every finished task recorded. A second run
    into a directory in use is refused (``RunDirBusy``); other refusals are one-line ``ReverieError``s.
    A task with an answer key is graded deterministically, or by ``judge_model`` (an
    OpenAI-compatible endpoint: ``judge_base_url``, else the configured ``base_url``). ``progress``
    sees every task's events, ``on_result`` every result as it is recorded. ``reverie run`` is this
    function in two steps (``prepare_run``, then ``PreparedRun.run``), forking its workers between.
    ``estimate=True`` runs the plan on the embedded model into ``out/estimate`` and writes
    ``out/estimate.json`` (calls, tokens, cost); a real run into ``out`` later reports it beside its spend.
    ``max_tokens``/``max_cost``/``max_seconds`` stop launching tasks once the run has spent that much,
    and ``on_limit="stop"`` stops the running ones too (``"finish"`` lets them end; B1).
    """
    suite = None if suite is None else as_path(suite, "suite")
    out = None if out is None else as_path(out, "out")
    if retry_failed and out is None:
        raise UsageError("retry_failed needs the run directory: give out")
    request = BatchRequest(
        suite, None if retry_failed else out, concurrency=concurrency, executor=executor, processes=processes,
        resume=resume, retry_failed=out if retry_failed else None, tasks=None if tasks is None else tuple(tasks),
        limit=limit, model=model, context_window=context_window, price_in=price_in, price_out=price_out,
        latency=scripted_latency, ray_address=ray_address, config_file=current_home().config_path,
        judge_model=judge_model, judge_base_url=judge_base_url, estimate=estimate, max_tokens=max_tokens,
        max_cost=max_cost, max_seconds=max_seconds, on_limit=on_limit,
    )
    prepared = await blocking.run_sync("files", partial(prepare_run, request))
    return await prepared.run(progress=progress, on_result=on_result)


async def sweep(
    suite: PathArg,
    triggers: str | Sequence[str] | None = None,
    out: PathArg | None = None,
    *,
    concurrency: int | None = None,
    executor: str | None = None,
    processes: int | str | None = None,
    resume: bool = False,
    tasks: Sequence[str] | None = None,
    limit: int | None = None,
    epochs: int | None = None,
    override_pinned: bool = False,
    model: str | None = None,
    context_window: int | None = None,
    price_in: float | None = None,
    price_out: float | None = None,
    scripted_latency: float | None = None,
    ray_address: str | None = None,
    progress_for: Callable[[SweepSetting], ProgressSink | None] | None = None,
    on_result_for: Callable[[SweepSetting], OnResult | None] | None = None,
    judge_model: str | None = None,
    judge_base_url: str | None = None,
    estimate: bool = False,
    max_tokens: int | None = None,
    max_cost: float | None = None,
    max_seconds: float | None = None,
    on_limit: str | None = None,
) -> SweepReport:
    """``reverie sweep`` as a function: the suite under each reflection-trigger setting
    (``"off"``, ``"compaction-event"``, ``"step-count:4,8"``; one string is one trigger, a refusal
    names ``triggers`` and the allowed values), one run each under ``out``, compared
    and decided (``report.summary``: quality with its interval, cost, the Pareto front and the
    recommended setting). ``epochs`` runs every task that many times per setting; tasks that pin
    their own trigger are left out unless ``override_pinned``; ``resume=True`` reuses what the sweep
    recorded (settings, epochs, prices, judge, limits) unless given again. ``max_tokens``/``max_cost``/
    ``max_seconds`` are the whole sweep's limits, every setting's spend together: once reached no
    further round of tasks starts, so every setting has run the same tasks, and ``on_limit="stop"``
    stops the running ones too (docs/design.md L3). ``progress_for`` and
    ``on_result_for`` give each setting's observers."""
    suite = as_path(suite, "suite")
    out = None if out is None else as_path(out, "out")
    request = BatchRequest(
        suite, out, concurrency=concurrency, executor=executor, processes=processes, resume=resume,
        tasks=None if tasks is None else tuple(tasks), limit=limit, model=model, context_window=context_window,
        price_in=price_in, price_out=price_out, latency=scripted_latency, ray_address=ray_address,
        config_file=current_home().config_path, judge_model=judge_model, judge_base_url=judge_base_url,
        estimate=estimate, triggers=triggers_given(triggers), epochs=epochs, override_pinned=override_pinned,
        max_tokens=max_tokens, max_cost=max_cost, max_seconds=max_seconds, on_limit=on_limit,
    )
    prepared = await blocking.run_sync("files", partial(prepare_sweep, request))
    return await prepared.run(
        progress_for=progress_for or (lambda _: None), on_result_for=on_result_for or (lambda _: None)
    )


async def stress(
    writers: int,
    commits: int,
    *,
    conflict_rate: float = 0.1,
    seed: int = 0,
    merge_policy: str = "keep",
    limit_pressure: bool = False,
    faults: str | None = None,
    workdir: PathArg | None = None,
    progress: ProgressFn | None = None,
    interrupt: anyio.Event | None = None,
) -> StressReport:
    """``reverie stress`` as a function: concurrent writers committing to one memory repository
    through worktrees and merging back; ``report.lost`` is the number of commits lost (must be 0).
    ``merge_policy="resolve"`` reconciles conflicts with the scripted resolver subagent; ``faults``
    (``"kill-merger,stale-lock"``) injects seeded faults; ``progress(done, total)`` follows the
    commits; setting ``interrupt`` stops the writers (the report covers what was done)."""
    config = StressConfig(
        writers=writers, commits=commits, conflict_rate=conflict_rate, seed=seed, merge_policy=merge_policy,
        limit_pressure=limit_pressure, faults=parse_faults(faults),
    )
    place = None if workdir is None else as_path(workdir, "workdir")
    resolver = make_resolver(ScriptedModel(), agent_id="stress", agent_name="stress") if merge_policy == "resolve" else None
    return await run_stress(config, workdir=place, progress=progress, resolver=resolver, interrupt=interrupt)


async def report(run_dir: PathArg, *, out: PathArg | None = None) -> Path:
    """``reverie report`` as a function: write the run's (or sweep's) ``report.html``; its path."""
    target = None if out is None else as_path(out, "out")
    return await blocking.run_sync("files", partial(write_report, as_path(run_dir, "run_dir"), out=target))


def _check_text(value: object, parameter: str) -> None:
    """An id the library takes is a ``str``: anything else is refused at the call, naming it."""
    if not isinstance(value, str):
        raise TypeError(f"{parameter} must be a str, not {type(value).__name__}")


@dataclass(frozen=True)
class ImportedSuite:
    """What ``import_suite`` wrote: the suite file, its task count and the count per ability."""

    path: Path
    tasks: int
    abilities: Mapping[str, int]


async def import_suite(
    benchmark: str,
    source: Path,
    out: Path,
    *,
    sample: int | None = None,
    seed: int = 0,
    abilities: Sequence[str] = (),
    context_window: int | None = None,
) -> ImportedSuite:
    """``reverie suite import`` as a function: read ``source`` as ``benchmark`` publishes it
    (``longmemeval``, ``locomo``, ``memoryagentbench``, ``memory-arena``) and write the suite to
    ``out``; ``sample`` questions spread over the abilities, chosen by ``seed`` (reproducible).
    A malformed record is a one-line ``SuiteError`` naming it; nothing is written then."""
    options = ImportOptions(
        sample=sample, seed=seed, abilities=tuple(abilities),
        context_window=CONTEXT_WINDOW if context_window is None else context_window,
    )

    def write() -> ImportedSuite:
        lines = import_benchmark(benchmark, Path(source), options)
        text = suite_text(lines)
        tasks = [line for line in lines if "reference" not in line]
        parse_suite(text, source=str(out))  # what it wrote must be a suite reverie runs
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text, encoding="utf-8")
        counts: dict[str, int] = {}
        for task in tasks:
            counts[task["grade"]["ability"]] = counts.get(task["grade"]["ability"], 0) + 1
        return ImportedSuite(Path(out), len(tasks), dict(sorted(counts.items())))

    return await blocking.run_sync("files", write)


def _memory_dir(agent: str, home: Home | PathArg | None) -> tuple[Home, Path]:
    _check_text(agent, "agent")
    where = current_home() if home is None else as_home(home)
    with using_home(where):
        repo = agent_memory_dir(agent)
    if not is_repository(repo):
        raise UsageError(f"agent {agent!r} has no memory repository at {repo}")
    return where, repo


async def memory_log(
    agent: str = DEFAULT_AGENT_ID,
    *,
    home: Home | PathArg | None = None,
    source: str | None = None,
    path: str | None = None,
    since: str | None = None,
    count: int | None = None,
) -> tuple[Change, ...]:
    """``agent``'s memory changes, newest first, with who made each and why (``reverie memory
    log``): a reflection's merged commits are one change, a commit reverie did not make is
    ``outside``. ``source``, ``path``, ``since`` and ``count`` narrow it as the command's options do."""
    where, repo = _memory_dir(agent, home)
    with using_home(where):
        return await memory_changes(repo, LogFilter(source=source, path=path, since=since, count=count))


async def undo(
    agent: str = DEFAULT_AGENT_ID,
    revision: str | None = None,
    *,
    reflection: str | None = None,
    since: str | None = None,
    run_dir: PathArg | None = None,
    dry_run: bool = False,
    home: Home | PathArg | None = None,
) -> UndoOutcome:
    """Take changes of ``agent``'s memory back with new commits (``reverie memory undo``): give one of
    ``revision``, ``reflection``, ``since`` or ``run_dir``. A conflict with later edits follows the
    agent's merge policy: reconciled by the resolver, or kept on a branch the outcome names."""
    where, repo = _memory_dir(agent, home)
    with using_home(where):
        settings = load_settings(path=where.config_path)
        return await undo_changes(
            repo, agent_id=agent, revision=revision, reflection=reflection, since=since,
            run_dir=None if run_dir is None else as_path(run_dir, "run_dir"), dry_run=dry_run,
            resolver=None if dry_run else policy_resolver(settings, agent),
        )


async def restore(
    agent: str = DEFAULT_AGENT_ID, *, at: str, dry_run: bool = False, home: Home | PathArg | None = None
) -> UndoOutcome:
    """Make ``agent``'s whole memory tree as of ``at`` (a revision, or a time) a new commit
    (``reverie memory restore --at``)."""
    where, repo = _memory_dir(agent, home)
    with using_home(where):
        settings = load_settings(path=where.config_path)
        return await restore_memory(
            repo, at, agent_id=agent, dry_run=dry_run, resolver=None if dry_run else policy_resolver(settings, agent)
        )
