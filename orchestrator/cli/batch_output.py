"""What ``reverie run`` prints: the live progress bar, the results table, the failed checks, and the
one-line command that resumes an interrupted run with the options it was started with.

The table never cuts a task id (``compact-sliding`` and ``compact-summary`` must stay apart at any
width): the id column is as wide as the longest id and every other column wraps instead. Totals
show the run's real wall time (the tasks' own times overlap when they run concurrently) and the
cost when the run was priced.
"""

from __future__ import annotations

import shlex
import sys
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from orchestrator.batch.sweep_budget import sweep_limit_line
from orchestrator.batch.sweep_stats import limit_stops_cell
from orchestrator.cli.errors import program
from orchestrator.cli.render import one_line

__all__ = [
    "RunProgress",
    "command_line",
    "decision_lines",
    "estimate_lines",
    "estimate_table",
    "failure_lines",
    "program",
    "progress_bar",
    "quality_line",
    "results_table",
    "run_limit_line",
    "sweep_table",
]

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
    so far (Ray tasks report only when they finish).

    One scope for every figure on the line: the whole run. A resumed or retried run starts from the
    results it keeps (``earlier``), so its ``✓``/``✗``, turns, tokens, reflections and compactions
    add up to the bar's done count and to the table printed at the end, and the line says ``whole
    run``. It counted this invocation's passes beside the whole run's done count. ``name``: what the
    line is of (a sweep's setting label; ``run`` for a run)."""

    def __init__(self, progress: Progress | None, total: int, earlier: Sequence[Any] = (), name: str = "run") -> None:
        self.progress = progress
        self.done = 0
        self.failed = 0
        self.final: Counter[str] = Counter()
        self.live: dict[str, Counter[str]] = {}
        for result in earlier:
            self._count(result)
        label = name if not earlier else "whole run" if name == "run" else f"{name} (whole run)"
        self.bar = progress.add_task(label, total=total, completed=len(earlier), stats="") if progress else None
        self._refresh()

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
        if kind == "reflection.failed":
            self._warn(f"⚠ reflection failed ({task_id}): {one_line(str(payload.get('error') or 'unknown error'), 200)}")
            return
        if kind in _LIVE_KIND:
            counts[_LIVE_KIND[kind]] += 1
        elif kind == "model.call" and payload.get("purpose") != "replay":
            counts["tokens_in"] += int(payload.get("prompt_tokens", 0))
            counts["tokens_out"] += int(payload.get("completion_tokens", 0))
        else:
            return
        self._refresh()

    def _warn(self, line: str) -> None:
        """Above the live bar (never over it); on stderr with ``--quiet``, since a failure is never silent."""
        if self.progress is not None:
            self.progress.console.print(Text(line, style="yellow"))
        else:
            print(line, file=sys.stderr, flush=True)

    def _count(self, result: Any) -> None:
        for key in _COUNTS:
            self.final[key] += int(getattr(result, key))
        if result.status == "passed":
            self.done += 1
        else:
            self.failed += 1

    async def on_result(self, result: Any) -> None:
        self.live.pop(result.id, None)
        self._count(result)
        if self.progress is not None and self.bar is not None:
            self.progress.advance(self.bar)
        self._refresh()


@contextmanager
def progress_bar(enabled: bool, console: Console) -> Iterator[Progress | None]:
    """The live bar on ``console`` (stderr), or nothing with ``--quiet``."""
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
        console=console,
        transient=False,
    )
    with bar:
        yield bar


_COLOUR = {"passed": "green", "failed": "red", "error": "bold red", "limit": "yellow"}


_DROP_ORDER = ("head", "steps", "kept", "merged", "compact", "refl", "tok out", "turns", "checks")
"""Columns left out, in this order, when the terminal is too narrow for all of them."""


def _columns(results: Sequence[Any], summary: Mapping[str, Any]) -> list[tuple[str, list[str], str]]:
    """(header, cells, footer) per column."""
    priced = any(r.cost is not None for r in results)
    statuses = [f"{summary['passed']} passed"]
    statuses += [f"{summary[k]} {k}" for k in ("failed", "error", "limit") if summary.get(k)]
    elapsed = summary.get("elapsed_total", summary.get("elapsed"))
    cols: list[tuple[str, list[str], str]] = [
        ("task", [r.id for r in results], f"{summary['tasks']} tasks"),
        ("status", [f"[{_COLOUR.get(r.status, 'white')}]{r.status}[/]" for r in results], " · ".join(statuses)),
        ("checks", [f"{r.checks_passed}/{r.checks_total}" for r in results],
         f"{summary['checks_passed']}/{summary['checks_total']}"),
    ]
    for header, key, total in (("turns", "turns", "turns"), ("steps", "steps", "steps"),
                               ("tok in", "tokens_in", "tokens_in"), ("tok out", "tokens_out", "tokens_out"),
                               ("refl", "reflections_launched", "reflections_launched"),
                               ("merged", "reflections_merged", "reflections_merged"),
                               ("kept", "reflections_conflicted", "reflections_conflicted"),
                               ("compact", "compactions", "compactions")):
        cols.append((header, [f"{getattr(r, key):,}" for r in results], f"{summary[total]:,}"))
    cols.append(("time s", [f"{r.wall_time:.2f}" for r in results],
                 f"{elapsed:.2f} real" if elapsed is not None else f"{summary['wall_time']:.2f}"))
    if priced:
        cost = summary.get("cost")
        cols.append(("cost $", ["" if r.cost is None else f"{r.cost:.4f}" for r in results],
                     "" if cost is None else f"{cost:.4f}"))
    cols.append(("head", [(r.memory_head or "")[:7] for r in results], ""))
    return cols


def _plain_len(text: str) -> int:
    return Text.from_markup(text).cell_len


def _fit(
    cols: list[tuple[str, list[str], str]], width: int | None, drop_order: Sequence[str]
) -> tuple[list[tuple[str, list[str], str]], str | None]:
    """The columns that fit ``width`` (no limit when ``None``) each at its widest cell, leaving out
    the ``drop_order`` ones first to last as needed, and the caption naming those left out."""

    def need(col: tuple[str, list[str], str]) -> int:
        header, cells, footer = col
        return max([_plain_len(header), _plain_len(footer), *(_plain_len(c) for c in cells)]) + 3

    hidden: list[str] = []
    for name in drop_order:
        if width is None or sum(need(c) for c in cols) + 1 <= width:
            break
        cols = [c for c in cols if c[0] != name]
        hidden.append(name)
    return cols, f"(narrow terminal: {', '.join(hidden)} not shown)" if hidden else None


def results_table(results: Sequence[Any], summary: Mapping[str, Any], title: str, *, width: int | None = None) -> Table:
    """The per-task table with a totals footer, fitted to ``width`` columns of terminal (no limit
    when ``None``) by leaving out the least useful columns rather than cutting anything."""
    cols, caption = _fit(_columns(results, summary), width, _DROP_ORDER)
    table = Table(title=title, title_justify="left", show_footer=True, caption=caption, caption_justify="left")
    for header, _, footer in cols:
        justify: Literal["left", "right"] = "left" if header in ("task", "status", "head") else "right"
        if header == "task":
            longest = max(_plain_len(c) for c in [header, footer, *cols[0][1]])
            table.add_column(header, footer=footer, justify="left", no_wrap=True, min_width=longest)
        else:
            table.add_column(header, footer=footer, justify=justify, overflow="fold", no_wrap=header == "time s")
    for i in range(len(results)):
        table.add_row(*(cells[i] for _, cells, _ in cols))
    return table


def run_limit_line(stopped: Mapping[str, Any]) -> str:
    """The summary's line for a run that stopped at one of its limits (B1): which, and what is left."""
    measure = str(stopped["limit"]).partition(".")[2]
    unit = {"tokens": " tokens", "cost": " USD", "seconds": " s"}.get(measure, "")
    left = len(stopped.get("not_run") or ())
    return (
        f"stopped at the run's {measure} limit ({stopped['limit']}): spent {stopped['spent']:g}{unit} of "
        f"{stopped['cap']:g}{unit}; {left} task(s) not run (on limit: {stopped.get('on_limit', 'finish')}); "
        "resume with a raised limit to run them:"
    )


def failure_lines(results: Sequence[Any]) -> list[str]:
    """One rich-markup line per failed or errored task."""
    lines = []
    for r in results:
        if r.status == "error":
            lines.append(f"[bold red]error[/] {r.id}: {r.error}")
        elif r.status == "limit":
            lines.append(f"[yellow]limit[/] {r.id}: {escape(str(r.error))}")
        elif r.status == "failed":
            missed = [c.check for c in r.checks if not c.passed]
            grade = getattr(r, "grade", None)
            if grade is not None and not grade.get("passed"):
                missed.append(f"answer key {str(grade.get('answer', ''))[:80]!r}")
            lines.append(f"[red]failed[/] {r.id}: {'; '.join(missed)} (answer: {escape(repr(r.final_answer[:120]))})")
    return lines


def quality_line(results: Sequence[Any]) -> str | None:
    """The run's graded quality (mean, and per ability), or None when no task has an answer key."""
    graded = [r for r in results if getattr(r, "grade", None) is not None or r.status == "error"]
    if not any(getattr(r, "grade", None) is not None for r in graded):
        return None
    scores = [r.quality or 0.0 for r in graded]
    by: dict[str, list[float]] = {}
    for r, score in zip(graded, scores, strict=True):
        by.setdefault(str((r.grade or {}).get("ability") or "other"), []).append(score)
    parts = ", ".join(f"{a} {sum(v) / len(v):.2f} ({len(v)})" for a, v in sorted(by.items()))
    return f"quality: {sum(scores) / len(scores):.3f} over {len(scores)} graded task(s) · {parts}"


def command_line(words: Sequence[str | Path], options: Mapping[str, Any]) -> str:
    """``reverie <words> --opt value ...`` as one shell-quoted line (``program()`` names reverie):
    ``None``/``False`` options are left out, ``True`` ones are bare flags, a list repeats its option."""
    parts = [program(), *(str(w) for w in words)]
    for name, value in options.items():
        if value is None or value is False:
            continue
        if value is True:
            parts.append(name)
        elif isinstance(value, list | tuple):
            for item in value:
                parts += [name, str(item)]
        else:
            parts += [name, str(value)]
    return shlex.join(parts)


def _quality_cell(row: Mapping[str, Any]) -> str:
    q = row.get("quality")
    return "-" if not q else f"{q['mean']:.3f} [{q['low']:.2f}, {q['high']:.2f}]"


_SWEEP_DROP_ORDER = ("memory B", "pending", "resolved", "failed", "kept", "no_changes", "merged", "real s", "refl",
                     "n", "sub tok", "main tok", "limit stops", "cost")
"""The sweep table's columns left out, in this order, when the terminal is too narrow for all of them
(a cost column with no prices goes first); the setting and its quality always show."""


def sweep_table(summary: Mapping[str, Any], title: str, *, width: int | None = None) -> Table:
    """The sweep's decision table: a row per setting (``*`` marks the Pareto front), fitted to
    ``width`` as the results table is: no setting name, header or figure is cut (all sixteen
    columns need ~165; an 80-column terminal shows the first ones and names the rest)."""
    rows = summary["settings"]
    cols: list[tuple[str, list[str], str]] = [
        ("setting", [r["setting"] + (" *" if r["setting"] in summary["front"] else "") for r in rows], ""),
        ("quality [95%]", [_quality_cell(r) for r in rows], ""),
        ("limit stops", [limit_stops_cell(r) for r in rows], ""),
        ("n", [str(r["samples"]) for r in rows], ""),
        ("main tok", [f"{r['main_tokens_in'] + r['main_tokens_out']:,}" for r in rows], ""),
        ("sub tok", [f"{r['subagent_tokens_in'] + r['subagent_tokens_out']:,}" for r in rows], ""),
        ("cost", ["-" if r.get("cost") is None else f"${r['cost']:.4f}" for r in rows], ""),
        ("refl", [str(r["reflections"]) for r in rows], ""),
        *((k, [str(r["outcomes"][k]) for r in rows], "") for k in ("merged", "resolved", "no_changes", "pending", "kept", "failed")),
        ("memory B", ["-" if r.get("memory_bytes") is None else f"{r['memory_bytes']:,}" for r in rows], ""),
        ("real s", ["" if r.get("elapsed") is None else f"{r['elapsed']:.1f}" for r in rows], ""),
    ]
    unpriced = all(r.get("cost") is None for r in rows)
    cols, caption = _fit(cols, width, ("cost", *_SWEEP_DROP_ORDER[:-1]) if unpriced else _SWEEP_DROP_ORDER)
    stopped = summary.get("sweep_limit")
    if stopped:
        title += f" · stopped at {stopped['limit']}: " + ", ".join(f"{k} ran {n}/{stopped['of']}" for k, n in stopped["ran"].items())
    table = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
    for header, cells, _ in cols:
        longest = max(_plain_len(c) for c in [header, *cells])
        table.add_column(header, justify="left" if header == "setting" else "right", no_wrap=True, min_width=longest)
    for i in range(len(rows)):
        table.add_row(*(cells[i] for _, cells, _ in cols))
    return table


def decision_lines(summary: Mapping[str, Any]) -> list[str]:
    """What the sweep decided, for stdout: per-ability quality, the front, the recommendation, pinned tasks."""
    lines: list[str] = []
    abilities = sorted({a for r in summary["settings"] for a in r["abilities"]})
    for r in summary["settings"]:
        if abilities:
            cells = ", ".join(f"{a} {r['abilities'][a]['mean']:.2f}" for a in abilities if a in r["abilities"])
            lines.append(f"abilities {r['setting']}: {cells}")
    for c in summary.get("paired") or []:
        if c["setting"] != c["versus"]:
            lines.append(
                f"paired {c['setting']} vs {c['versus']}: {c['difference']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}] "
                f"over {c['n']} questions, p={c['p']:.3g}{' (detectable)' if c['detectable'] else ''}"
            )
    if summary.get("detectable"):
        lines.append(summary["detectable"])
    if summary.get("not_exercised"):
        lines.append("not exercised (the trigger never fired; off the front): " + ", ".join(summary["not_exercised"]))
    for ref in summary.get("references") or []:
        lines.append(f"reference {ref['system']} ({ref['model']}): quality {ref['quality']:.3f} (published, not run here)")
    lines.append(f"Pareto front (quality vs {summary['cost_unit']}, * in the table): {', '.join(summary['front'])}")
    rec = summary.get("recommendation")
    if rec:
        lines.append(f"recommended: {rec['reason']}")
    if summary.get("sweep_limit"):
        lines.append(sweep_limit_line(summary["sweep_limit"]))
    if summary.get("pinned"):
        verb = "compared (--override-pinned)" if summary.get("override_pinned") else "left out (--override-pinned compares them)"
        lines.append(f"pinned, {verb}: " + ", ".join(f"{k} ({v})" for k, v in summary["pinned"].items()))
    return lines


def estimate_table(figures: Mapping[str, Any]) -> Table:
    """``--estimate``'s figures: a row per setting (``run`` for a plain run) and the total."""
    table = Table(title="estimate (the embedded model ran the plan; nothing was spent)", title_justify="left")
    for name in ("setting", "model calls", "of them subagents'", "prompt tokens", "completion tokens", "cost"):
        table.add_column(name, justify="left" if name == "setting" else "right", no_wrap=True)
    rows = [*figures["settings"].items(), ("total", figures["total"])]
    for label, row in rows:
        cost = "-" if row.get("cost") is None else f"${row['cost']:.4f}"
        table.add_row(label, f"{row['calls']:,}", f"{row['subagent_calls']:,}", f"{row['prompt_tokens']:,}",
                      f"{row['completion_tokens']:,}", cost)
    return table


def estimate_lines(estimate: Mapping[str, Any] | None, actual: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """A real run's spend next to the estimate made before it (``OUT/estimate.json``), per setting."""
    if not estimate:
        return []
    lines = []
    for label, figures in estimate["settings"].items():
        row = actual.get(label)
        if row is None:
            continue
        spent = int(row.get("tokens_in", row.get("main_tokens_in", 0) + row.get("subagent_tokens_in", 0)) or 0)
        planned = int(figures["prompt_tokens"])
        change = f" ({(spent - planned) / planned:+.0%})" if planned else ""
        lines.append(f"estimate {label}: {planned:,} prompt tokens estimated, {spent:,} spent{change}")
    return lines
