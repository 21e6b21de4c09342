"""``reverie sweep``: the same suite under each reflection-trigger setting, compared.

Each setting runs into ``OUT/<label>/`` as an ordinary run (so ``--resume`` works per setting);
the comparison is ``OUT/comparison.json``, ``OUT/comparison.md`` and one PNG per metric.
A setting overrides every task's own trigger: the point is to compare triggers on equal tasks.

Each setting gets a fresh executor of the one choice ``reverie run`` would make (``--processes``
included), so a setting's statuses equal a run's. Its worker processes are spawned rather than
forked: forking happens before an event loop starts (batch/spawn.py), and one loop spans a sweep.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from orchestrator.app.telemetry import workflow
from orchestrator.base import blocking
from orchestrator.base.errors import UsageError
from orchestrator.batch.charts import write_charts
from orchestrator.batch.protocol import Executor
from orchestrator.batch.run import RunReport, run_suite
from orchestrator.batch.rundir import hold_run_dir
from orchestrator.batch.runner import ProgressSink, RunOptions
from orchestrator.batch.suite import Task

__all__ = [
    "COMPARISON_FILE",
    "SWEEP_FILE",
    "METRICS",
    "SweepReport",
    "SweepSetting",
    "comparison_markdown",
    "comparison_rows",
    "expand_triggers",
    "run_sweep",
]

COMPARISON_FILE = "comparison.json"
SWEEP_FILE = "sweep.json"
METRICS: Mapping[str, str] = {
    "checks_passed": "Checks passed",
    "reflections": "Reflections launched",
    "merges": "Reflections merged",
    "conflicts": "Reflections kept (conflicts)",
    "tokens": "Tokens (in + out)",
    "elapsed": "Real wall time (s)",
    "wall_time": "Task time (s, sum over tasks)",
}


@dataclass(frozen=True)
class SweepSetting:
    """One setting of a sweep: its label and the configuration it overrides."""

    label: str
    overrides: Mapping[str, Any] = field(default_factory=dict)


def expand_triggers(specs: Sequence[str]) -> list[SweepSetting]:
    """``off``, ``compaction-event``, ``step-count:5,10,25`` (one setting per count), in order,
    duplicates once. A bad spec is a ``ValueError`` naming it."""
    settings: list[SweepSetting] = []
    seen: set[str] = set()

    def add(setting: SweepSetting) -> None:
        if setting.label not in seen:
            seen.add(setting.label)
            settings.append(setting)

    for spec in specs:
        base, _, counts = spec.strip().partition(":")
        if base in ("off", "compaction-event") and not counts:
            add(SweepSetting(base, {"reflection_trigger": base}))
        elif base == "step-count" and counts:
            for raw in counts.split(","):
                if not raw.strip().isdigit() or int(raw) <= 0:
                    raise UsageError(f"--trigger {spec!r}: step counts must be positive integers, got {raw!r}")
                n = int(raw)
                add(SweepSetting(f"step-count-{n}", {"reflection_trigger": "step-count", "reflection_step_count": n}))
        else:
            raise UsageError(f"--trigger {spec!r}: use off, compaction-event or step-count:N[,N...]")
    if not settings:
        raise UsageError("give at least one --trigger")
    return settings


def comparison_rows(reports: Sequence[tuple[SweepSetting, Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Pure: one row per setting from its run summary."""
    rows = []
    for setting, s in reports:
        rows.append(
            {
                "setting": setting.label,
                "tasks": s["tasks"],
                "passed": s["passed"],
                "checks_passed": s["checks_passed"],
                "checks_total": s["checks_total"],
                "reflections": s["reflections_launched"],
                "merges": s["reflections_merged"],
                "conflicts": s["reflections_conflicted"],
                "tokens": s["tokens_in"] + s["tokens_out"],
                "wall_time": s["wall_time"],
                "elapsed": s.get("elapsed"),
            }
        )
    return rows


def comparison_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    header = ("| setting | tasks passed | checks passed | reflections | merges | conflicts | tokens | real time (s) "
              "| task time (s) |")
    lines = [header, "|" + "---|" * 9]
    for r in rows:
        lines.append(
            f"| {r['setting']} | {r['passed']}/{r['tasks']} | {r['checks_passed']}/{r['checks_total']} | "
            f"{r['reflections']} | {r['merges']} | {r['conflicts']} | {r['tokens']} | {r.get('elapsed') or 0:.2f} | "
            f"{r['wall_time']:.2f} |"
        )
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class SweepReport:
    """A finished sweep: the comparison rows, each setting's run, and the charts written."""

    rows: tuple[dict[str, Any], ...]
    runs: tuple[RunReport, ...]
    charts: tuple[Path, ...]


def _save(out_dir: Path, rows: list[dict[str, Any]]) -> list[Path]:
    (out_dir / COMPARISON_FILE).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    (out_dir / "comparison.md").write_text(comparison_markdown(rows), encoding="utf-8")
    return write_charts(rows, METRICS, out_dir / "charts")


def _write_meta(out_dir: Path, meta: Mapping[str, Any]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / SWEEP_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


async def run_sweep(
    tasks: Sequence[Task],
    settings: Sequence[SweepSetting],
    options: RunOptions,
    make_executor: Callable[[], Executor],
    *,
    resume: bool = False,
    progress_for: Callable[[SweepSetting], ProgressSink | None] = lambda _: None,
    on_setting_done: Callable[[SweepSetting, RunReport], Awaitable[None]] | None = None,
    suite_name: str = "",
) -> SweepReport:
    """Run every setting one after another, owning ``options.out_dir`` (``rundir``) throughout; see
    ``_run_sweep``. A directory another process runs into is refused with ``RunDirBusy``."""
    async with hold_run_dir(options.out_dir, "reverie sweep"):
        return await _run_sweep(
            tasks, settings, options, make_executor, resume=resume, progress_for=progress_for,
            on_setting_done=on_setting_done, suite_name=suite_name,
        )


async def _run_sweep(
    tasks: Sequence[Task],
    settings: Sequence[SweepSetting],
    options: RunOptions,
    make_executor: Callable[[], Executor],
    *,
    resume: bool = False,
    progress_for: Callable[[SweepSetting], ProgressSink | None] = lambda _: None,
    on_setting_done: Callable[[SweepSetting, RunReport], Awaitable[None]] | None = None,
    suite_name: str = "",
) -> SweepReport:
    """Run every setting one after another, each with the executor ``make_executor`` gives (a new
    one or the same again: the command line gives one whose workers were forked for every setting
    up front; each run already uses the executor's concurrency and processes).
    ``sweep.json`` (the settings, in order) is written first, so even an interrupted sweep is
    recognisable as one. With OpenTelemetry on, the sweep is one ``invoke_workflow`` span around its runs'."""
    async with workflow(f"sweep {suite_name or options.out_dir.name}", {"reverie.run.dir": str(options.out_dir)}):
        return await _run_settings(
            tasks, settings, options, make_executor, resume, progress_for, on_setting_done, suite_name
        )


async def _run_settings(
    tasks: Sequence[Task],
    settings: Sequence[SweepSetting],
    options: RunOptions,
    make_executor: Callable[[], Executor],
    resume: bool,
    progress_for: Callable[[SweepSetting], ProgressSink | None],
    on_setting_done: Callable[[SweepSetting, RunReport], Awaitable[None]] | None,
    suite_name: str,
) -> SweepReport:
    meta = {"suite": suite_name, "settings": [{"label": s.label, "overrides": dict(s.overrides)} for s in settings]}
    await blocking.run_sync("files", partial(_write_meta, options.out_dir, meta))
    done: list[tuple[SweepSetting, Mapping[str, Any]]] = []
    runs: list[RunReport] = []
    for setting in settings:
        run_options = replace(
            options, out_dir=options.out_dir / setting.label, overrides={**options.overrides, **setting.overrides}
        )
        report = await run_suite(
            tasks,
            run_options,
            make_executor(),
            resume=resume,
            progress=progress_for(setting),
            suite_name=suite_name,
        )
        runs.append(report)
        done.append((setting, report.summary))
        if on_setting_done is not None:
            await on_setting_done(setting, report)
    rows = comparison_rows(done)
    charts = await blocking.run_sync("files", partial(_save, options.out_dir, rows))
    return SweepReport(rows=tuple(rows), runs=tuple(runs), charts=tuple(charts))
