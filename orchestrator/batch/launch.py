"""A run or a sweep made ready to start: planned (``batch/plan.py``), its executor chosen and built,
and then run. ``reverie run``/``reverie sweep`` and the library's ``run_suite``/``sweep`` start here
alike, so the command line holds no wiring of its own (docs/api.md).

Both take the one ``BatchRequest`` (``batch/request.py``) the library or the command line built.
There are two steps because a command forks its worker processes before its event loop and its
first thread start (docs/architecture.md, "The local batch executor"): ``prepare_run`` and
``prepare_sweep`` are blocking and run first; a command then enters ``launched()`` outside any
event loop (it owns the run directory, forks the workers and tunes the process for a batch:
``batch_process``), and ``run`` is the coroutine either caller awaits. The library skips
``launched()``: it changes nothing process-wide, and ``run`` owns the directory itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from orchestrator.base.errors import UsageError
from orchestrator.batch.executors import ProcessExecutor, make_executor
from orchestrator.batch.plan import RunPlan, SweepPlan, plan_run, plan_sweep
from orchestrator.batch.protocol import Executor
from orchestrator.batch.ray_exec import ray_available
from orchestrator.batch.request import BatchRequest
from orchestrator.batch.results import TaskResult
from orchestrator.batch.run import RunReport, run_suite
from orchestrator.batch.rundir import check_free, own_run_dir
from orchestrator.batch.runner import ProgressSink, batch_process
from orchestrator.batch.sweep import SweepReport, SweepSetting, run_sweep

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


def prepare_run(request: BatchRequest) -> PreparedRun:
    """Plan a run (``plan_run``: resume, retry, recorded options, ``estimate``, the run's limits) and
    build its executor. A run in progress in its directory is named before anything else is said
    about it (``RunDirBusy``); every refusal is a one-line ``ReverieError``. Blocking."""
    suite = request.suite
    target = request.retry_failed or request.out or (Path("runs") / suite.stem if suite is not None else None)
    if target is not None:
        check_free(target)
    plan = plan_run(request)
    return PreparedRun(plan, _executor(plan.executor, plan.concurrency, request.ray_address, plan.processes))


def prepare_sweep(request: BatchRequest) -> PreparedSweep:
    """Plan a sweep of ``request.triggers`` (``plan_sweep``; none: what the sweep being resumed
    recorded) and build its executor; refusals as ``prepare_run``'s. ``estimate`` plans the sweep on
    the embedded model (``batch/estimate.py``). Blocking."""
    if request.suite is None:
        raise UsageError("give the suite file (reverie sweep SUITE)")
    check_free(request.out or Path("runs") / f"{request.suite.stem}-sweep")
    plan = plan_sweep(request)
    return PreparedSweep(plan, _executor(plan.executor, plan.concurrency, request.ray_address, plan.processes))
