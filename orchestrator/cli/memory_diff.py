"""A memory change in a few lines: which files, how many lines each, and the first changed lines.

Used by the chat after a turn that moved the memory's HEAD and after a reflection merge, so the
user sees what changed (``system/persona.md +1 -0`` then ``+ always end answers with 🦉``)
without opening git.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orchestrator.memfs.history import patch

__all__ = ["MemoryDiff", "memory_diff"]

@dataclass(frozen=True)
class MemoryDiff:
    """A commit's diff shortened for the terminal: per-file counts, the first lines, how many more."""

    files: tuple[tuple[str, int, int], ...]
    lines: tuple[str, ...]
    more: int

    def render(self, indent: str = "    ") -> list[str]:
        shown = [f"{indent}{line}" for line in self.lines]
        if self.more:
            shown.append(f"{indent}… {self.more} more changed line{'s' if self.more != 1 else ''}")
        return shown

    @property
    def summary(self) -> str:
        return ", ".join(f"{path} +{added} -{removed}" for path, added, removed in self.files)


def memory_diff(repo: Path, before: str | None, after: str, *, max_lines: int = 6, width: int = 100) -> MemoryDiff | None:
    """The change from ``before`` (None: nothing) to ``after``; None when git cannot tell (e.g. a
    revision is gone). Blocking: call it in a worker thread."""
    said = patch(repo, before, after, context=0, renames=True)
    if said is None:
        return None
    counts: dict[str, list[int]] = {}
    current: list[int] | None = None
    lines: list[str] = []
    total = 0
    for raw in said.splitlines():
        if raw.startswith("diff --git "):
            current = counts.setdefault(raw.split(" b/", 1)[-1], [0, 0])
        elif raw.startswith(("+++", "---")) or current is None:
            continue
        elif raw.startswith(("+", "-")):
            sign = raw[0]
            current[0 if sign == "+" else 1] += 1
            total += 1
            if len(lines) < max_lines:
                text = " ".join(raw[1:].split())
                lines.append(f"{sign} {text if len(text) <= width else text[: width - 1] + '…'}")
    return MemoryDiff(
        files=tuple((path, added, removed) for path, (added, removed) in counts.items()),
        lines=tuple(lines),
        more=total - len(lines),
    )
