"""Overflow files (COMPACTION-7.5): the full text of a truncated tool output, kept on disk so the
agent can read the rest. Blocking; call from a worker thread."""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

from orchestrator.base.paths import reverie_home

__all__ = ["OVERFLOW_MAX_AGE_SECONDS", "cleanup_overflow_files", "overflow_dir_for", "write_overflow"]

OVERFLOW_MAX_AGE_SECONDS = 24 * 3600


def overflow_dir_for(workspace: Path) -> Path:
    """``$REVERIE_HOME/projects/<sanitised workspace>/agent-tools`` (7.5, reverie-owned location)."""
    raw = str(workspace)
    raw = raw[1:] if raw[:1] in ("/", "\\") else raw
    sanitised = re.sub(r"\s+", "_", re.sub(r"[/\\:]", "_", raw))
    return reverie_home() / "projects" / sanitised / "agent-tools"


def write_overflow(directory: Path, tool: str, text: str) -> str | None:
    """Write ``text`` to ``<tool>-<uuid4>.txt``; return the path, or None if writing failed (ignored)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{tool.lower()}-{uuid.uuid4()}.txt"
        path.write_text(text, encoding="utf-8")
    except OSError:
        return None
    return str(path)


def cleanup_overflow_files(root: Path | None = None, *, max_age: float = OVERFLOW_MAX_AGE_SECONDS) -> int:
    """Delete overflow files older than ``max_age`` seconds under ``root`` (default: every project's);
    return how many were removed. Run at start-up."""
    base = root if root is not None else reverie_home() / "projects"
    cutoff = time.time() - max_age
    removed = 0
    for path in base.glob("**/agent-tools/*.txt") if root is None else base.glob("*.txt"):
        try:
            if path.stat().st_mtime < cutoff:
                path.unlink()
                removed += 1
        except OSError:
            continue
    return removed
