"""A memory change as ``reverie memory log`` and the REPL's ``/memory log`` print it.

Apart from ``cli/memory.py`` so that the REPL formats a change without loading the command line
(typer and rich), which a chat otherwise never needs.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from orchestrator.memfs.history import Change

__all__ = ["change_json", "format_change"]


def _ids(change: Change) -> str:
    found = change.provenance
    parts = [
        f"{label} {value}"
        for label, value in (
            ("agent", found.agent), ("conversation", found.conversation), ("turn", found.turn),
            ("reflection", found.reflection), ("trigger", found.trigger), ("run", found.run),
            ("task", found.task), ("undoes", found.undoes),
        )
        if value
    ]
    return " · ".join(parts)


def _when(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")


def format_change(change: Change) -> str:
    """A change as ``memory log`` prints it: time, source, commit(s) and subject, its ids, its files."""
    commits = change.commit[:7] + (f" (+{len(change.commits) - 1})" if len(change.commits) > 1 else "")
    lines = [f"{_when(change.time)}  {change.provenance.source:<10}  {commits}  {change.subject}"]
    ids = _ids(change)
    if ids:
        lines.append(f"    {ids}")
    for item in change.files:
        counts = "binary" if item.added is None else f"+{item.added} -{item.removed}"
        lines.append(f"    {item.path}  {counts}")
    return "\n".join(lines)


def change_json(change: Change) -> dict[str, Any]:
    """A change as ``memory log --json`` prints it."""
    return {
        "commit": change.commit,
        "commits": list(change.commits),
        "sources": list(change.sources),
        "time": datetime.fromtimestamp(change.time, UTC).isoformat(),
        "author": change.author,
        "source": change.provenance.source,
        "provenance": change.provenance.as_dict(),
        "subject": change.subject,
        "files": [{"path": f.path, "added": f.added, "removed": f.removed} for f in change.files],
    }
