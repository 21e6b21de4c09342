"""``reverie stress``: concurrent reflection-like writers against one fresh memory repo (S21, O7).

The table shows every figure of ``--json`` (same names), the kept branches summarised (count and the
first few), every unmerged branch by name, the accounting equation and, last, the verdict.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Annotated

import anyio
import typer
from anyio import open_signal_receiver
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from orchestrator.app.stress import ProgressFn
from orchestrator.app.stress_faults import parse_faults
from orchestrator.app.stress_report import StressConfig, StressReport
from orchestrator.cli.aio import run_async
from orchestrator.cli.errors import UserError

__all__ = ["register", "stress"]

_out = Console(highlight=False, soft_wrap=True)
_err = Console(stderr=True, highlight=False)


def stress(
    writers: Annotated[int, typer.Option("--writers", "-w", help="Concurrent reflection-like sessions.")] = 16,
    commits: Annotated[int, typer.Option("--commits", "-m", help="Commits per session (merged in batches of 5).")] = 25,
    conflict_rate: Annotated[
        float, typer.Option("--conflict-rate", "-r", help="Chance (0-1) that a commit edits the shared hot file.")
    ] = 0.1,
    seed: Annotated[int, typer.Option("--seed", "-s", help="Random seed for the writers' choices and the faults.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print only the JSON result (progress lines go to stderr).")] = False,
    workdir: Annotated[
        Path | None,
        typer.Option("--workdir", help="Keep the repository (and its kept branches) here instead of a temporary directory."),
    ] = None,
    merge_policy: Annotated[
        str,
        typer.Option(
            "--merge-policy",
            help="resolve (the product's default): the scripted resolver subagent reconciles a conflict; keep: a conflict keeps the branch (raw conflict figures).",
        ),
    ] = "resolve",
    limit_pressure: Annotated[
        bool,
        typer.Option(
            "--limit-pressure",
            help="Give the repository a tight core-memory budget and let writers grow root files that fit alone but not together.",
        ),
    ] = False,
    faults: Annotated[
        str | None,
        typer.Option(
            "--faults",
            help="Comma-separated faults injected at seeded moments: kill-merger, kill-writer, stale-lock, enospc (a full disk: the run lives on a small tmpfs, root only; else skipped with the reason).",
        ),
    ] = None,
) -> None:
    """Stress merge-back: N writers in their own worktrees commit M times each, merged in batches through the reflection merge-back while a main writer commits on the main checkout.

    Accounts for every commit: recorded = merged + resolved + kept + pending + unmerged + main, checked; lost (a reported commit no branch carries, checked with git alone) and invalid (HEADs failing validation as a whole) must be 0; invalid_combined counts combinations kept because together they break the limits. Ends with a verdict line. Ctrl-C stops the writers, keeps the work directory and prints how to finish. Exits 1 when the verdict is not OK, 130 when interrupted.
    """
    try:
        # the library's own checks, before anything is printed
        StressConfig(
            writers=writers, commits=commits, conflict_rate=conflict_rate, seed=seed, merge_policy=merge_policy,
            limit_pressure=limit_pressure, faults=parse_faults(faults),
        )
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if workdir is not None and workdir.exists() and not workdir.is_dir():
        raise UserError(f"--workdir {workdir}: not a directory")
    if workdir is not None and workdir.exists() and any(workdir.iterdir()):
        raise UserError(f"--workdir {workdir}: directory is not empty")
    total = writers * commits
    # lazy: `reverie --help` imports every command module (cli/app.py)
    from orchestrator.api import stress as run_stress

    start = partial(
        run_stress, writers, commits, conflict_rate=conflict_rate, seed=seed, merge_policy=merge_policy,
        limit_pressure=limit_pressure, faults=faults, workdir=workdir,
    )
    if as_json:
        report = run_async(lambda: _run(start, _progress_lines(total)))
        _out.print(json.dumps(report.to_json()))
    else:
        with Progress(
            TextColumn("[bold]commits"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=_err
        ) as bar:
            task = bar.add_task("commits", total=total)

            def progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            report = run_async(lambda: _run(start, progress))
        _print_summary(report)
    if report.interrupted or not report.ok:
        _print_leftovers(report)
    if report.interrupted:
        raise typer.Exit(130)
    if not report.ok:
        raise typer.Exit(1)


def _progress_lines(total: int) -> ProgressFn:
    """``progress: done/total`` on stderr at every 5 % (a readiness signal for scripts and tests)."""
    step = max(1, total // 20)

    def progress(done: int, _total: int) -> None:
        if done % step == 0 or done == total:
            print(f"progress: {done}/{total}", file=sys.stderr, flush=True)

    return progress


async def _run(start: Callable[..., Awaitable[StressReport]], progress: ProgressFn | None) -> StressReport:
    """The library's stress run with Ctrl-C turned into a graceful stop (the partial summary is printed)."""
    interrupt = anyio.Event()

    async def watch() -> None:
        with open_signal_receiver(signal.SIGINT) as signals:
            async for _ in signals:
                interrupt.set()
                return

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        report = await start(progress=progress, interrupt=interrupt)
        tg.cancel_scope.cancel()
    return report


_SHOWN_BRANCHES = 3


def _branches(names: list[str] | tuple[str, ...]) -> str:
    if not names:
        return "-"
    head = ", ".join(names[:_SHOWN_BRANCHES])
    more = len(names) - _SHOWN_BRANCHES
    return f"{len(names)}: {head}" + (f" and {more} more (all in --json)" if more > 0 else "")


def _print_summary(report: StressReport) -> None:
    data = report.to_json()
    table = Table(title="reverie stress", show_header=True)
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, value in data.items():
        if key in {"kept_branches", "unmerged_branches", "writer_commits", "lost_commits", "verdict", "faults"}:
            continue
        if isinstance(value, dict | list):
            value = ", ".join(f"{k} {v}" for k, v in value.items()) if isinstance(value, dict) else "; ".join(value)
        table.add_row(key, "-" if value in ("", None) else str(value))
    table.add_row("kept_branches", _branches(report.kept_branches))
    for kind, counts in data["faults"].items():
        table.add_row(f"faults: {kind}", f"{counts['recovered']}/{counts['injected']} recovered")
    _out.print(table)
    for branch, count in report.unmerged_branches:
        _out.print(f"unmerged: {branch} ({count} commit(s))")
    if report.lost_commits:
        _out.print(f"lost: {', '.join(report.lost_commits)}")
    _out.print(report.equation)
    _out.print(report.verdict)


def _print_leftovers(report: StressReport) -> None:
    """Where the work is and how to finish or inspect it (stderr, so ``--json`` stays parseable)."""
    if report.workdir is None:
        return
    memory = Path(report.workdir) / "memory"
    lines = [
        f"work directory kept: {report.workdir}",
        f"  inspect: reverie reflections list --memory-dir {memory}",
        f"  finish:  reverie reflections merge --all --resolve --memory-dir {memory}",
    ]
    if report.interrupted:
        lines.append("interrupted: the summary covers the commits made so far")
    # plain lines, never wrapped: they are commands to copy
    print("\n".join(lines), file=sys.stderr, flush=True)


def register(app: typer.Typer) -> None:
    """Add ``stress`` to the main app."""
    app.command("stress")(stress)
