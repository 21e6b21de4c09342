"""The scripted model's merge resolver (``purpose="resolve"``, D3, S27).

The request carries the conflicting files as ``<conflict path="...">`` blocks with a ``<head>``
and a ``<branch>`` side (``subagents.resolver`` writes them). The model resolves by union only
while the rule's text (``resolve each conflict by union``) is in a rule source of the request:
every line of both sides, each once, HEAD's lines in HEAD's order followed by the branch's new
lines. It answers with one ``write_file`` call per file and one ``bash`` call staging them; after
its own tool results it reports. Without the rule it declines, so the conflict stays kept.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Sequence

from .types import Message, ModelRequest, ToolCall

__all__ = ["UNION_RULE", "conflict_blocks", "resolve_turn", "union_text"]

UNION_RULE = "resolve each conflict by union"
_BLOCK = re.compile(
    r'<conflict path="(?P<path>[^"\n]+)">\n'
    r"(?:<head>\n(?P<head>.*?)</head>|<head deleted=\"true\"/>)\n"
    r"(?:<branch>\n(?P<branch>.*?)</branch>|<branch deleted=\"true\"/>)\n"
    r"</conflict>",
    re.S,
)


def union_text(head: str, branch: str) -> str:
    """HEAD's lines in order, then each line of the branch that HEAD lacks, once."""
    ours = head.splitlines()
    seen = set(ours)
    merged = list(ours)
    for line in branch.splitlines():
        if line not in seen:
            merged.append(line)
            seen.add(line)
    if not merged:
        return ""
    return "\n".join(merged) + "\n"


def conflict_blocks(text: str) -> list[tuple[str, str, str]]:
    """``(path, head side, branch side)`` for each conflict block (a deleted side is empty)."""
    return [(m.group("path"), m.group("head") or "", m.group("branch") or "") for m in _BLOCK.finditer(text)]


def resolve_turn(
    request: ModelRequest,
    rule_sources: Sequence[str],
    call_id: Callable[[ModelRequest], str],
) -> tuple[str, tuple[ToolCall, ...]]:
    """The answer text and tool calls for one resolver request."""
    last = next((m for m in reversed(request.messages) if m.role != "system"), None)
    if last is not None and last.role == "tool":
        failed = [m for m in request.messages if m.role == "tool" and _failed(m)]
        if failed:
            return "Could not resolve: " + " ".join(failed[0].content.split())[:200], ()
        return "Resolved the conflict by union.", ()
    if not any(UNION_RULE in source.casefold() for source in rule_sources):
        return "I have no rule for resolving this conflict, so I leave it as it is.", ()
    user = next((m.content for m in request.messages if m.role == "user"), "")
    blocks = conflict_blocks(user)
    if not blocks:
        return "No conflicting files were given.", ()
    base = call_id(request)
    calls = [
        ToolCall(f"{base}_{i}", "write_file", json.dumps({"path": path, "content": union_text(head, branch)}, ensure_ascii=False))
        for i, (path, head, branch) in enumerate(blocks)
    ]
    paths = " ".join(shlex.quote(path) for path, _, _ in blocks)
    command = f'cd "$MEMORY_DIR" && git add -- {paths}'
    calls.append(ToolCall(f"{base}_add", "bash", json.dumps({"command": command}, ensure_ascii=False)))
    return f"Resolving {len(blocks)} file(s) by union.", tuple(calls)


def _failed(message: Message) -> bool:
    text = message.content
    return text.startswith(("Command failed", "Error", "error")) or "fatal:" in text
