"""How lists of conversations and agents are printed: one line each, with what tells them apart.

A conversation is shown by the shortest prefix of its id that no other conversation of the agent
shares (``MIN_PREFIX`` at least; ``--conversation`` and ``/conversations`` take such a prefix), its
message count, its last activity and its first user message, so a list of ids becomes a list a
user can choose from.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.cli.render import one_line
from orchestrator.store import ConversationSummary

__all__ = ["MIN_PREFIX", "conversation_lines", "short_time", "unique_prefixes"]

MIN_PREFIX = 13
"""``conv-`` and 8 characters of the id: as short as git's short ids, and as rarely shared."""


def unique_prefixes(ids: Sequence[str], minimum: int = MIN_PREFIX) -> dict[str, str]:
    """Each id's shortest prefix (at least ``minimum`` long) that no other id starts with."""
    out: dict[str, str] = {}
    for ident in ids:
        length = min(minimum, len(ident))
        while length < len(ident) and any(o != ident and o.startswith(ident[:length]) for o in ids):
            length += 1
        out[ident] = ident[:length]
    return out


def short_time(stamp: str | None) -> str:
    """``2026-12-05T10:31:07.123+00:00`` as ``2026-12-05 10:31`` (UTC, as stored)."""
    if not stamp:
        return "never"
    return stamp[:16].replace("T", " ")


def conversation_lines(summaries: Sequence[ConversationSummary], current: str | None = None) -> list[str]:
    """One line per conversation, oldest first; ``*`` marks ``current``."""
    prefixes = unique_prefixes([s.conversation.id for s in summaries])
    width = max((len(p) for p in prefixes.values()), default=MIN_PREFIX)
    lines = []
    for s in summaries:
        conv = s.conversation
        mark = "*" if conv.id == current else " "
        count = f"{s.messages} message{'s' if s.messages != 1 else ''}"
        first = one_line(s.first_message, 60) if s.first_message else "(no messages yet)"
        title = f"{conv.title}: " if conv.title else ""
        lines.append(
            f"{mark} {prefixes[conv.id].ljust(width)}  {count:>12}  last {short_time(s.last_activity)}  {title}{first}"
        )
    return lines
