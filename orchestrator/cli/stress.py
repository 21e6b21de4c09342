"""``reverie stress``: concurrent reflection-like writers against one fresh memory repo (S21)."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Annotated

import anyio
import typer
from anyio import open_signal_receiver
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from orchestrator.app.stress import ProgressFn, StressConfig, StressReport, run_stress
from orchestrator.cli.aio import run_async
from orchestrator.cli.errors import UserError
from orchestrator.models.scripted import ScriptedModel
from subagents.resolver import make_resolver

__all__ = ["register", "stress"]

_out = Console(highlight=False, soft_wrap=True)
_err = Console(stderr=True, highlight=False)


def stress(
    writers: Annotated[int, typer.Option("--writers", "-w", help="Concurrent reflection-like sessions.")] = 16,
    commits: Annotated[int, typer.Option("--commits", "-m", help="Commits per session (merged in batches of 5).")] = 25,
    conflict_rate: Annotated[
        float, typer.Option("--conflict-rate", "-r", help="Chance (0-1) that a commit edits the shared hot file.")
    ] = 0.1,
    seed: Annotated[int, typer.Option("--seed", "-s", help="Random seed for the writers' choices.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print only the JSON result.")] = False,
    workdir: Annotated[
        Path | None,
        typer.Option("--workdir", help="Keep the repository (and its kept branches) here instead of a temporary directory."),
    ] = None,
    merge_policy: Annotated[
        str,
        typer.Option(
            "--merge-policy",
            help="keep: a conflict keeps the branch (raw conflict figures); resolve: the scripted resolver subagent reconciles it.",
        ),
    ] = "keep",
) -> None:
    """Stress merge-back: N writers in their own worktrees commit M times each, merged in batches through the reflection merge-back while a main writer commits on the main checkout.

    Reports commits merged, resolved (by the resolver), kept on branches after real conflicts (with the branch names), pending (still waiting after settling), merges retried because HEAD moved, lost (recorded but unreachable from any ref), invalid (failing the MemFS audit), and merge latency p50/p99 in milliseconds. Ctrl-C stops the writers and prints the partial summary. Exits 1 when a commit was lost or invalid, 130 when interrupted.
    """
    try:
        config = StressConfig(
            writers=writers, commits=commits, conflict_rate=conflict_rate, seed=seed, merge_policy=merge_policy
        )
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if workdir is not None and workdir.exists() and not workdir.is_dir():
        raise UserError(f"--workdir {workdir}: not a directory")
    if workdir is not None and workdir.exists() and any(workdir.iterdir()):
        raise UserError(f"--workdir {workdir}: directory is not empty")
    if as_json:
        report = run_async(lambda: _run(config, workdir, None))
        _out.print(json.dumps(report.to_json()))
    else:
        with Progress(
            TextColumn("[bold]commits"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=_err
        ) as bar:
            task = bar.add_task("commits", total=config.writers * config.commits)

            def progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            report = run_async(lambda: _run(config, workdir, progress))
        _out.print(_table(report))
    if report.interrupted:
        _err.print("interrupted: the summary covers the commits made so far")
        raise typer.Exit(130)
    if report.lost or report.invalid:
        raise typer.Exit(1)


async def _run(config: StressConfig, workdir: Path | None, progress: ProgressFn | None) -> StressReport:
    """The stress run with Ctrl-C turned into a graceful stop (the partial summary is printed)."""
    resolver = None
    if config.merge_policy == "resolve":
        resolver = make_resolver(ScriptedModel(), agent_id="stress", agent_name="stress")
    interrupt = anyio.Event()

    async def watch() -> None:
        with open_signal_receiver(signal.SIGINT) as signals:
            async for _ in signals:
                interrupt.set()
                return

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        report = await run_stress(config, workdir=workdir, progress=progress, resolver=resolver, interrupt=interrupt)
        tg.cancel_scope.cancel()
    return report


def _table(report: StressReport) -> Table:
    table = Table(title="reverie stress", show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in report.to_json().items():
        shown = ", ".join(value) or "-" if isinstance(value, list) else str(value)
        table.add_row(key, shown)
    table.add_row("commits recorded", str(report.recorded))
    table.add_row("main writer commits", str(report.main_commits))
    table.add_row("merge-back calls", str(report.merges))
    table.add_row("elapsed (s)", str(report.elapsed_s))
    return table


def register(app: typer.Typer) -> None:
    """Add ``stress`` to the main app."""
    app.command("stress")(stress)
