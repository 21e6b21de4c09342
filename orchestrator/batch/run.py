"""A whole run: which tasks still need running (``--resume``), where results go, the summary.

The results file is the journal: a task is done exactly when it has a line. ``--resume`` runs the
tasks without one, each from scratch (S24), and the summary is computed over every line,
so a resumed run's statuses and check results equal a clean run's.
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import anyio

from orchestrator.app.telemetry import workflow
from orchestrator.base import blocking
from orchestrator.base.errors import UsageError
from orchestrator.batch.estimate import estimate_row, read_estimate, write_estimate
from orchestrator.batch.protocol import Executor
from orchestrator.batch.report_html import write_report
from orchestrator.batch.results import (
    RESULTS_FILE,
    SUMMARY_FILE,
    TaskResult,
    append_results,
    compact_results,
    read_results,
    summarize,
    write_summary,
)
from orchestrator.batch.rundir import hold_run_dir
from orchestrator.batch.runner import RUN_LIMIT_FILE, ProgressSink, RunOptions, load_backends
from orchestrator.batch.suite import Task
from orchestrator.store.records import utc_now

__all__ = [
    "REPORT_FILE",
    "RETRY_STATUSES",
    "RUN_FILE",
    "RunReport",
    "mark_stale",
    "pending_tasks",
    "processes_setting",
    "retry_candidates",
    "run_suite",
]

RUN_FILE = "run.json"
RETRY_STATUSES = ("failed", "error")


class _Journal:
    """``results.jsonl`` appended with group commit: the results that finish while a write is in
    flight are written and synced together by the next one, and each caller returns once its own
    line is on disk (so "a task is done exactly when it has a line" holds as with a sync per line).
    At a thousand tasks finishing over a few seconds that is a fraction of the syncs and thread
    hand-offs a line each would cost the driver."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._pending: list[_Line] = []
        self._lock = anyio.Lock()

    async def append(self, result: TaskResult) -> None:
        line = _Line(result)
        self._pending.append(line)
        async with self._lock:
            if line.written:
                return
            batch, self._pending = self._pending, []
            try:
                await blocking.run_sync("files", partial(append_results, self._path, [b.result for b in batch]))
            except BaseException:
                self._pending[:0] = batch
                raise
            for written in batch:
                written.written = True


@dataclass
class _Line:
    """A task's result and whether its line is in results.jsonl yet."""

    result: TaskResult
    written: bool = False


@dataclass(frozen=True)
class RunReport:
    """A finished run: its results, the summary, and which tasks were skipped or ran."""

    results: tuple[TaskResult, ...]
    summary: dict[str, Any]
    skipped: tuple[str, ...]
    ran: tuple[str, ...]


def retry_candidates(results: Mapping[str, TaskResult], ids: Sequence[str]) -> set[str]:
    """Pure: which of ``ids`` have a result that failed or errored (so ``--retry-failed`` reruns them)."""
    return {i for i in ids if i in results and results[i].status in RETRY_STATUSES}


def processes_setting(executor: Executor) -> int | str:
    """``--processes`` as the executor was given it: ``"auto"`` or a number (1 for an executor that
    keeps every task in this process, or places them itself, as Ray does). ``run.json`` records it so
    that ``--resume`` and ``--retry-failed`` run the rest the way the run started."""
    processes = getattr(executor, "processes", 1)
    return "auto" if processes is None else int(processes)


def pending_tasks(tasks: Sequence[Task], done: Sequence[str] | set[str]) -> list[Task]:
    """Pure: the tasks without a result, in suite order."""
    finished = set(done)
    return [t for t in tasks if t.id not in finished]


class _RunBudget:
    """The run's spend against ``RunOptions.run_limits`` (B1): every result's tokens and cost, the
    earlier invocations' included (so ``--resume`` with a raised budget goes on from what was
    spent), and the run's wall time. When a limit is reached the run launches no further task (a
    file in the run directory says so to every worker, ``runner.RUN_LIMIT_FILE``), and with
    ``on_limit = stop`` the running ones are stopped too."""

    def __init__(self, options: RunOptions, out_dir: Path, done: Sequence[TaskResult], earlier: float) -> None:
        self.limits = dict(options.run_limits)
        self.on_limit = options.on_limit
        self.flag = out_dir / RUN_LIMIT_FILE
        self.tokens = sum(r.tokens_in + r.tokens_out for r in done)
        self.cost = sum(r.cost or 0.0 for r in done)
        self.earlier = earlier
        self.started = time.monotonic()
        self.reached: str | None = None
        self.not_run: list[str] = []
        self.stop: anyio.CancelScope | None = None
        seconds = self.limits.get("seconds")
        self.deadline = None if seconds is None else self.started + max(0.0, seconds - earlier)

    def reset(self) -> None:
        self.flag.unlink(missing_ok=True)

    def spent(self, measure: str) -> float:
        if measure == "seconds":
            return self.earlier + time.monotonic() - self.started
        return float(self.tokens if measure == "tokens" else self.cost)

    async def add(self, result: TaskResult) -> None:
        self.tokens += result.tokens_in + result.tokens_out
        self.cost += result.cost or 0.0
        await self.check()

    async def check(self) -> None:
        if self.reached is not None:
            return
        for measure in ("tokens", "cost", "seconds"):
            cap = self.limits.get(measure)
            if cap is not None and self.spent(measure) >= cap:
                await self._reach(f"run.{measure}")
                return

    async def watch_clock(self) -> None:
        assert self.deadline is not None
        await anyio.sleep(max(0.0, self.deadline - time.monotonic()))
        await self._reach("run.seconds")

    async def _reach(self, limit: str) -> None:
        if self.reached is not None:
            return
        self.reached = limit
        await blocking.run_sync("files", partial(self.flag.write_text, limit, encoding="utf-8"))
        if self.on_limit == "stop" and self.stop is not None:
            self.stop.cancel()

    def summary(self, missing: Sequence[str]) -> dict[str, Any] | None:
        """The summary's ``run_limit``: which limit stopped the run, its cap, what was spent and the
        tasks that did not run (``--resume`` with a raised limit runs them); None if none was reached."""
        if self.reached is None:
            return None
        measure = self.reached.partition(".")[2]
        return {
            "limit": self.reached,
            "cap": self.limits[measure],
            "spent": round(self.spent(measure), 6),
            "not_run": sorted(set(missing)),
            "on_limit": self.on_limit,
        }


def _prepare(out_dir: Path, resume: bool, meta: dict[str, Any]) -> dict[str, TaskResult]:
    out_dir.mkdir(parents=True, exist_ok=True)
    results_path = out_dir / RESULTS_FILE
    existing = read_results(results_path)
    if existing and not resume:
        raise UsageError(
            f"{out_dir} already holds results of {len(existing)} task(s): use --resume to finish that run, "
            "or choose another --out"
        )
    (out_dir / RUN_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return existing


REPORT_FILE = "report.html"
_STALE = (
    '<div id="reverie-stale" style="background:#fde68a;color:#000;padding:8px 12px;font:14px sans-serif">'
    "This report is stale: the run was {what} on {when} and its results have changed since it was written. "
    "<code>reverie report {where}</code> writes a fresh one.</div>"
)


def mark_stale(out_dir: Path, what: str) -> bool:
    """Put a banner at the top of the run's ``report.html`` saying it no longer matches the results
    (a resume or retry is changing them); False when there is no report. Blocking."""
    path = out_dir / REPORT_FILE
    try:
        page = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return False
    if 'id="reverie-stale"' not in page:
        banner = _STALE.format(what=what, when=utc_now()[:16].replace("T", " ") + " UTC", where=html.escape(str(out_dir)))
        page = page.replace("<body>", "<body>" + banner, 1)
        path.write_text(page, encoding="utf-8")
    return True


def _elapsed_so_far(out_dir: Path) -> float:
    """Real time the earlier invocations of this run directory took (their summary), so a resumed
    or retried run still reports the wall time of the whole run."""
    try:
        earlier = json.loads((out_dir / SUMMARY_FILE).read_text(encoding="utf-8"))
        return float(earlier.get("elapsed_total", earlier.get("elapsed")) or 0.0)
    except (OSError, ValueError, TypeError, AttributeError):
        return 0.0


async def run_suite(
    tasks: Sequence[Task],
    options: RunOptions,
    executor: Executor,
    *,
    resume: bool = False,
    retry: Sequence[str] | None = None,
    progress: ProgressSink | None = None,
    on_result: Callable[[TaskResult], Awaitable[None]] | None = None,
    suite_name: str = "",
) -> RunReport:
    """Run the tasks that have no result yet, owning ``options.out_dir`` throughout (``rundir``: a
    directory another process runs into is refused with ``RunDirBusy``, naming it); see
    ``_run_suite``."""
    async with hold_run_dir(options.out_dir, "reverie run"):
        return await _run_suite(
            tasks, options, executor, resume=resume, retry=retry, progress=progress, on_result=on_result,
            suite_name=suite_name,
        )


async def _run_suite(
    tasks: Sequence[Task],
    options: RunOptions,
    executor: Executor,
    *,
    resume: bool = False,
    retry: Sequence[str] | None = None,
    progress: ProgressSink | None = None,
    on_result: Callable[[TaskResult], Awaitable[None]] | None = None,
    suite_name: str = "",
) -> RunReport:
    """Run the tasks that have no result yet; results are appended as tasks finish. Cancelling
    (Ctrl-C) leaves every finished task recorded, so ``resume=True`` picks up where it stopped.

    ``retry`` (``--retry-failed``; implies ``resume``): these tasks run again from scratch even
    though they have a result, when that result failed or errored. The new result replaces the row
    (D15) with ``attempts`` one more than before; ``results.jsonl`` is rewritten with one
    line per task at the end, and the summary is over every task of the run. With OpenTelemetry on,
    the run is one ``invoke_workflow`` span around its tasks'."""
    async with workflow(f"run {suite_name or options.out_dir.name}", {"reverie.run.dir": str(options.out_dir)}):
        return await _run_tasks(tasks, options, executor, resume, retry, progress, on_result, suite_name)


async def _run_tasks(
    tasks: Sequence[Task],
    options: RunOptions,
    executor: Executor,
    resume: bool,
    retry: Sequence[str] | None,
    progress: ProgressSink | None,
    on_result: Callable[[TaskResult], Awaitable[None]] | None,
    suite_name: str,
) -> RunReport:
    out_dir = options.out_dir
    meta = {
        "suite": suite_name,
        "executor": executor.name,
        "concurrency": executor.concurrency,
        "processes": processes_setting(executor),
        "options": options.to_json(),
        "tasks": [t.id for t in tasks],
    }
    existing = await blocking.run_sync("files", partial(_prepare, out_dir, resume or retry is not None, meta))
    stale = bool(existing) and await blocking.run_sync(
        "files", partial(mark_stale, out_dir, "retried" if retry is not None else "resumed")
    )
    earlier_elapsed = await blocking.run_sync("files", partial(_elapsed_so_far, out_dir)) if existing else 0.0
    again = retry_candidates(existing, retry or ())
    todo = pending_tasks(tasks, set(existing) - again)
    previous = dict(existing)
    results_path = out_dir / RESULTS_FILE
    journal = _Journal(results_path)
    fresh: list[TaskResult] = []

    budget = _RunBudget(options, out_dir, [r for r in existing.values() if r.id not in again], earlier_elapsed)
    await blocking.run_sync("files", budget.reset)

    async def record(result: TaskResult) -> None:
        if result.status == "limit" and (result.limit or "").startswith("run."):
            budget.not_run.append(result.id)  # never started: no line, so --resume runs it
            return
        earlier = previous.get(result.id)
        if earlier is not None:
            result = replace(result, attempts=earlier.attempts + 1)
        await journal.append(result)
        existing[result.id] = result
        fresh.append(result)
        if on_result is not None:
            await on_result(result)
        await budget.add(result)

    await blocking.run_sync("files", load_backends)
    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        budget.stop = tg.cancel_scope
        if budget.deadline is not None:
            tg.start_soon(budget.watch_clock)
        await budget.check()
        await executor.run(todo, options, on_result=record, progress=progress)
        tg.cancel_scope.cancel()
    elapsed = time.perf_counter() - started
    wanted = {t.id for t in tasks}
    ordered = tuple(existing[t.id] for t in tasks if t.id in existing)
    summary = summarize([r for r in existing.values() if r.id in wanted], elapsed=elapsed)
    summary["elapsed_total"] = round(earlier_elapsed + elapsed, 3)
    summary["executor"] = executor.name
    summary["concurrency"] = executor.concurrency
    summary["resumed"] = len(tasks) - len(todo)
    if options.estimate:
        row = estimate_row(summary, options.price_in, options.price_out)
        await blocking.run_sync("files", partial(write_estimate, out_dir.parent, {"run": row}))
    else:
        summary["estimate"] = await blocking.run_sync("files", partial(read_estimate, out_dir))
    summary["run_limit"] = budget.summary([t.id for t in tasks if t.id not in existing])
    await blocking.run_sync("files", partial(write_summary, out_dir / SUMMARY_FILE, summary))
    if again:
        await blocking.run_sync("files", partial(compact_results, results_path))
    if stale:
        await blocking.run_sync("files", partial(write_report, out_dir))  # the old one was marked stale: rewrite it
    return RunReport(
        results=ordered,
        summary=summary,
        skipped=tuple(t.id for t in tasks if t.id not in {x.id for x in todo}),
        ran=tuple(r.id for r in fresh),
    )
