"""``reverie run | sweep | events``: batch runs over task suites, trigger sweeps, and their event logs.

Progress goes to stderr (a rich bar with done/failed tasks, turns, tokens, reflections, merges,
compactions and ETA); the results table to stdout. ``run`` exits 1 when a task failed or errored,
130 when interrupted (finished tasks stay recorded: rerun with ``--resume``).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from orchestrator.cli.errors import fail
from orchestrator.cli.report import after_run

__all__ = ["MAX_CONCURRENCY", "RunProgress", "events", "register", "run", "sweep"]

_out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)
_err = Console(stderr=True, highlight=False)

MAX_CONCURRENCY = 4096
"""DECISIONS D8: a batch run may keep thousands of sessions in flight."""

ConcurrencyOption = Annotated[int, typer.Option("--concurrency", "-j", min=1, max=MAX_CONCURRENCY, help="Tasks run at once.")]
ResumeOption = Annotated[bool, typer.Option("--resume", help="Skip tasks already in results.jsonl; rerun the rest from scratch.")]
ExecutorOption = Annotated[str, typer.Option("--executor", help="local (in this process) or ray.")]
RayAddressOption = Annotated[
    str | None, typer.Option("--ray-address", help="Join this Ray cluster (default: a private loopback-only Ray).")
]
ModelOption = Annotated[str | None, typer.Option("--model", "-m", help="Model for every task (overrides the suite).")]
WindowOption = Annotated[
    int | None,
    typer.Option("--context-window", min=256, help="Context window in tokens for every task (overrides the suite)."),
]
PriceInOption = Annotated[float | None, typer.Option("--price-in", min=0, help="USD per million input tokens (adds cost).")]
PriceOutOption = Annotated[float | None, typer.Option("--price-out", min=0, help="USD per million output tokens.")]
ScriptedLatencyOption = Annotated[
    float,
    typer.Option(
        "--scripted-latency", min=0, max=3600, metavar="SECONDS",
        help="Give the embedded model this simulated latency per call (size concurrency before paying for a real model).",
    ),
]
ReportOption = Annotated[bool, typer.Option("--report", help="Write OUT/report.html at the end (see reverie report).")]
_COUNTS = ("turns", "tokens_in", "tokens_out", "reflections_launched", "reflections_merged", "reflections_conflicted", "compactions")
_LIVE_KIND = {
    "turn.end": "turns",
    "reflection.launch": "reflections_launched",
    "reflection.merged": "reflections_merged",
    "reflection.kept": "reflections_conflicted",
    "compaction.done": "compactions",
}


class RunProgress:
    """Live counters for the bar: finished tasks count their results, running tasks their events
    so far (Ray tasks report only when they finish)."""

    def __init__(self, progress: Progress | None, total: int, already: int = 0) -> None:
        self.progress = progress
        self.done = 0
        self.failed = 0
        self.final: Counter[str] = Counter()
        self.live: dict[str, Counter[str]] = {}
        self.bar = progress.add_task("run", total=total, completed=already, stats="") if progress else None

    def stats(self) -> dict[str, int]:
        totals = Counter(self.final)
        for counts in self.live.values():
            totals.update(counts)
        return {k: totals.get(k, 0) for k in _COUNTS}

    def _refresh(self) -> None:
        if self.progress is None or self.bar is None:
            return
        s = self.stats()
        text = (
            f"[green]✓ {self.done}[/] [red]✗ {self.failed}[/] · turns {s['turns']} · "
            f"tokens {s['tokens_in']:,}/{s['tokens_out']:,} · reflections {s['reflections_launched']} "
            f"merged {s['reflections_merged']} kept {s['reflections_conflicted']} · compactions {s['compactions']}"
        )
        self.progress.update(self.bar, stats=text)

    async def on_event(self, task_id: str, kind: str, payload: Mapping[str, Any]) -> None:
        counts = self.live.setdefault(task_id, Counter())
        if kind in _LIVE_KIND:
            counts[_LIVE_KIND[kind]] += 1
        elif kind == "model.call":
            counts["tokens_in"] += int(payload.get("prompt_tokens", 0))
            counts["tokens_out"] += int(payload.get("completion_tokens", 0))
        else:
            return
        self._refresh()

    async def on_result(self, result: Any) -> None:
        self.live.pop(result.id, None)
        for key in _COUNTS:
            self.final[key] += int(getattr(result, key))
        if result.status == "passed":
            self.done += 1
        else:
            self.failed += 1
        if self.progress is not None and self.bar is not None:
            self.progress.advance(self.bar)
        self._refresh()


@contextmanager
def _progress(enabled: bool) -> Iterator[Progress | None]:
    if not enabled:
        yield None
        return
    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(bar_width=24),
        MofNCompleteColumn(),
        TextColumn("{task.fields[stats]}"),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=_err,
        transient=False,
    )
    with bar:
        yield bar


def _load(suite: Path) -> list[Any]:
    from orchestrator.batch.suite import SuiteError, load_suite

    if suite.is_dir():
        fail(f"{suite}: is a directory; give the suite file (JSONL) (nothing was run)")
    try:
        return load_suite(suite)
    except SuiteError as exc:
        fail(f"{exc} (nothing was run)")
    except OSError as exc:
        fail(f"{suite}: cannot read the suite file: {exc.strerror or exc} (nothing was run)")


def _options(
    out: Path, model: str | None, window: int | None, price_in: float | None, price_out: float | None, latency: float = 0.0
) -> Any:
    from orchestrator.batch.runner import RunOptions

    overrides = {k: v for k, v in {"model": model, "context_window": window}.items() if v is not None}
    return RunOptions(out_dir=out, overrides=overrides, latency=latency, price_in=price_in, price_out=price_out)


def _executor(kind: str, concurrency: int, ray_address: str | None) -> Any:
    from orchestrator.batch.executors import make_executor
    from orchestrator.batch.ray_exec import ray_available

    if kind == "ray" and not ray_available():
        fail("--executor ray needs Ray: pip install 'reverie[ray]'")
    try:
        return make_executor(kind, concurrency, ray_address=ray_address)
    except ValueError as exc:
        fail(str(exc))


def _interrupted(exc: BaseException) -> bool:
    if isinstance(exc, KeyboardInterrupt):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(_interrupted(inner) for inner in exc.exceptions)
    return False


def _results_table(results: Any, summary: Mapping[str, Any], title: str) -> Table:
    table = Table(title=title, title_justify="left", show_footer=True)
    names = ["task", "status", "checks", "turns", "steps", "tok in", "tok out", "refl", "merged", "kept", "compact", "time s", "head"]
    for name in names:
        table.add_column(name, justify="left" if name in ("task", "status", "head") else "right")
    colour = {"passed": "green", "failed": "red", "error": "bold red"}
    for r in results:
        table.add_row(
            r.id, f"[{colour.get(r.status, 'white')}]{r.status}[/]", f"{r.checks_passed}/{r.checks_total}",
            str(r.turns), str(r.steps), f"{r.tokens_in:,}", f"{r.tokens_out:,}", str(r.reflections_launched),
            str(r.reflections_merged), str(r.reflections_conflicted), str(r.compactions), f"{r.wall_time:.2f}",
            (r.memory_head or "")[:8],
        )
    table.columns[0].footer = f"{summary['tasks']} tasks"
    table.columns[1].footer = f"{summary['passed']} passed"
    table.columns[2].footer = f"{summary['checks_passed']}/{summary['checks_total']}"
    for index, key in ((3, "turns"), (4, "steps"), (5, "tokens_in"), (6, "tokens_out"), (7, "reflections_launched"),
                       (8, "reflections_merged"), (9, "reflections_conflicted"), (10, "compactions")):
        table.columns[index].footer = f"{summary[key]:,}"
    table.columns[11].footer = f"{summary['wall_time']:.2f}"
    return table


def _print_failures(results: Any) -> None:
    for r in results:
        if r.status == "error":
            _out.print(f"[bold red]error[/] {r.id}: {r.error}")
        elif r.status == "failed":
            missed = "; ".join(c.check for c in r.checks if not c.passed)
            _out.print(f"[red]failed[/] {r.id}: {missed} (answer: {r.final_answer[:120]!r})")


def run(
    suite: Annotated[Path, typer.Argument(help="Suite file (JSONL; see docs/suite-format.md).")],
    concurrency: ConcurrencyOption = 1,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Run directory (default: runs/<suite name>).")] = None,
    resume: ResumeOption = False,
    executor: ExecutorOption = "local",
    ray_address: RayAddressOption = None,
    model: ModelOption = None,
    context_window: WindowOption = None,
    price_in: PriceInOption = None,
    price_out: PriceOutOption = None,
    scripted_latency: ScriptedLatencyOption = 0.0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    write_report: ReportOption = False,
) -> None:
    """Run every task of a suite, each in its own agent and memory repository, and check the results."""
    from orchestrator.batch.results import RESULTS_FILE, SUMMARY_FILE, read_results
    from orchestrator.batch.run import run_suite
    from orchestrator.cli.commands import run_async

    tasks = _load(suite)
    out_dir = out or Path("runs") / suite.stem
    options = _options(out_dir, model, context_window, price_in, price_out, scripted_latency)
    chosen = _executor(executor, concurrency, ray_address)
    recorded = read_results(out_dir / RESULTS_FILE)
    if recorded and not resume:
        fail(f"{out_dir} already holds results of {len(recorded)} task(s): use --resume to finish that run, or choose another --out")
    already = len({t.id for t in tasks} & set(recorded)) if resume else 0
    with _progress(not quiet) as bar:
        tracker = RunProgress(bar, len(tasks), already)

        async def main() -> Any:
            return await run_suite(
                tasks, options, chosen, resume=resume, progress=tracker.on_event,
                on_result=tracker.on_result, suite_name=str(suite),
            )

        try:
            report = run_async(main)
        except BaseException as exc:
            if not _interrupted(exc):
                raise
            if bar is not None:
                bar.stop()
            done = len(read_results(out_dir / RESULTS_FILE))
            _err.print(f"interrupted: {done} of {len(tasks)} task(s) recorded in {out_dir / RESULTS_FILE}; "
                       f"finish with: reverie run {suite} --out {out_dir} --resume")
            raise typer.Exit(130) from None
    summary = report.summary
    _out.print(_results_table(report.results, summary, f"{suite} · {chosen.name} executor · concurrency {concurrency}"))
    _print_failures(report.results)
    if report.skipped:
        _out.print(f"resumed: {len(report.skipped)} task(s) already done, {len(report.ran)} run now")
    _out.print(f"results: {out_dir / RESULTS_FILE}   summary: {out_dir / SUMMARY_FILE}   events: {out_dir / 'events'}")
    after_run(out_dir, write=write_report)
    if summary["failed"] or summary["error"]:
        raise typer.Exit(1)


def sweep(
    suite: Annotated[Path, typer.Argument(help="Suite file (JSONL; see docs/suite-format.md).")],
    trigger: Annotated[
        list[str],
        typer.Option("--trigger", "-t", help="off, compaction-event or step-count:N[,N...]; repeat for more settings."),
    ],
    concurrency: ConcurrencyOption = 1,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Sweep directory (default: runs/<suite name>-sweep).")] = None,
    resume: ResumeOption = False,
    executor: ExecutorOption = "local",
    ray_address: RayAddressOption = None,
    model: ModelOption = None,
    context_window: WindowOption = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
    write_report: ReportOption = False,
) -> None:
    """Run the suite under each reflection-trigger setting and compare them (table and PNG charts)."""
    from orchestrator.batch.sweep import COMPARISON_FILE, expand_triggers, run_sweep
    from orchestrator.cli.commands import run_async

    try:
        settings = expand_triggers(trigger)
    except ValueError as exc:
        fail(str(exc))
    tasks = _load(suite)
    out_dir = out or Path("runs") / f"{suite.stem}-sweep"
    options = _options(out_dir, model, context_window, None, None)
    _executor(executor, concurrency, ray_address)
    if not resume:
        from orchestrator.batch.results import RESULTS_FILE

        for setting in settings:
            if (out_dir / setting.label / RESULTS_FILE).exists():
                fail(f"{out_dir / setting.label} already holds results: use --resume, or choose another --out")

    with _progress(not quiet) as bar:
        trackers: dict[str, RunProgress] = {}

        def progress_for(setting: Any) -> Any:
            tracker = RunProgress(bar, len(tasks))
            if bar is not None and tracker.bar is not None:
                bar.update(tracker.bar, description=setting.label)
            trackers[setting.label] = tracker
            return tracker.on_event

        async def on_setting_done(setting: Any, report: Any) -> None:
            tracker = trackers[setting.label]
            for result in report.results:
                if result.id in report.ran:
                    await tracker.on_result(result)

        async def main() -> Any:
            async with AsyncExitStack() as stack:
                if executor == "ray":
                    from orchestrator.batch.ray_exec import ray_session

                    await stack.enter_async_context(ray_session(concurrency, ray_address))
                return await run_sweep(
                    tasks, settings, options, lambda: _executor(executor, concurrency, ray_address), resume=resume,
                    progress_for=progress_for, on_setting_done=on_setting_done, suite_name=str(suite),
                )

        try:
            report = run_async(main)
        except BaseException as exc:
            if not _interrupted(exc):
                raise
            _err.print(f"interrupted; finish with: reverie sweep {suite} --out {out_dir} --resume (and the same --trigger options)")
            raise typer.Exit(130) from None
    table = Table(title=f"sweep of {suite}", title_justify="left")
    for name in ("setting", "tasks passed", "checks passed", "reflections", "merges", "conflicts", "tokens", "wall time (s)"):
        table.add_column(name, justify="left" if name == "setting" else "right")
    for r in report.rows:
        table.add_row(
            r["setting"], f"{r['passed']}/{r['tasks']}", f"{r['checks_passed']}/{r['checks_total']}",
            str(r["reflections"]), str(r["merges"]), str(r["conflicts"]), f"{r['tokens']:,}", f"{r['wall_time']:.2f}",
        )
    _out.print(table)
    _out.print(f"comparison: {out_dir / COMPARISON_FILE}   charts: {', '.join(str(p) for p in report.charts)}")
    after_run(out_dir, write=write_report)


def events(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (the --out of reverie run).")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new events until the run ends (or Ctrl-C).")] = False,
    task: Annotated[str | None, typer.Option("--task", help="Only this task's events.")] = None,
    kind: Annotated[list[str] | None, typer.Option("--kind", "-k", help="Only these kinds (repeatable), e.g. model.call.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the raw JSON lines.")] = False,
) -> None:
    """Print a run's event log, oldest first: turns, model calls with tokens and latency, tools, commits, reminders, compactions, reflections."""
    from orchestrator.batch.eventlog import (
        EVENTS_DIR,
        event_log_path,
        follow_events,
        format_record,
        read_events,
    )
    from orchestrator.batch.results import SUMMARY_FILE

    kinds = tuple(kind or ())

    def show(record: Any) -> None:
        if as_json:
            print(json.dumps(record.to_json(), ensure_ascii=False), flush=True)
        else:
            print(format_record(record), flush=True)

    if not run_dir.is_dir():
        fail(f"{run_dir}: no such run directory")
    if not (run_dir / EVENTS_DIR).is_dir() and not follow:
        nested = sorted(p.parent.name for p in run_dir.glob(f"*/{EVENTS_DIR}"))
        hint = f" (a sweep? try {run_dir / nested[0]})" if nested else ""
        fail(f"{run_dir}: no event log here{hint}")
    if task is not None and not follow and not event_log_path(run_dir, task).exists():
        known = sorted(p.stem for p in (run_dir / EVENTS_DIR).glob("*.jsonl"))
        fail(f"{run_dir}: no events of task {task!r} (tasks: {', '.join(known) or 'none'})")
    if not follow:
        records = read_events(run_dir, task=task, kinds=kinds)
        for record in records:
            show(record)
        if kinds and not records:
            seen = sorted({r.kind for r in read_events(run_dir, task=task)})
            print(f"no events of kind {', '.join(kinds)} (kinds in this log: {', '.join(seen) or 'none'})", file=sys.stderr)
        return
    if not (run_dir / EVENTS_DIR).is_dir():
        _err.print(f"waiting for events in {run_dir / EVENTS_DIR} (Ctrl-C to stop)")
    summary = run_dir / SUMMARY_FILE
    before = summary.stat().st_mtime_ns if summary.exists() else None

    def finished() -> bool:
        return summary.exists() and summary.stat().st_mtime_ns != before

    try:
        for record in follow_events(run_dir, task=task, kinds=kinds, stop=finished):
            show(record)
    except KeyboardInterrupt:
        return


def register(app: typer.Typer) -> None:
    app.command("run")(run)
    app.command("sweep")(sweep)
    app.command("events")(events)


