"""``reverie sweep``: the same suite under each reflection-trigger setting, compared and decided.

Each setting runs into ``OUT/<label>/`` as an ordinary run (so ``--resume`` works per setting);
the comparison is ``OUT/comparison.json``, ``OUT/comparison.md`` and one PNG per metric; the
decision (``orchestrator.batch.sweep_stats``: quality with its interval, cost split main/subagents,
every reflection outcome, the Pareto front and the recommended setting) is ``OUT/summary.json``
and ``OUT/summary.md``. ``epochs`` > 1 runs every task that many times per setting, as
``<id>.epoch-<k>`` in the same run (so the copies run concurrently).

A sweep's limits (``RunOptions.run_limits``: ``--max-tokens`` and the others) are the whole
sweep's; a limited sweep runs in rounds so that a stop leaves the settings paired
(``batch/sweep_budget.py``, docs/design.md L3).

A task that pins its own reflection trigger (``settings.reflection_trigger``) would be compared
under triggers it was not written for: it is left out and listed as pinned, unless
``override_pinned``, when the setting overrides its trigger like every other task's.

Each setting gets a fresh executor of the one choice ``reverie run`` would make (``--processes``
included), so a setting's statuses equal a run's. An executor that can be held across runs (Ray:
``protocol.HeldAcrossRuns``) is held around every setting, so a sweep on Ray has one driver and
one cluster (a private Ray starts once), from the command line and the library alike. Its worker processes are spawned rather than
forked: forking happens before an event loop starts (batch/spawn.py), and one loop spans a sweep.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from orchestrator.app.telemetry import workflow
from orchestrator.base import blocking
from orchestrator.base.choices import BadValue
from orchestrator.base.config import REFLECTION_TRIGGERS, parse_setting
from orchestrator.base.errors import UsageError
from orchestrator.batch.charts import write_charts
from orchestrator.batch.estimate import estimate_row, read_estimate, write_estimate
from orchestrator.batch.paired import Paired, compare_with_best, question_scores
from orchestrator.batch.protocol import Executor, HeldAcrossRuns
from orchestrator.batch.results import RESULTS_FILE, TaskResult, read_results, summarize
from orchestrator.batch.run import RunReport, run_suite
from orchestrator.batch.rundir import hold_run_dir
from orchestrator.batch.runner import ProgressSink, RunOptions
from orchestrator.batch.suite import Reference, Task
from orchestrator.batch.sweep_budget import Spend, SweepBudget, read_spend, round_ends, sweep_limit_line
from orchestrator.batch.sweep_stats import exercised, limit_stops_cell, pareto_front, recommend, setting_stats

__all__ = [
    "COMPARISON_FILE",
    "SUMMARY_FILE",
    "SWEEP_FILE",
    "METRICS",
    "SweepReport",
    "SweepSetting",
    "comparison_markdown",
    "comparison_rows",
    "decide",
    "epoch_tasks",
    "expand_triggers",
    "run_sweep",
    "split_pinned",
    "summary_markdown",
]

COMPARISON_FILE = "comparison.json"
SUMMARY_FILE = "summary.json"
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


def expand_triggers(specs: str | Sequence[str], *, name: str = "triggers") -> list[SweepSetting]:
    """One setting per trigger, in order, duplicates once: ``off``, ``compaction-event``, and one per
    argument of a trigger that takes one (``step-count:5,10,25``). A single string is one trigger.
    Each is checked by the setting's own parser (``parse_setting``); a refusal is a ``UsageError``
    naming ``name`` (the library's parameter; the command line passes ``--trigger``)."""
    settings: list[SweepSetting] = []
    seen: set[str] = set()
    for spec in [specs] if isinstance(specs, str) else specs:
        trigger, colon, arguments = spec.strip().partition(":")
        for argument in arguments.split(",") if colon else [None]:
            value = trigger if argument is None else f"{trigger}:{argument.strip()}"
            try:
                overrides = parse_setting("reflection_trigger", value)
            except BadValue as exc:
                raise UsageError(f"{name} {spec!r}: {exc}") from None
            label = value.replace(":", "-")
            if label not in seen:
                seen.add(label)
                settings.append(SweepSetting(label, overrides))
    if not settings:
        raise UsageError(f"give at least one reflection trigger to compare ({name}: {REFLECTION_TRIGGERS.allowed()})")
    return settings


def split_pinned(tasks: Sequence[Task], override: bool) -> tuple[list[Task], dict[str, str]]:
    """Pure: the tasks a sweep compares, and the pinned ones left out (id -> their trigger); with
    ``override`` every task is compared (and the pinned ones are still named)."""
    pinned = {t.id: t.pinned_trigger for t in tasks if t.pinned_trigger is not None}
    kept = list(tasks) if override else [t for t in tasks if t.id not in pinned]
    return kept, {k: v for k, v in pinned.items() if v is not None}


def epoch_tasks(tasks: Sequence[Task], epochs: int) -> list[Task]:
    """Pure: each task ``epochs`` times, as ``<id>.epoch-<k>`` (the tasks unchanged for one epoch),
    epoch by epoch so a ``--limit``-sized prefix of the run covers whole epochs."""
    if epochs <= 1:
        return list(tasks)
    return [replace(t, id=f"{t.id}.epoch-{k}") for k in range(1, epochs + 1) for t in tasks]


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
                "held": s.get("reflections_held", 0),
                "held_branches": dict(s.get("held_branches", {})),
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


def _fmt_quality(row: Mapping[str, Any]) -> str:
    q = row.get("quality")
    return "-" if not q else f"{q['mean']:.3f} [{q['low']:.3f}, {q['high']:.3f}]"


def summary_markdown(summary: Mapping[str, Any]) -> str:
    """Pure: the decision as Markdown: the per-setting table, abilities, front and recommendation."""
    rows = summary["settings"]
    lines = [
        "| setting | quality [95% interval] | limit stops | n | main tokens | subagent tokens | cost | reflections "
        "| merged | resolved | no_changes | pending | kept | failed | memory (bytes) | real time (s) |",
        "|" + "---|" * 16,
    ]
    for r in rows:
        o = r["outcomes"]
        cost = "-" if r.get("cost") is None else f"${r['cost']:.4f}"
        lines.append(
            f"| {r['setting']}{' *' if r['setting'] in summary['front'] else ''} | {_fmt_quality(r)} "
            f"| {limit_stops_cell(r)} | {r['samples']} "
            f"| {r['main_tokens_in'] + r['main_tokens_out']:,} | {r['subagent_tokens_in'] + r['subagent_tokens_out']:,} "
            f"| {cost} | {r['reflections']} | {o['merged']} | {o['resolved']} | {o['no_changes']} | {o['pending']} "
            f"| {o['kept']} | {o['failed']} | {r['memory_bytes'] if r['memory_bytes'] is not None else '-'} "
            f"| {r.get('elapsed') or 0:.2f} |"
        )
    abilities = sorted({a for r in rows for a in r["abilities"]})
    if abilities:
        lines += ["", "| setting | " + " | ".join(abilities) + " |", "|" + "---|" * (len(abilities) + 1)]
        for r in rows:
            cells = [
                f"{r['abilities'][a]['mean']:.3f} (n={r['abilities'][a]['n']})" if a in r["abilities"] else "-"
                for a in abilities
            ]
            lines.append(f"| {r['setting']} | " + " | ".join(cells) + " |")
    paired = summary.get("paired") or []
    if paired:
        lines += [
            "",
            f"Paired with the best setting, {paired[0]['versus']}, question by question (exact McNemar test; "
            "difference in score points with its 95% bootstrap interval):",
            "",
            "| setting | questions | only the best passed | only this passed | difference [95% interval] | p | detectable |",
            "|" + "---|" * 7,
        ]
        for c in paired:
            if c["setting"] == c["versus"]:
                continue
            lines.append(
                f"| {c['setting']} | {c['n']} | {c['best_only']} | {c['setting_only']} "
                f"| {c['difference']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}] | {c['p']:.3g} | {'yes' if c['detectable'] else 'no'} |"
            )
    if summary.get("detectable"):
        lines += ["", summary["detectable"][0].upper() + summary["detectable"][1:] + "."]
    if summary.get("not_exercised"):
        lines.append(
            f"Not exercised (the trigger never fired on this suite; kept off the front): {', '.join(summary['not_exercised'])}"
        )
    if summary.get("references"):
        lines += ["", "Published results on these questions (reference rows, not run here):", "",
                  "| system | model | quality | per ability | source |", "|---|---|---|---|---|"]
        for ref in summary["references"]:
            per = ", ".join(f"{k} {v:.3f}" for k, v in ref["abilities"].items()) or "-"
            lines.append(f"| {ref['system']} | {ref['model']} | {ref['quality']:.3f} | {per} | {ref['source']} |")
    lines += ["", f"Pareto front (quality against {summary['cost_unit']}; * above): {', '.join(summary['front'])}"]
    rec = summary.get("recommendation")
    if rec:
        lines.append(f"Recommended: {rec['reason']}")
    stopped = summary.get("sweep_limit")
    if stopped:
        lines.append(sweep_limit_line(stopped))
    if summary.get("pinned"):
        verb = "overridden and compared" if summary.get("override_pinned") else "left out (--override-pinned compares them)"
        pins = ", ".join(f"{k} ({v})" for k, v in summary["pinned"].items())
        lines.append(f"Pinned tasks ({verb}): {pins}")
    return "\n".join(lines) + "\n"


def decide(
    rows: Sequence[Mapping[str, Any]],
    *,
    pinned: Mapping[str, str],
    override_pinned: bool,
    epochs: int,
    scores: Mapping[str, Mapping[str, float]] | None = None,
    references: Sequence[Reference] = (),
) -> dict[str, Any]:
    """Pure: the sweep's summary (``SUMMARY_FILE``): rows, front, the paired comparison with the best
    setting (``scores``: label -> question -> score, ``batch/paired.py``), recommendation, pinned tasks."""
    paired: list[Paired] = []
    not_worse: list[str] | None = None
    measured = [r for r in rows if exercised(r)]
    if scores and measured:
        best = str(max(measured, key=lambda r: r["quality"]["mean"] if r.get("quality") else 0.0)["setting"])
        paired = compare_with_best({str(r["setting"]): scores.get(str(r["setting"]), {}) for r in measured}, best)
        not_worse = [p.setting for p in paired if not (p.detectable and p.difference < 0)]
    recommendation = recommend(rows, not_worse)
    return {
        "settings": [dict(r) for r in rows],
        "cost_unit": "cost" if rows and all(r.get("cost") is not None for r in rows) else "tokens",
        "front": pareto_front(rows),
        "paired": [p.to_json() for p in paired],
        "detectable": _detectable_sentence(paired),
        "recommendation": None if recommendation is None else recommendation.to_json(),
        "not_exercised": [str(r["setting"]) for r in rows if not exercised(r)],
        "references": [r.to_json() for r in references],
        "pinned": dict(pinned),
        "override_pinned": override_pinned,
        "epochs": epochs,
    }


def _detectable_sentence(paired: Sequence[Paired]) -> str:
    """What the paired test can tell at this many questions, in one sentence."""
    others = [p for p in paired if p.setting != p.versus]
    if not others:
        return ""
    found = [p for p in others if p.detectable]
    if found:
        return "detectable differences from the best, " + others[0].versus + ": " + ", ".join(
            f"{p.setting} {p.difference:+.3f} (p={p.p:.3g})" for p in found
        )
    needed = max(p.needed for p in others)
    return (
        f"no detectable difference from the best, {others[0].versus}, at n={others[0].n} questions; "
        f"about {needed} questions would detect a 10-point one"
    )


@dataclass(frozen=True)
class SweepReport:
    """A finished sweep: the comparison rows, each setting's run, the charts written, the decision."""

    rows: tuple[dict[str, Any], ...]
    runs: tuple[RunReport, ...]
    charts: tuple[Path, ...]
    summary: Mapping[str, Any] = field(default_factory=dict)


def _save(out_dir: Path, rows: list[dict[str, Any]], summary: Mapping[str, Any]) -> list[Path]:
    (out_dir / COMPARISON_FILE).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    (out_dir / "comparison.md").write_text(comparison_markdown(rows), encoding="utf-8")
    (out_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    (out_dir / "summary.md").write_text(summary_markdown(summary), encoding="utf-8")
    return write_charts(rows, METRICS, out_dir / "charts")


def _write_meta(out_dir: Path, meta: Mapping[str, Any]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / SWEEP_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def _recorded_report(run_dir: Path, tasks: Sequence[Task]) -> RunReport:
    """A setting's run as its directory records it, for a sweep whose limit let it run nothing
    now (nothing new is written). Blocking."""
    recorded = read_results(run_dir / RESULTS_FILE)
    results = tuple(recorded[t.id] for t in tasks if t.id in recorded)
    summary = summarize(results)
    summary["elapsed_total"] = read_spend(run_dir).seconds
    return RunReport(results=results, summary=summary, skipped=tuple(r.id for r in results), ran=())


async def run_sweep(
    tasks: Sequence[Task],
    settings: Sequence[SweepSetting],
    options: RunOptions,
    make_executor: Callable[[], Executor],
    *,
    resume: bool = False,
    progress_for: Callable[[SweepSetting], ProgressSink | None] = lambda _: None,
    on_result_for: Callable[[SweepSetting], Callable[[TaskResult], Awaitable[None]] | None] = lambda _: None,
    on_setting_done: Callable[[SweepSetting, RunReport], Awaitable[None]] | None = None,
    suite_name: str = "",
    epochs: int = 1,
    override_pinned: bool = False,
    references: Sequence[Reference] = (),
) -> SweepReport:
    """Run every setting one after another, owning ``options.out_dir`` (``rundir``) throughout; see
    ``_run_sweep``. A directory another process runs into is refused with ``RunDirBusy``."""
    async with hold_run_dir(options.out_dir, "reverie sweep"):
        return await _run_sweep(
            tasks, settings, options, make_executor, resume=resume, progress_for=progress_for,
            on_result_for=on_result_for, on_setting_done=on_setting_done, suite_name=suite_name,
            epochs=epochs, override_pinned=override_pinned, references=references,
        )


async def _run_sweep(
    tasks: Sequence[Task],
    settings: Sequence[SweepSetting],
    options: RunOptions,
    make_executor: Callable[[], Executor],
    *,
    resume: bool = False,
    progress_for: Callable[[SweepSetting], ProgressSink | None] = lambda _: None,
    on_result_for: Callable[[SweepSetting], Callable[[TaskResult], Awaitable[None]] | None] = lambda _: None,
    on_setting_done: Callable[[SweepSetting, RunReport], Awaitable[None]] | None = None,
    suite_name: str = "",
    epochs: int = 1,
    override_pinned: bool = False,
    references: Sequence[Reference] = (),
) -> SweepReport:
    """Run every setting one after another, each with the executor ``make_executor`` gives (a new
    one or the same again: the command line gives one whose workers were forked for every setting
    up front; each run already uses the executor's concurrency and processes).
    ``sweep.json`` (the settings, in order) is written first, so even an interrupted sweep is
    recognisable as one. ``on_result_for(setting)`` hears of each task as it finishes (progress).
    Pinned tasks are left out unless ``override_pinned`` (module docstring). With OpenTelemetry on,
    the sweep is one ``invoke_workflow`` span around its runs'. With limits the settings run in
    rounds (module docstring); the decision compares the tasks every setting ran."""
    async with workflow(f"sweep {suite_name or options.out_dir.name}", {"reverie.run.dir": str(options.out_dir)}):
        return await _run_settings(
            tasks, settings, options, make_executor, resume, progress_for, on_result_for, on_setting_done,
            suite_name, epochs, override_pinned, references,
        )


async def _run_settings(
    tasks: Sequence[Task],
    settings: Sequence[SweepSetting],
    options: RunOptions,
    make_executor: Callable[[], Executor],
    resume: bool,
    progress_for: Callable[[SweepSetting], ProgressSink | None],
    on_result_for: Callable[[SweepSetting], Callable[[TaskResult], Awaitable[None]] | None],
    on_setting_done: Callable[[SweepSetting, RunReport], Awaitable[None]] | None,
    suite_name: str,
    epochs: int,
    override_pinned: bool,
    references: Sequence[Reference],
) -> SweepReport:
    compared, pinned = split_pinned(tasks, override_pinned)
    if not compared:
        raise UsageError(
            f"every task pins its own reflection trigger ({', '.join(pinned)}): nothing to compare; "
            "give --override-pinned to run them under the sweep's settings"
        )
    runnable = epoch_tasks(compared, epochs)
    meta = {
        "suite": suite_name,
        "settings": [{"label": s.label, "overrides": dict(s.overrides)} for s in settings],
        "epochs": epochs,
        "override_pinned": override_pinned,
        "pinned": pinned,
        "run_limits": dict(options.run_limits),
        "on_limit": options.on_limit,
    }
    await blocking.run_sync("files", partial(_write_meta, options.out_dir, meta))
    spent = {
        s.label: await blocking.run_sync("files", partial(read_spend, options.out_dir / s.label)) for s in settings
    } if options.run_limits else {}
    budget = SweepBudget(options.run_limits, options.on_limit, spent)
    last: dict[str, RunReport] = {}
    executor = make_executor()
    ends = round_ends(len(runnable), executor.concurrency) if budget.limited else [len(runnable)]
    first = True
    async with executor.hold() if isinstance(executor, HeldAcrossRuns) else nullcontext():
        for end in ends:
            if budget.check() is not None:
                break
            for setting in settings:
                if budget.reached is not None:
                    break  # on_limit = stop: the round's later settings are not launched
                report = await run_suite(
                    runnable[:end],
                    replace(options, out_dir=options.out_dir / setting.label,
                            overrides={**options.overrides, **setting.overrides}, run_limits=budget.run_limits(setting.label)),
                    executor if first else make_executor(),
                    resume=resume or setting.label in last,
                    progress=progress_for(setting),
                    on_result=on_result_for(setting),
                    suite_name=suite_name,
                )
                first = False
                last[setting.label] = report
                stopped = report.summary.get("run_limit")
                budget.record(setting.label, Spend.of(report.results, float(report.summary.get("elapsed_total") or 0.0)),
                              None if not stopped else str(stopped["limit"]))
                if end == ends[-1] and on_setting_done is not None:
                    await on_setting_done(setting, report)
    for setting in settings:
        if setting.label not in last:  # stopped before this setting ran now: what it recorded
            last[setting.label] = await blocking.run_sync(
                "files", partial(_recorded_report, options.out_dir / setting.label, runnable)
            )
    runs = [last[s.label] for s in settings]
    paired_ids = set.intersection(*({r.id for r in report.results} for report in runs))
    compared_results = [[r for r in report.results if r.id in paired_ids] for report in runs]
    done = [(setting, report.summary) for setting, report in zip(settings, runs, strict=True)]
    stats = [
        setting_stats(setting.label, results, elapsed=report.summary.get("elapsed_total"))
        for setting, report, results in zip(settings, runs, compared_results, strict=True)
    ]
    rows = [{**row, **extra} for row, extra in zip(comparison_rows(done), stats, strict=True)]
    for row, setting in zip(rows, settings, strict=True):
        row["exercised"] = setting.overrides.get("reflection_trigger") == "off" or row["reflections"] > 0
    scores = {setting.label: question_scores(results) for setting, results in zip(settings, compared_results, strict=True)}
    summary = decide(
        rows, pinned=pinned, override_pinned=override_pinned, epochs=epochs, scores=scores, references=references
    )
    summary["sweep_limit"] = budget.summary({s.label: len(r.results) for s, r in zip(settings, runs, strict=True)},
                                            len(runnable))
    if options.estimate:
        figures = {
            setting.label: estimate_row(report.summary, options.price_in, options.price_out)
            for setting, report in zip(settings, runs, strict=True)
        }
        await blocking.run_sync("files", partial(write_estimate, options.out_dir.parent, figures))
    else:
        summary["estimate"] = await blocking.run_sync("files", partial(read_estimate, options.out_dir))
    charts = await blocking.run_sync("files", partial(_save, options.out_dir, rows, summary))
    return SweepReport(rows=tuple(rows), runs=tuple(runs), charts=tuple(charts), summary=summary)
