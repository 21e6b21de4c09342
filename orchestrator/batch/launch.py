"""A run or a sweep made ready to start: planned (``batch/plan.py``), its executor chosen and built,
and then run. ``reverie run``/``reverie sweep`` and the library's ``run_suite``/``sweep`` start here
alike, so the command line holds no wiring of its own (docs/api.md).

There are two steps because a command forks its worker processes before its event loop and its
first thread start (docs/architecture.md, "The local batch executor"): ``prepare_run`` and
``prepare_sweep`` are blocking and run first; a command then enters ``launched()`` outside any
event loop (it owns the run directory, forks the workers and tunes the process for a batch:
``batch_process``), and ``run`` is the coroutine either caller awaits. The library skips
``launched()``: it changes nothing process-wide, and ``run`` owns the directory itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from orchestrator.base.errors import UsageError
from orchestrator.batch.executors import ProcessExecutor, make_executor
from orchestrator.batch.plan import RunPlan, SweepPlan, plan_run, plan_sweep
from orchestrator.batch.protocol import Executor
from orchestrator.batch.ray_exec import ray_available
from orchestrator.batch.results import TaskResult
from orchestrator.batch.run import RunReport, run_suite
from orchestrator.batch.rundir import check_free, own_run_dir
from orchestrator.batch.runner import ProgressSink, batch_process
from orchestrator.batch.sweep import SweepReport, SweepSetting, expand_triggers, run_sweep

__all__ = ["OnResult", "PreparedRun", "PreparedSweep", "prepare_run", "prepare_sweep"]

OnResult = Callable[[TaskResult], Awaitable[None]]


def _executor(kind: str, concurrency: int, ray_address: str | None, processes: int | None) -> Executor:
    if kind == "ray" and not ray_available():
        raise UsageError("--executor ray needs Ray: pip install 'reverie[ray]'")
    return make_executor(kind, concurrency, ray_address=ray_address, processes=processes)


@contextmanager
def _launched(executor: Executor, out_dir: Path, command: str, tasks: int, runs: int) -> Iterator[None]:
    with own_run_dir(out_dir, command), ExitStack() as cleanup:
        if isinstance(executor, ProcessExecutor):
            executor.prefork(tasks, runs=runs)
            cleanup.callback(executor.release)
            cleanup.enter_context(batch_process(executor.plan(tasks)))
        else:
            cleanup.enter_context(batch_process(1))
        yield


@dataclass(frozen=True)
class PreparedRun:
    """A planned run with its executor built (``prepare_run``); ``plan`` says what it will do."""

    plan: RunPlan
    executor: Executor

    @contextmanager
    def launched(self, command: str = "reverie run") -> Iterator[None]:
        """A command's entry, before its event loop and threads: own the run directory (a second
        owner is refused, ``RunDirBusy``), fork the local executor's workers, tune the process."""
        with _launched(self.executor, self.plan.out_dir, command, len(self.plan.todo), 1):
            yield

    async def run(self, *, progress: ProgressSink | None = None, on_result: OnResult | None = None) -> RunReport:
        """Run it: ``progress`` sees every task's events, ``on_result`` every result as it is recorded."""
        plan = self.plan
        return await run_suite(
            list(plan.run_tasks), plan.options, self.executor, resume=plan.resume, retry=plan.retry,
            progress=progress, on_result=on_result, suite_name=str(plan.suite),
        )


@dataclass(frozen=True)
class PreparedSweep:
    """A planned sweep with its executor built (``prepare_sweep``); one executor serves every setting."""

    plan: SweepPlan
    executor: Executor

    @contextmanager
    def launched(self, command: str = "reverie sweep") -> Iterator[None]:
        """As ``PreparedRun.launched``, with every setting's workers forked up front; a sweep with
        nothing to compare is refused first."""
        self.plan.check_compared()
        with _launched(self.executor, self.plan.out_dir, command, self.plan.per_setting, len(self.plan.settings)):
            yield

    async def run(
        self,
        *,
        progress_for: Callable[[SweepSetting], ProgressSink | None] = lambda _: None,
        on_result_for: Callable[[SweepSetting], OnResult | None] = lambda _: None,
    ) -> SweepReport:
        """Run every setting; ``progress_for``/``on_result_for`` give each setting's observers."""
        plan = self.plan
        plan.check_compared()
        return await run_sweep(
            list(plan.tasks), list(plan.settings), plan.options, lambda: self.executor, resume=plan.resume,
            progress_for=progress_for, on_result_for=on_result_for, suite_name=str(plan.suite),
            epochs=plan.epochs, override_pinned=plan.override_pinned, references=plan.references,
        )


def prepare_run(
    suite: Path | None,
    out: Path | None = None,
    *,
    concurrency: int | None = None,
    executor: str | None = None,
    processes: int | str | None = None,
    resume: bool = False,
    retry_failed: Path | None = None,
    tasks: Sequence[str] | None = None,
    limit: int | None = None,
    model: str | None = None,
    context_window: int | None = None,
    price_in: float | None = None,
    price_out: float | None = None,
    latency: float | None = None,
    ray_address: str | None = None,
    config_file: Path | None = None,
    judge_model: str | None = None,
    judge_base_url: str | None = None,
    estimate: bool = False,
    max_tokens: int | None = None,
    max_cost: float | None = None,
    max_seconds: float | None = None,
    on_limit: str | None = None,
) -> PreparedRun:
    """Plan a run (``plan_run``: resume, retry, recorded options, ``estimate``, the run's limits) and
    build its executor. A run in progress in its directory is named before anything else is said
    about it (``RunDirBusy``); every refusal is a one-line ``ReverieError``. Blocking."""
    target = retry_failed or out or (Path("runs") / suite.stem if suite is not None else None)
    if target is not None:
        check_free(target)
    plan = plan_run(
        suite, out, concurrency=concurrency, executor=executor, processes=processes, resume=resume,
        retry_failed=retry_failed, tasks=tasks, limit=limit, model=model, context_window=context_window,
        price_in=price_in, price_out=price_out, latency=latency, config_file=config_file,
        judge_model=judge_model, judge_base_url=judge_base_url, estimate=estimate, max_tokens=max_tokens,
        max_cost=max_cost, max_seconds=max_seconds, on_limit=on_limit,
    )
    return PreparedRun(plan, _executor(plan.executor, plan.concurrency, ray_address, plan.processes))


def prepare_sweep(
    suite: Path,
    triggers: str | Sequence[str] | None = None,
    out: Path | None = None,
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
    latency: float | None = None,
    ray_address: str | None = None,
    config_file: Path | None = None,
    judge_model: str | None = None,
    judge_base_url: str | None = None,
    estimate: bool = False,
    triggers_name: str = "triggers",
) -> PreparedSweep:
    """Plan a sweep of ``triggers`` (``"off"``, ``"step-count:4,8"``...; one string is one trigger;
    None: what the sweep being resumed recorded) and build its executor; a refused trigger is named
    as ``triggers_name`` (the command line's ``--trigger``), other refusals as ``prepare_run``'s.
    ``estimate`` plans the sweep on the embedded model (``batch/estimate.py``). Blocking."""
    check_free(out or Path("runs") / f"{suite.stem}-sweep")
    try:
        given = expand_triggers(triggers, name=triggers_name) if triggers else None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    plan = plan_sweep(
        suite, given, out, concurrency=concurrency, executor=executor, processes=processes, resume=resume,
        tasks=tasks, limit=limit, epochs=epochs, override_pinned=override_pinned, model=model,
        context_window=context_window, price_in=price_in, price_out=price_out, latency=latency,
        config_file=config_file, judge_model=judge_model, judge_base_url=judge_base_url, estimate=estimate,
        triggers_name=triggers_name,
    )
    return PreparedSweep(plan, _executor(plan.executor, plan.concurrency, ray_address, plan.processes))
