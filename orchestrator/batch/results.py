"""Per-task results, ``results.jsonl`` and the run summary.

``results.jsonl`` is append-only, one line per finished task, flushed and fsynced as each task ends:
it is the resume journal (a task with a line is done; anything else runs again from scratch). A
line cut short by a kill is ignored when read back.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

__all__ = [
    "OUTCOMES",
    "RESULTS_FILE",
    "SUMMARY_FILE",
    "CheckResult",
    "TaskResult",
    "append_results",
    "compact_results",
    "read_results",
    "reflection_outcomes",
    "summarize",
    "task_quality",
    "write_summary",
]

OUTCOMES = ("merged", "resolved", "no_changes", "pending", "kept", "review", "failed", "limit")
"""Where every reflection launch ends, as a batch result counts it (they add up to the launches);
``review``: held for a person under ``[reflection] merge = review`` (V1); ``limit``: stopped at its budget (B1)."""

_OUTCOME_OF = {
    "merged": "merged",
    "resolved": "resolved",
    "no_changes": "no_changes",
    "pending": "pending",
    "kept_recovered": "pending",
    "kept_dirty": "pending",
    "running": "pending",
    "kept_conflict": "kept",
    "kept_invalid": "kept",
    "kept_failed": "kept",
    "kept_review": "review",
    "failed": "failed",
    "discarded": "failed",
    "limit": "limit",
    "interrupted": "pending",
    "relaunched": "pending",
}


def reflection_outcomes(statuses: Iterable[str]) -> dict[str, int]:
    """Pure: the store's reflection statuses (``ReflectionRecord.status``) counted by ``OUTCOMES``.
    A record still ``running`` when the task ended (its 30 s wait ran out) counts as ``pending``,
    and a status this version does not know as ``failed``, so the counts always add up to the
    number of records, i.e. of launches."""
    counts = dict.fromkeys(OUTCOMES, 0)
    for status in statuses:
        counts[_OUTCOME_OF.get(status, "failed")] += 1
    return counts


def task_quality(status: str, grade: Mapping[str, Any] | None) -> float:
    """Pure: a task's quality score in [0, 1]: its grade when it has an answer key, else whether
    it passed (an errored task scores 0: a setting that breaks tasks is worse, not absent)."""
    if status == "error":
        return 0.0
    if grade is not None:
        return 1.0 if grade.get("passed") else 0.0
    return 1.0 if status == "passed" else 0.0

RESULTS_FILE = "results.jsonl"
SUMMARY_FILE = "summary.json"


@dataclass(frozen=True)
class CheckResult:
    """One check of a task and whether it held."""

    check: str
    passed: bool


@dataclass(frozen=True)
class TaskResult:
    """``status``: ``passed`` (every check held), ``failed`` (a check did not), ``error`` (the task
    could not finish: a turn ended in error, or the runner raised) or ``limit`` (a turn stopped at
    one of the task's or session's limits, named by ``limit``: ``task.tokens``; B1).

    ``tokens_*`` and ``cost`` count every model call of the task; ``subagent_*`` the part of them
    made by subagents (every purpose but ``chat``), so what summaries and reflections cost shows."""

    id: str
    status: str
    checks_passed: int
    checks_total: int
    checks: tuple[CheckResult, ...] = ()
    turns: int = 0
    steps: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float | None = None
    subagent_tokens_in: int = 0
    subagent_tokens_out: int = 0
    subagent_cost: float | None = None
    reflections_launched: int = 0
    reflections_merged: int = 0
    reflections_conflicted: int = 0
    compactions: int = 0
    wall_time: float = 0.0
    memory_head: str | None = None
    memory_base: str | None = None
    final_answer: str = ""
    error: str | None = None
    worker_pid: int = 0
    settings: Mapping[str, Any] = field(default_factory=dict)
    attempts: int = 1
    replayed_turns: int = 0
    replayed_tokens: int = 0
    reflection_outcomes: Mapping[str, int] = field(default_factory=dict)
    held_branches: tuple[str, ...] = ()
    memory_bytes: int | None = None
    grade: Mapping[str, Any] | None = None
    quality: float | None = None
    model_calls: int = 0
    subagent_calls: int = 0
    limit: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["checks"] = [asdict(c) for c in self.checks]
        out["settings"] = dict(self.settings)
        out["reflection_outcomes"] = dict(self.reflection_outcomes)
        out["held_branches"] = list(self.held_branches)
        out["grade"] = None if self.grade is None else dict(self.grade)
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> TaskResult:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in raw.items() if k in known}
        values["checks"] = tuple(CheckResult(str(c["check"]), bool(c["passed"])) for c in raw.get("checks", ()))
        values["held_branches"] = tuple(raw.get("held_branches", ()))
        return cls(**values)


def append_results(path: Path, results: Sequence[TaskResult]) -> None:
    """Append one line per result, durably: one write and one sync for all of them (blocking)."""
    text = "".join(json.dumps(r.to_json(), ensure_ascii=False, sort_keys=True) + "\n" for r in results)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def read_results(path: Path) -> dict[str, TaskResult]:
    """Finished tasks by id (blocking). A torn or foreign line is skipped; the last line per id wins."""
    found: dict[str, TaskResult] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return found
    for line in text.splitlines():
        try:
            raw = json.loads(line)
            result = TaskResult.from_json(raw)
        except (ValueError, TypeError, KeyError):
            continue
        found[result.id] = result
    return found


def compact_results(path: Path) -> None:
    """Rewrite the journal with one line per task, its latest (blocking; atomic: a kill leaves the
    old file or the new one). Tasks keep the order in which they first finished."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return
    latest: dict[str, str] = {}
    for line in text.splitlines():
        try:
            raw = json.loads(line)
            task_id = TaskResult.from_json(raw).id
        except (ValueError, TypeError, KeyError):
            continue
        latest[task_id] = line
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write("".join(line + "\n" for line in latest.values()))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


_SUMS = (
    "checks_passed",
    "checks_total",
    "turns",
    "steps",
    "tokens_in",
    "tokens_out",
    "subagent_tokens_in",
    "subagent_tokens_out",
    "reflections_launched",
    "reflections_merged",
    "reflections_conflicted",
    "compactions",
    "wall_time",
    "replayed_turns",
    "replayed_tokens",
    "model_calls",
    "subagent_calls",
)


def summarize(results: Iterable[TaskResult], *, elapsed: float | None = None) -> dict[str, Any]:
    """Totals over a run (pure). ``wall_time`` is the sum of task times; ``elapsed`` the run's own."""
    items: Sequence[TaskResult] = sorted(results, key=lambda r: r.id)
    summary: dict[str, Any] = {
        "tasks": len(items),
        "passed": sum(r.status == "passed" for r in items),
        "failed": sum(r.status == "failed" for r in items),
        "error": sum(r.status == "error" for r in items),
        "limit": sum(r.status == "limit" for r in items),
    }
    for name in _SUMS:
        total = sum(getattr(r, name) for r in items)
        summary[name] = round(total, 3) if isinstance(total, float) else total
    costs = [r.cost for r in items if r.cost is not None]
    summary["cost"] = round(sum(costs), 6) if costs else None
    subagent_costs = [r.subagent_cost for r in items if r.subagent_cost is not None]
    summary["subagent_cost"] = round(sum(subagent_costs), 6) if subagent_costs else None
    outcomes = dict.fromkeys(OUTCOMES, 0)
    for r in items:
        for name, count in r.reflection_outcomes.items():
            outcomes[name] = outcomes.get(name, 0) + int(count)
    summary["reflection_outcomes"] = outcomes
    held = {r.id: list(r.held_branches) for r in items if r.held_branches}
    summary["reflections_held"] = sum(len(b) for b in held.values())
    summary["held_branches"] = held
    scores = [r.quality for r in items if r.quality is not None]
    summary["quality"] = round(sum(scores) / len(scores), 4) if scores else None
    sizes = [r.memory_bytes for r in items if r.memory_bytes is not None]
    summary["memory_bytes"] = sum(sizes) if sizes else None
    summary["elapsed"] = None if elapsed is None else round(elapsed, 3)
    summary["statuses"] = {r.id: r.status for r in items}
    return summary


def write_summary(path: Path, summary: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(summary, ensure_ascii=False, indent=2, sort_keys=True) + "\n", encoding="utf-8")
