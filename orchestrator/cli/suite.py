"""``reverie suite``: turn the standard memory benchmarks into suites reverie runs (docs/suite-format.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.aio import run_async

__all__ = ["app", "import_benchmark"]

app = typer.Typer(help="Import the standard memory benchmarks as suites.", no_args_is_help=True)


@app.command("import")
def import_benchmark(
    benchmark: Annotated[str, typer.Argument(help="longmemeval, locomo, memoryagentbench or memory-arena.")],
    source: Annotated[Path, typer.Argument(help="The benchmark's file as published (memory-arena: its data folder).")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Suite file to write (default: <source>.suite.jsonl).")] = None,
    sample: Annotated[int | None, typer.Option("--sample", help="Take N questions, spread over the abilities.")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Which N questions --sample takes (reproducible).")] = 0,
    abilities: Annotated[
        list[str] | None, typer.Option("--abilities", help="Only these abilities (repeat, or comma-separated).")
    ] = None,
    context_window: Annotated[int | None, typer.Option("--context-window", help="Each task's window (default 4000).")] = None,
) -> None:
    """Write a suite from a benchmark's published file: one task per question, its sessions replayed."""
    # lazy: `reverie --help` imports every command module (cli/app.py)
    from orchestrator.api import import_suite

    wanted = [a.strip() for item in abilities or [] for a in item.split(",") if a.strip()]
    target = out if out is not None else source.with_name(source.stem + ".suite.jsonl")
    done = run_async(
        lambda: import_suite(
            benchmark, source, target, sample=sample, seed=seed, abilities=wanted, context_window=context_window
        )
    )
    spread = ", ".join(f"{name} {count}" for name, count in done.abilities.items())
    print(f"wrote {done.path}: {done.tasks} tasks ({spread})")
