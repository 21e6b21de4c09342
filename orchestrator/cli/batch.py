"""``reverie run | sweep | events``: batch runs over task suites, trigger sweeps, and their event logs.

Progress goes to stderr (a rich bar with done/failed tasks, turns, tokens, reflections, merges,
compactions and ETA); the results table to stdout. ``run`` exits 1 when a task failed or errored,
130 when interrupted (finished tasks stay recorded: rerun with ``--resume``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from orchestrator.base.config import REFLECTION_TRIGGERS
from orchestrator.base.errors import ReverieError
from orchestrator.base.paths import DEFAULT_AGENT_ID
from orchestrator.batch.estimate import ESTIMATE_FILE, read_estimate
from orchestrator.batch.eventlog import (
    EVENTS_DIR,
    event_log_path,
    follow_events,
    format_record,
    read_events,
)
from orchestrator.batch.request import triggers_given
from orchestrator.batch.results import RESULTS_FILE, SUMMARY_FILE, read_results
from orchestrator.cli.aio import run_async
from orchestrator.cli.batch_output import (
    RunProgress,
    command_line,
    decision_lines,
    estimate_lines,
    estimate_table,
    failure_lines,
    progress_bar,
    quality_line,
    results_table,
    run_limit_line,
    sweep_table,
)
from orchestrator.cli.errors import fail
from orchestrator.cli.report import after_run
from orchestrator.cli.session_events import show_session_events

if TYPE_CHECKING:
    from orchestrator.batch.launch import PreparedRun, PreparedSweep
    from orchestrator.batch.run import RunReport
    from orchestrator.batch.sweep import SweepReport, SweepSetting

__all__ = [
    "ConcurrencyOption",
    "EstimateOption",
    "ExecutorOption",
    "JudgeBaseUrlOption",
    "JudgeModelOption",
    "MAX_CONCURRENCY",
    "MaxCostOption",
    "MaxSecondsOption",
    "MaxTokensOption",
    "ModelOption",
    "OnLimitOption",
    "PriceInOption",
    "PriceOutOption",
    "ProcessesOption",
    "RayAddressOption",
    "ReportOption",
    "ResumeOption",
    "RunProgress",
    "ScriptedLatencyOption",
    "WindowOption",
    "events",
    "register",
    "run",
    "sweep",
]

_out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)
_err = Console(stderr=True, highlight=False)

MAX_CONCURRENCY = 4096
"""D8: a batch run may keep thousands of sessions in flight."""

ConcurrencyOption = Annotated[int, typer.Option("--concurrency", "-j", min=1, max=MAX_CONCURRENCY, help="Tasks run at once.")]
ResumeOption = Annotated[bool, typer.Option("--resume", help="Skip tasks already in results.jsonl; rerun the rest from scratch.")]
ExecutorOption = Annotated[str, typer.Option("--executor", help="local (this machine; see --processes) or ray.")]
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
    float | None,
    typer.Option(
        "--scripted-latency", min=0, max=3600, metavar="SECONDS",
        help="Give the embedded model this simulated latency per call (size concurrency before paying for a real model).",
    ),
]
MaxTokensOption = Annotated[
    int | None,
    typer.Option("--max-tokens", min=1, help="Limit on model tokens, every task's together (a sweep's: every setting's): once reached no task starts (--resume with a raised one goes on)."),
]
MaxCostOption = Annotated[float | None, typer.Option("--max-cost", help="Limit on cost in USD at --price-in/--price-out (a sweep's: every setting's together).")]
MaxSecondsOption = Annotated[
    float | None, typer.Option("--max-seconds", help="Limit on wall time in seconds, earlier resumed invocations included.")
]
OnLimitOption = Annotated[
    str | None,
    typer.Option("--on-limit", metavar="finish|stop", help="At a limit: let running tasks finish (default) or stop them (--resume reruns them)."),
]
ReportOption = Annotated[bool, typer.Option("--report", help="Write OUT/report.html at the end (see reverie report).")]
EstimateOption = Annotated[
    bool,
    typer.Option("--estimate", help="Run the plan on the embedded model (free) and print the calls, tokens and, with prices, dollars it would spend."),
]
JudgeModelOption = Annotated[
    str | None,
    typer.Option("--judge-model", metavar="MODEL", help="Grade answer keys with this LLM judge (OpenAI-compatible) instead of the deterministic grader."),
]
JudgeBaseUrlOption = Annotated[
    str | None, typer.Option("--judge-base-url", metavar="URL", help="The judge's endpoint (default: the configured base_url).")
]
_PROCESSES_HELP = (
    "Local executor: run the tasks in N processes, this one and N-1 worker processes, which split --concurrency "
    "between them. auto (default): one per core, but only as many as keep about 16 tasks in flight each, so "
    "small runs stay in this process. 1: every task in this process."
)
ProcessesOption = Annotated[
    str | None, typer.Option("--processes", "-P", metavar="auto|N", help=_PROCESSES_HELP + " The same for every setting.")
]


@contextmanager
def _refused() -> Iterator[None]:
    """A refusal while planning (a ``ReverieError``) is the command's one-line error, rc 1."""
    try:
        yield
    except ReverieError as exc:
        fail(str(exc))


def _interrupted(exc: BaseException) -> bool:
    if isinstance(exc, KeyboardInterrupt):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(_interrupted(inner) for inner in exc.exceptions)
    return False


def run(
    suite: Annotated[
        Path | None, typer.Argument(help="Suite file (JSONL; see docs/suite-format.md). --retry-failed: the run's own by default.")
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", "-j", min=1, max=MAX_CONCURRENCY, help="Tasks run at once (default 1; --resume/--retry-failed: the run's own)."),
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Run directory (default: runs/<suite name>).")] = None,
    resume: ResumeOption = False,
    retry_failed: Annotated[
        Path | None,
        typer.Option("--retry-failed", metavar="RUN_DIR", help="Rerun that run's failed and errored tasks in place (the rest are kept)."),
    ] = None,
    task: Annotated[list[str] | None, typer.Option("--task", "-t", help="Run only this task (repeatable).")] = None,
    limit: Annotated[int | None, typer.Option("--limit", "-n", min=1, help="Run only the first N tasks (after --task).")] = None,
    executor: Annotated[str | None, typer.Option("--executor", help="local (this machine, the default; see --processes) or ray.")] = None,
    ray_address: RayAddressOption = None,
    processes: Annotated[
        str | None,
        typer.Option(
            "--processes", "-P", metavar="auto|N",
            help=_PROCESSES_HELP + " --resume/--retry-failed: the run's own unless given (run.json).",
        ),
    ] = None,
    model: ModelOption = None,
    context_window: WindowOption = None,
    price_in: PriceInOption = None,
    price_out: PriceOutOption = None,
    scripted_latency: ScriptedLatencyOption = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    write_report: ReportOption = False,
    judge_model: JudgeModelOption = None,
    judge_base_url: JudgeBaseUrlOption = None,
    estimate: EstimateOption = False,
    max_tokens: MaxTokensOption = None,
    max_cost: MaxCostOption = None,
    max_seconds: MaxSecondsOption = None,
    on_limit: OnLimitOption = None,
) -> None:
    """Run every task of a suite, each in its own agent and memory repository, and check the results."""
    # lazy: `reverie --help` imports every command module (cli/app.py)
    from orchestrator.api import BatchRequest, prepare_run

    owned = ExitStack()
    with _refused():
        prepared = prepare_run(BatchRequest(
            suite, out, concurrency=concurrency, executor=executor, processes=processes, resume=resume,
            retry_failed=retry_failed, tasks=None if task is None else tuple(task), limit=limit, model=model,
            context_window=context_window, price_in=price_in, price_out=price_out, latency=scripted_latency,
            ray_address=ray_address, judge_model=judge_model, judge_base_url=judge_base_url, estimate=estimate,
            max_tokens=max_tokens, max_cost=max_cost, max_seconds=max_seconds, on_limit=on_limit,
        ))
        for note in prepared.plan.notes:
            _err.print(note, soft_wrap=True, markup=False)
        owned.enter_context(prepared.launched("reverie run"))
    with owned:
        _run_prepared(prepared, ray_address, quiet, write_report, task, limit)


def _run_prepared(prepared: PreparedRun, ray_address: str | None, quiet: bool, write_report: bool,
                  task: list[str] | None, limit: int | None) -> None:
    plan = prepared.plan
    suite, out_dir, run_tasks, todo, retry = plan.suite, plan.out_dir, plan.run_tasks, plan.todo, plan.retry
    retry_failed = retry is not None
    options, kind, jobs = plan.options, plan.executor, plan.concurrency
    overrides = options.overrides
    model, context_window = overrides.get("model"), overrides.get("context_window")
    price_in, price_out, latency = options.price_in, options.price_out, options.latency
    processes = plan.processes_given
    again = plan.again
    if retry_failed:
        missing = len(todo) - len(again)
        _err.print(f"retrying {len(again)} failed or errored task(s)" + (f" and {missing} without a result" if missing else "")
                   + f" in {out_dir}")
    resume_line = command_line(
        ["run", suite], {"--out": out_dir, "--resume": True, "--concurrency": jobs, "--executor": None if kind == "local" else kind,
                         "--ray-address": ray_address, "--processes": processes, "--model": model, "--context-window": context_window,
                         "--price-in": price_in, "--price-out": price_out, "--scripted-latency": latency or None,
                         "--task": task or None, "--limit": limit, "--quiet": quiet, "--report": write_report},
    )
    with progress_bar(not quiet, _err) as bar:
        tracker = RunProgress(bar, len(plan.kept) + len(todo), plan.kept)

        async def main() -> RunReport:
            return await prepared.run(progress=tracker.on_event, on_result=tracker.on_result)

        try:
            report = run_async(main)
        except BaseException as exc:
            if not _interrupted(exc):
                raise
            if bar is not None:
                bar.stop()
            done = len(read_results(out_dir / RESULTS_FILE))
            _err.print(f"interrupted: {done} of {len(run_tasks)} task(s) recorded in {out_dir / RESULTS_FILE}; finish with:")
            print(resume_line, file=sys.stderr, flush=True)
            raise typer.Exit(130) from None
    summary = report.summary
    if options.estimate:
        _print_estimate(out_dir.parent)
        return
    _out.print(results_table(report.results, summary, f"{suite} · {prepared.executor.name} executor · concurrency {jobs}",
                             width=_out.width))
    for line in failure_lines(report.results):
        _out.print(line)
    quality = quality_line(report.results)
    if quality is not None:
        _out.print(quality, markup=False)
    if report.skipped:
        verb = "kept" if retry_failed else "already done"
        _out.print(f"{'retried' if retry_failed else 'resumed'}: {len(report.skipped)} task(s) {verb}, {len(report.ran)} run now")
    stopped = summary.get("run_limit")
    if stopped:
        _out.print(run_limit_line(stopped), markup=False)
        print(resume_line, file=sys.stderr, flush=True)
    _out.print(f"results: {out_dir / RESULTS_FILE}   summary: {out_dir / SUMMARY_FILE}   events: {out_dir / 'events'}")
    for line in estimate_lines(summary.get("estimate"), {"run": summary}):
        _out.print(line, markup=False)
    after_run(out_dir, write=write_report)
    if summary["failed"] or summary["error"]:
        raise typer.Exit(1)
    if stopped or summary.get("limit"):
        raise typer.Exit(4)


def _print_estimate(out_dir: Path) -> None:
    figures = read_estimate(out_dir)
    if figures is not None:
        _out.print(estimate_table(figures))
        _out.print(f"estimate: {out_dir / ESTIMATE_FILE} (the embedded model's calls; a real model's subagents may make more)")


def sweep(
    suite: Annotated[Path, typer.Argument(help="Suite file (JSONL; see docs/suite-format.md).")],
    trigger: Annotated[
        list[str] | None,
        typer.Option(
            "--trigger", "-t",
            help=f"{REFLECTION_TRIGGERS.allowed()} (a list compares each: step-count:5,10); repeat for more settings "
            "(--resume: the sweep's own).",
        ),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", "-j", min=1, max=MAX_CONCURRENCY, help="Tasks run at once (default 1; --resume: the sweep's own)."),
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Sweep directory (default: runs/<suite name>-sweep).")] = None,
    resume: ResumeOption = False,
    executor: Annotated[
        str | None, typer.Option("--executor", help="local (this machine, the default; see --processes) or ray.")
    ] = None,
    ray_address: RayAddressOption = None,
    processes: ProcessesOption = None,
    model: ModelOption = None,
    context_window: WindowOption = None,
    scripted_latency: ScriptedLatencyOption = None,
    price_in: PriceInOption = None,
    price_out: PriceOutOption = None,
    task: Annotated[list[str] | None, typer.Option("--task", help="Sweep only this task (repeatable).")] = None,
    limit: Annotated[int | None, typer.Option("--limit", "-n", min=1, help="Sweep only the first N tasks (after --task).")] = None,
    epochs: Annotated[
        int | None, typer.Option("--epochs", min=1, max=100, help="Run every task N times per setting (default 1; --resume: the sweep's own).")
    ] = None,
    override_pinned: Annotated[
        bool, typer.Option("--override-pinned", help="Also compare tasks that pin their own reflection trigger (under each setting).")
    ] = False,
    judge_model: JudgeModelOption = None,
    judge_base_url: JudgeBaseUrlOption = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
    write_report: ReportOption = False,
    estimate: EstimateOption = False,
    max_tokens: MaxTokensOption = None,
    max_cost: MaxCostOption = None,
    max_seconds: MaxSecondsOption = None,
    on_limit: OnLimitOption = None,
) -> None:
    """Run the suite under each reflection-trigger setting, compare them and recommend one.

    --resume finishes an interrupted sweep with what it recorded (its settings, epochs,
    concurrency, executor, processes, model, window, latency, prices, judge and limits) unless an option is given
    again. --max-tokens/--max-cost/--max-seconds bound the whole sweep, run in rounds so a stop leaves
    every setting with the same tasks."""
    # lazy: `reverie --help` imports every command module (cli/app.py)
    from orchestrator.api import BatchRequest, prepare_sweep

    owned = ExitStack()
    with _refused():
        prepared = prepare_sweep(BatchRequest(
            suite, out, concurrency=concurrency, executor=executor, processes=processes, resume=resume,
            tasks=None if task is None else tuple(task), limit=limit, model=model, context_window=context_window,
            price_in=price_in, price_out=price_out, latency=scripted_latency, ray_address=ray_address,
            judge_model=judge_model, judge_base_url=judge_base_url, estimate=estimate,
            triggers=triggers_given(trigger), epochs=epochs, override_pinned=override_pinned,
            triggers_name="--trigger", max_tokens=max_tokens, max_cost=max_cost, max_seconds=max_seconds,
            on_limit=on_limit,
        ))
        for note in prepared.plan.notes:
            _err.print(note, soft_wrap=True, markup=False)
        pinned = prepared.plan.pinned_line()
        if pinned is not None:
            _err.print(pinned, soft_wrap=True, markup=False)
        owned.enter_context(prepared.launched("reverie sweep"))
    with owned:
        _sweep_prepared(prepared, trigger, ray_address, quiet, write_report, task, limit)


def _sweep_prepared(prepared: PreparedSweep, trigger: list[str] | None, ray_address: str | None, quiet: bool,
                    write_report: bool, task: list[str] | None, limit: int | None) -> None:
    # lazy: `reverie --help` imports every command module (cli/app.py)
    from orchestrator.batch.sweep import SUMMARY_FILE

    plan = prepared.plan
    suite, out_dir, settings, options = plan.suite, plan.out_dir, plan.settings, plan.options
    kind, jobs, processes = plan.executor, plan.concurrency, plan.processes_given
    model, context_window, latency = options.overrides.get("model"), options.overrides.get("context_window"), options.latency
    per_setting, epochs = plan.per_setting, plan.epochs
    with progress_bar(not quiet, _err) as bar:
        trackers: dict[str, RunProgress] = {}
        kept = sum(len(results) for results in plan.kept.values())
        overall = (
            bar.add_task("all settings", total=per_setting * len(settings), completed=kept, stats="")
            if bar is not None else None
        )

        def tracker_for(setting: SweepSetting) -> RunProgress:
            if setting.label not in trackers:
                trackers[setting.label] = RunProgress(bar, per_setting, plan.kept.get(setting.label, ()), setting.label)
            return trackers[setting.label]

        def progress_for(setting: SweepSetting) -> Any:
            return tracker_for(setting).on_event

        def on_result_for(setting: SweepSetting) -> Any:
            tracker = tracker_for(setting)

            async def on_result(result: Any) -> None:
                await tracker.on_result(result)
                if bar is not None and overall is not None:
                    bar.advance(overall)

            return on_result

        async def main() -> SweepReport:
            return await prepared.run(progress_for=progress_for, on_result_for=on_result_for)

        resume_line = command_line(["sweep", suite], {
            "--trigger": trigger or None, "--out": out_dir, "--resume": True, "--concurrency": jobs,
            "--executor": None if kind == "local" else kind, "--ray-address": ray_address,
            "--processes": processes, "--model": model, "--context-window": context_window,
            "--scripted-latency": latency or None, "--price-in": options.price_in, "--price-out": options.price_out,
            "--task": task or None, "--limit": limit, "--epochs": epochs if epochs > 1 else None,
            "--override-pinned": plan.override_pinned, "--judge-model": options.judge_model,
            "--judge-base-url": options.judge_base_url,
            "--quiet": quiet, "--report": write_report,
        })
        try:
            report = run_async(main)
        except BaseException as exc:
            if not _interrupted(exc):
                raise
            _err.print("interrupted; finish with:")
            print(resume_line, file=sys.stderr, flush=True)
            raise typer.Exit(130) from None
    if options.estimate:
        _print_estimate(out_dir.parent)
        return
    _out.print(sweep_table(report.summary, f"sweep of {suite}", width=_out.width))
    for line in decision_lines(report.summary):
        _out.print(line, markup=False)
    _out.print(f"summary: {out_dir / SUMMARY_FILE}   charts: {', '.join(str(p) for p in report.charts)}")
    by_setting = {str(row["setting"]): row for row in report.summary["settings"]}
    for line in estimate_lines(report.summary.get("estimate"), by_setting):
        _out.print(line, markup=False)
    after_run(out_dir, write=write_report)
    if report.summary.get("sweep_limit"):
        _err.print("go on with a raised limit (--max-tokens/--max-cost/--max-seconds):")
        print(resume_line, file=sys.stderr, flush=True)
        raise typer.Exit(4)


def events(
    run_dir: Annotated[
        Path | None, typer.Argument(help="A run directory (the --out of reverie run); leave out for a chat session.")
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option("--agent", "-a", help="A chat session's events: this agent's, from the store (default agent without RUN_DIR)."),
    ] = None,
    conversation: Annotated[str | None, typer.Option("--conversation", "-c", help="With --agent: only this conversation.")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new events until the run ends (or Ctrl-C).")] = False,
    task: Annotated[str | None, typer.Option("--task", help="Only this task's events.")] = None,
    kind: Annotated[list[str] | None, typer.Option("--kind", "-k", help="Only these kinds (repeatable), e.g. model.call.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the raw JSON lines.")] = False,
) -> None:
    """Print a run's event log, or a chat session's events (--agent), oldest first: turns, model calls with tokens and latency, tools, commits, reminders, compactions, reflections. --follow keeps printing them as they happen."""
    kinds = tuple(kind or ())
    if run_dir is not None and agent is not None:
        fail("give RUN_DIR (a batch run) or --agent (a chat session), not both")
    if run_dir is None:
        if task is not None:
            fail("--task is for a run directory: give RUN_DIR")

        show_session_events(agent or os.environ.get("REVERIE_AGENT") or DEFAULT_AGENT_ID, conversation, kinds, follow, as_json)
        return
    if conversation is not None:
        fail("--conversation is for a chat session: give --agent instead of RUN_DIR")
    _run_events(run_dir, follow, task, kinds, as_json)


def _run_events(run_dir: Path, follow: bool, task: str | None, kinds: tuple[str, ...], as_json: bool) -> None:
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
        if (run_dir / "reverie.sqlite3").is_file():
            hint = " (a reverie home: `reverie events --agent A` prints a chat session's events)"
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


