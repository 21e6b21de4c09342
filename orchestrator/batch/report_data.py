"""What ``reverie report`` shows, gathered from a run or sweep directory into plain JSON-able data.

A run directory has ``results.jsonl``; a sweep directory has one run directory per setting (in
``comparison.json`` order). The page gets a small index (summary, one row per task, the sweep
matrix) parsed at load, and one detail object per task parsed only when that task is opened, so a
500-task report opens as fast as a 5-task one.

Token split: the event log's ``model.call`` events carry a ``purpose``; ``chat`` calls are the main
agent's, every other purpose (``summarize``, ``reflect``, ...) a subagent's. Result fields a newer
runner records (``tokens_subagents_*`` and the like) are shown as they are, and an older run
without them still reports what its events say.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.base.errors import ReverieError
from orchestrator.batch.eventlog import EventRecord, event_log_path
from orchestrator.batch.report_svg import pareto_chart, sweep_charts
from orchestrator.batch.report_task import task_detail
from orchestrator.batch.results import RESULTS_FILE, SUMMARY_FILE, read_results
from orchestrator.batch.runner import task_paths

__all__ = [
    "COMPARISON_FILE",
    "DECISION_FILE",
    "ReportData",
    "ReportError",
    "SWEEP_FILE",
    "gather",
    "gather_run",
    "gather_sweep",
    "is_sweep",
    "task_row",
    "token_split",
]

COMPARISON_FILE = "comparison.json"
SWEEP_FILE = "sweep.json"
DECISION_FILE = "summary.json"
"""A sweep's decision (``orchestrator.batch.sweep.SUMMARY_FILE``)."""
_RUN_FILE = "run.json"
_REFLECTION_OUTCOMES = ("launch", "merged", "resolved", "kept", "failed")


class ReportError(ReverieError, ValueError):
    """The directory is neither a run nor a sweep; the message says what was expected."""


@dataclass(frozen=True)
class ReportData:
    """``index`` is parsed when the page loads; ``details[i]`` when row ``i`` is opened."""

    index: dict[str, Any]
    details: tuple[dict[str, Any], ...]


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _events(run_dir: Path, task_id: str) -> list[EventRecord]:
    path = event_log_path(run_dir, task_id)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(EventRecord.from_json(json.loads(line)))
        except (ValueError, KeyError, TypeError):
            continue
    out.sort(key=lambda r: r.seq)
    return out


def token_split(events: Sequence[EventRecord]) -> dict[str, Any]:
    """Pure: prompt/completion tokens of the main agent (``chat``) and of subagents, by purpose."""
    main_in = main_out = sub_in = sub_out = replayed = 0
    by_purpose: Counter[str] = Counter()
    for record in events:
        if record.kind != "model.call":
            continue
        p = record.payload
        tin, tout = int(p.get("prompt_tokens") or 0), int(p.get("completion_tokens") or 0)
        purpose = str(p.get("purpose") or "chat")
        if purpose == "replay":  # a recorded reply given back: no call was made, nobody paid
            replayed += tin + tout
            continue
        by_purpose[purpose] += tin + tout
        if purpose == "chat":
            main_in, main_out = main_in + tin, main_out + tout
        else:
            sub_in, sub_out = sub_in + tin, sub_out + tout
    return {"main_in": main_in, "main_out": main_out, "sub_in": sub_in, "sub_out": sub_out,
            "by_purpose": dict(by_purpose), "replayed": replayed}


def _kind_counts(events: Sequence[EventRecord]) -> dict[str, int]:
    counts = Counter(r.kind for r in events)
    out = {f"reflections_{o}": counts.get(f"reflection.{o}", 0) for o in _REFLECTION_OUTCOMES}
    out["compactions"] = counts.get("compaction.done", 0)
    out["compactions_failed"] = counts.get("compaction.failed", 0)
    return out


def task_row(result: Mapping[str, Any], events: Sequence[EventRecord], setting: str = "") -> dict[str, Any]:
    """Pure: the task table's row (and what the filters match on)."""
    tokens = token_split(events)
    counts = _kind_counts(events)
    failed = [c["check"] for c in result.get("checks", ()) if not c.get("passed")]
    extra = {k: v for k, v in result.items() if "subagent" in k and isinstance(v, int | float)}
    return {
        "id": result["id"],
        "setting": setting,
        "status": result.get("status", "error"),
        "checks_passed": result.get("checks_passed", 0),
        "checks_total": result.get("checks_total", 0),
        "failed_checks": failed,
        "turns": result.get("turns", 0),
        "steps": result.get("steps", 0),
        "tokens_main": tokens["main_in"] + tokens["main_out"],
        "tokens_sub": tokens["sub_in"] + tokens["sub_out"],
        "tokens": tokens,
        "reported": extra,
        "cost": result.get("cost"),
        "wall_time": result.get("wall_time", 0.0),
        "attempts": result.get("attempts", 1),
        "error": result.get("error"),
        "head": result.get("memory_head"),
        "quality": result.get("quality"),
        "ability": (result.get("grade") or {}).get("ability", ""),
        "outcomes": dict(result.get("reflection_outcomes") or {}),
        **counts,
    }


def _sum(rows: Sequence[Mapping[str, Any]], key: str) -> Any:
    return sum(r.get(key) or 0 for r in rows)


def _run_summary(rows: Sequence[Mapping[str, Any]], summary: Mapping[str, Any]) -> dict[str, Any]:
    costs = [r["cost"] for r in rows if r.get("cost") is not None]
    out: dict[str, Any] = {
        "tasks": len(rows),
        "passed": sum(r["status"] == "passed" for r in rows),
        "failed": sum(r["status"] == "failed" for r in rows),
        "error": sum(r["status"] == "error" for r in rows),
        "limit": sum(r["status"] == "limit" for r in rows),
        "cost": round(sum(costs), 6) if costs else None,
        "elapsed": summary.get("elapsed_total", summary.get("elapsed")),
        "elapsed_last": summary.get("elapsed"),
        "task_time": round(_sum(rows, "wall_time"), 3),
        "concurrency": summary.get("concurrency"),
        "executor": summary.get("executor"),
        "resumed": summary.get("resumed"),
    }
    for key in ("checks_passed", "checks_total", "turns", "steps", "tokens_main", "tokens_sub", "compactions",
                "compactions_failed", *(f"reflections_{o}" for o in _REFLECTION_OUTCOMES)):
        out[key] = _sum(rows, key)
    purposes: Counter[str] = Counter()
    for r in rows:
        purposes.update(r["tokens"]["by_purpose"])
    out["tokens_by_purpose"] = dict(purposes)
    outcomes: Counter[str] = Counter()
    for r in rows:
        outcomes.update(r.get("outcomes") or {})
    out["outcomes"] = dict(outcomes) if outcomes or any("outcomes" in r for r in rows) else None
    out["replayed_tokens"] = sum(r["tokens"].get("replayed", 0) for r in rows)
    out["reported"] = {k: v for k, v in summary.items() if "subagent" in k and isinstance(v, int | float)}
    return out


def _one_run(run_dir: Path, setting: str, offset: int, workers: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    results = read_results(run_dir / RESULTS_FILE)
    meta = _read_json(run_dir / _RUN_FILE) or {}
    order = [t for t in meta.get("tasks", []) if t in results] + sorted(set(results) - set(meta.get("tasks", [])))
    raw = [results[t].to_json() for t in order]

    def one(item: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        events = _events(run_dir, item["id"])
        paths = task_paths(run_dir, item["id"])
        return task_row(item, events, setting), task_detail(item, events, store=paths.store, memory=paths.memory)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        pairs = list(pool.map(one, raw))
    rows = [row for row, _ in pairs]
    for number, row in enumerate(rows):
        row["n"] = offset + number
    summary = _read_json(run_dir / SUMMARY_FILE) or {}
    options = meta.get("options") or {}
    run = {
        "label": setting,
        "dir": str(run_dir),
        "suite": meta.get("suite", ""),
        "overrides": options.get("overrides") or {},
        "summary": _run_summary(rows, summary),
        "rows": rows,
    }
    return run, [detail for _, detail in pairs]


def is_sweep(path: Path) -> bool:
    """A sweep directory says so (``sweep.json``, or ``comparison.json`` from older sweeps)."""
    return not (path / RESULTS_FILE).exists() and ((path / SWEEP_FILE).exists() or (path / COMPARISON_FILE).exists())


def _setting_dirs(path: Path) -> list[Path]:
    found = sorted(p.parent for p in path.glob(f"*/{RESULTS_FILE}"))
    meta = _read_json(path / SWEEP_FILE)
    rows = meta.get("settings") if isinstance(meta, Mapping) else _read_json(path / COMPARISON_FILE)
    if isinstance(rows, list):
        labels = [str(r.get("label", r.get("setting"))) for r in rows if isinstance(r, Mapping)]
        ordered = [path / label for label in labels]
        found = [p for p in ordered if p in found] + [p for p in found if p not in ordered]
    return found


def gather_run(run_dir: Path, *, workers: int = 4) -> ReportData:
    """A run directory's report (blocking: reads files, the stores and git)."""
    if not (run_dir / RESULTS_FILE).exists():
        raise ReportError(f"{run_dir}: no {RESULTS_FILE} here (give the --out directory of reverie run or sweep)")
    run, details = _one_run(run_dir, "", 0, workers)
    index = {"kind": "run", "title": f"reverie run · {run['suite'] or run_dir.name}", "dir": str(run_dir),
             "runs": [run], "charts": []}
    return ReportData(index, tuple(details))


def _matrix(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    ids: list[str] = []
    seen: set[str] = set()
    for run in runs:
        for row in run["rows"]:
            if row["id"] not in seen:
                seen.add(row["id"])
                ids.append(row["id"])
    cells = {run["label"]: {row["id"]: [row["status"], row["n"]] for row in run["rows"]} for run in runs}
    return {"tasks": ids, "settings": [run["label"] for run in runs], "cells": cells}


def _decision(sweep_dir: Path) -> dict[str, Any] | None:
    """The sweep's decision (``summary.json``: quality, outcomes, front, recommendation) with its
    Pareto chart; None for a sweep written before sweeps decided."""
    summary = _read_json(sweep_dir / DECISION_FILE)
    if not isinstance(summary, Mapping) or not isinstance(summary.get("settings"), list):
        return None
    cost_key = "cost" if summary.get("cost_unit") == "cost" else "tokens"
    return {**summary, "pareto_svg": pareto_chart(summary["settings"], summary.get("front", []), cost_key=cost_key)}


def gather_sweep(sweep_dir: Path, *, workers: int = 4) -> ReportData:
    """A sweep directory's report: every setting's run, the task x setting matrix, the charts."""
    dirs = _setting_dirs(sweep_dir)
    if not dirs:
        raise ReportError(f"{sweep_dir}: no setting directories with {RESULTS_FILE} (not a sweep directory)")
    runs: list[dict[str, Any]] = []
    details: list[dict[str, Any]] = []
    for path in dirs:
        run, more = _one_run(path, path.name, len(details), workers)
        runs.append(run)
        details.extend(more)
    index = {"kind": "sweep", "title": f"reverie sweep · {runs[0]['suite'] or sweep_dir.name}", "dir": str(sweep_dir),
             "runs": runs, "matrix": _matrix(runs), "charts": sweep_charts([(r["label"], r["summary"]) for r in runs]),
             "decision": _decision(sweep_dir)}
    return ReportData(index, tuple(details))


def gather(path: Path, *, workers: int = 4) -> ReportData:
    """A run or a sweep, whichever ``path`` is."""
    if not path.is_dir():
        raise ReportError(f"{path}: no such directory")
    return gather_sweep(path, workers=workers) if is_sweep(path) else gather_run(path, workers=workers)
