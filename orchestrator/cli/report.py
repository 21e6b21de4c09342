"""``reverie report RUN_DIR``: write the self-contained HTML report of a run or a sweep.

Also the helper ``run`` and ``sweep`` call at their end: with ``--report`` they write the report,
without it they print the command that would, so the next step is always one line away.
"""

from __future__ import annotations

import shlex
from functools import partial
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from orchestrator.cli.aio import run_async
from orchestrator.cli.errors import fail

__all__ = ["after_run", "register", "report"]

_out = Console(highlight=False, soft_wrap=True)


def _write(run_dir: Path, out: Path | None) -> Path:
    # lazy: `reverie --help` imports every command module (cli/app.py)
    from orchestrator.api import report as write_report
    from orchestrator.batch.report_data import ReportError

    try:
        return run_async(partial(write_report, run_dir, out=out))
    except ReportError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"{out or run_dir}: cannot write the report: {exc.strerror or exc}")


def report(
    run_dir: Annotated[Path, typer.Argument(help="A run or sweep directory (the --out of reverie run / sweep).")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Where to write (default RUN_DIR/report.html).")] = None,
) -> None:
    """Write RUN_DIR/report.html: one self-contained page (no network) with the summary, a task table that sorts
    and filters, each task's transcript, checks, memory diff, reflections, compactions and timeline; for a sweep
    also the task x setting matrix and charts."""
    path = _write(run_dir, out)
    _out.print(f"report: {path}")


def after_run(run_dir: Path, *, write: bool) -> None:
    """The last line of ``run`` / ``sweep``: the report's path, written now with ``--report``."""
    if write:
        _out.print(f"report: {_write(run_dir, None)}")
    else:
        _out.print(f"report: reverie report {shlex.quote(str(run_dir))}   (or pass --report to write it after the run)")


def register(app: typer.Typer) -> None:
    app.command("report")(report)
