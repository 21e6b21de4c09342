"""The reflection agent's loop, bounded by the context window (D5; TURN-5.15, TURN-8.6 item 4).

The transcript stays where the coordinator wrote it (read-only, under the runtime directory) and is
handed over only by path, ``$TRANSCRIPT_PATH``: the first message says how long it is and which
slices to read with ``read_file`` (``offset``/``limit``), each small enough to sit in the window
beside the prompt, the tools and the agent's own notes. The agent keeps its context within the window
by those bounded reads and by this loop trimming its older tool results (a stub says how to read them
again); it never launches a subagent. Before every request the loop checks the estimate against the
window's hard limit and trims further (older results, then older notes, then the newest result's
middle), so no request of the reflection agent exceeds the window whatever the model asks to read.

The step limit grows with the transcript: the base limit plus two steps per slice, enough to read
everything and still commit.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from orchestrator.base.errors import ReverieError
from orchestrator.compaction import estimate_messages, estimate_text, hard_limit, tool_schema_tokens
from orchestrator.models.types import Message, ModelClient, ModelRequest, ToolSpec
from orchestrator.tools import ToolContext, run_tool
from orchestrator.tools.truncation import READ_MAX_CHARS_PER_LINE, clip_middle

__all__ = [
    "BASE_STEPS",
    "ReadingPlan",
    "ReflectionUnfinished",
    "fit_context",
    "plan_reading",
    "reading_instructions",
    "run_reading_loop",
]

BASE_STEPS = 12
_LINE_OVERHEAD = 8
_MIN_SLICE_CHARS = 1_000
_NOTES_SHARE = 4
_CARRIED_HEAD = "Progress so far (older steps were removed to stay within the context window):"
_TRIMMED = (
    "[older tool result trimmed to keep the reflection within its context window; "
    "read it again with read_file if you still need it]"
)


class ReflectionUnfinished(ReverieError):
    """The reflection agent used every step without finishing."""


@dataclass(frozen=True)
class ReadingPlan:
    """How the transcript is read: ``slice_lines`` lines per ``read_file`` call, ``slices`` calls."""

    path: Path
    total_lines: int
    total_chars: int
    slice_lines: int
    slices: int

    @property
    def max_steps(self) -> int:
        return BASE_STEPS + 2 * self.slices

    def offsets(self) -> list[int]:
        return [1 + i * self.slice_lines for i in range(self.slices)]


def _slice_budget(window: int, fixed_tokens: int) -> int:
    """Characters one slice may take: what the window leaves beside the prompt and tools, less a
    share for the agent's notes and the bash call that commits them."""
    limit = hard_limit(window) or window
    free = max(0, limit - fixed_tokens)
    return max(_MIN_SLICE_CHARS, (free - free // _NOTES_SHARE) * 4 // 2)


def plan_reading(path: Path, text: str, *, window: int, fixed_tokens: int) -> ReadingPlan:
    """The largest uniform slice (in lines) whose every instance fits the slice budget, as numbered
    by ``read_file`` (its per-line cut included)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    sizes = [min(len(line), READ_MAX_CHARS_PER_LINE + 20) + _LINE_OVERHEAD for line in lines]
    budget = _slice_budget(window, fixed_tokens)
    total = len(sizes)
    if total == 0:
        return ReadingPlan(path, 0, 0, 1, 0)

    def fits(count: int) -> bool:
        run = sum(sizes[:count])
        if run > budget:
            return False
        for i in range(count, total):
            run += sizes[i] - sizes[i - count]
            if run > budget:
                return False
        return True

    low, high = 1, total
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    slices = -(-total // low)
    return ReadingPlan(path, total, len(text), low, slices)


def reading_instructions(plan: ReadingPlan) -> str:
    """The first message: where the transcript is and how to read it (the scripted model follows the
    ``read_file in slices`` line, so its wording is part of the contract)."""
    if plan.slices == 0:
        return f"The transcript in $TRANSCRIPT_PATH = {plan.path} is empty: there is nothing to reflect on."
    last = plan.offsets()[-1]
    return (
        "Review the conversation transcript and update memory.\n\n"
        f"The transcript is in $TRANSCRIPT_PATH = {plan.path} ({plan.total_lines:,} lines, "
        f"{plan.total_chars:,} characters). It is read-only and too long to hold at once: "
        f"read_file in slices of at most {plan.slice_lines} lines, offsets 1, "
        f"{1 + plan.slice_lines if plan.slices > 1 else 1}, ... up to {last} "
        f"({plan.slices} slice(s)).\n"
        "Older tool results are trimmed from your context as you go, so after each slice write down, "
        "in your reply, the durable facts and rules it holds (or that it holds none); commit memory "
        "changes whenever you have a few, and always before you finish."
    )


def _steps(messages: Sequence[Message]) -> list[tuple[int, int]]:
    """``(start, end)`` of each step after the first message: an assistant message and its results."""
    bounds: list[tuple[int, int]] = []
    for i in range(1, len(messages)):
        if messages[i].role == "assistant":
            bounds.append((i, i + 1))
        elif bounds:
            bounds[-1] = (bounds[-1][0], i + 1)
    return bounds


def _carried(first: Message, note: str, read_through: int, plan: ReadingPlan) -> Message:
    """The first message with a dropped step's note added to its progress block."""
    instructions, _, carried = first.content.partition(f"\n\n{_CARRIED_HEAD}\n")
    earlier = carried.split("\n", 1)[1] if "\n" in carried else ""
    notes = "\n".join(part for part in (earlier, note.strip()) if part)
    progress = f"The furthest transcript line read so far is {read_through} of {plan.total_lines}."
    return replace(first, content=f"{instructions}\n\n{_CARRIED_HEAD}\n{progress}\n{notes}")


def fit_context(messages: list[Message], budget_tokens: int, plan: ReadingPlan, read_through: int) -> list[Message]:
    """Trim ``messages`` until their estimate is within ``budget_tokens``: older tool results first,
    then whole older steps (their notes carried into the first message with how far the reading got),
    then the carried notes' middle, then the newest step's results (their middle)."""
    out = list(messages)
    steps = _steps(out)
    for start, end in steps[:-1]:
        for i in range(start + 1, end):
            if estimate_messages(out) <= budget_tokens:
                return out
            if out[i].role == "tool":
                out[i] = replace(out[i], content=_TRIMMED)
    while estimate_messages(out) > budget_tokens and len(steps := _steps(out)) > 1:
        start, end = steps[0]
        out = [_carried(out[0], out[start].content, read_through, plan), *out[1:start], *out[end:]]
    over = estimate_messages(out) - budget_tokens
    if over > 0 and _CARRIED_HEAD in out[0].content:
        first = out[0].content
        allowed = max(len(first) // 2, len(first) - over * 4)
        out[0] = replace(out[0], content=clip_middle(first, allowed, _notes_marker))
    results = [i for i in range(1, len(out)) if out[i].role == "tool"]
    over = estimate_messages(out) - budget_tokens
    if over > 0 and results:
        total = sum(len(out[i].content) for i in results) or 1
        for i in results:
            text = out[i].content
            allowed = max(200, len(text) - (over * 4 * len(text)) // total - 200)
            out[i] = replace(out[i], content=clip_middle(text, allowed, _result_marker))
    return out


def _notes_marker(omitted: int) -> str:
    return f"\n[... {omitted:,} characters of older notes trimmed to fit the context window ...]\n"


def _result_marker(omitted: int) -> str:
    return (
        f"\n[... {omitted:,} characters cut to fit the context window; read this part again with a "
        "smaller limit ...]\n"
    )


async def run_reading_loop(
    model: ModelClient,
    *,
    system: str,
    plan: ReadingPlan,
    ctx: ToolContext,
    tools: tuple[ToolSpec, ...],
    window: int,
    model_name: str,
) -> int:
    """Run the reflection agent until it answers without tool calls; returns the steps it took.

    Raises ``ReflectionUnfinished`` when ``plan.max_steps`` requests did not suffice."""
    fixed = estimate_text(system) + tool_schema_tokens(tools)
    budget = max(1, (hard_limit(window) or window) - fixed)
    messages: list[Message] = [Message(role="user", content=reading_instructions(plan))]
    read_through = 0
    for step in range(1, plan.max_steps + 1):
        messages = fit_context(messages, budget, plan, read_through)
        response = await model.complete(
            ModelRequest(
                system=system, messages=tuple(messages), tools=tools, model=model_name, purpose="reflect"
            )
        )
        messages.append(response.message)
        if not response.message.tool_calls:
            return step
        for call in response.message.tool_calls:
            arguments = _bounded_arguments(call.name, call.arguments, plan)
            read_through = max(read_through, _read_end(call.name, arguments, plan))
            result = await run_tool(call.name, arguments, ctx)
            messages.append(Message(role="tool", content=result.output, tool_call_id=call.id, name=call.name))
    raise ReflectionUnfinished(f"reflection did not finish within {plan.max_steps} steps")


def _read_end(name: str, arguments: str, plan: ReadingPlan) -> int:
    """The last transcript line a ``read_file`` call reads (0 for any other call)."""
    if name != "read_file":
        return 0
    try:
        args = json.loads(arguments)
    except ValueError:
        return 0
    if not isinstance(args, dict) or Path(str(args.get("path", ""))).name != plan.path.name:
        return 0
    offset, limit = args.get("offset"), args.get("limit")
    first = offset if isinstance(offset, int) else 1
    count = limit if isinstance(limit, int) else plan.slice_lines
    return min(plan.total_lines, max(1, first) + max(1, count) - 1)


def _bounded_arguments(name: str, arguments: str, plan: ReadingPlan) -> str:
    """A ``read_file`` of the transcript asking for more than a slice gets one slice's worth."""
    if name != "read_file" or plan.slices == 0:
        return arguments
    try:
        args = json.loads(arguments)
    except ValueError:
        return arguments
    if not isinstance(args, dict) or Path(str(args.get("path", ""))).name != plan.path.name:
        return arguments
    limit = args.get("limit")
    if not isinstance(limit, int) or limit > plan.slice_lines or limit < 1:
        args["limit"] = plan.slice_lines
    return json.dumps(args, ensure_ascii=False)
