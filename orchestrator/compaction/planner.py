"""Which messages a compaction evicts (COMPACTION-2.2 to COMPACTION-2.4, COMPACTION-5.7; C2, C5, S3-S5).

Pure: no I/O, no model. The plan names indices into the list it was given; the caller maps them to
stored ids and applies the plan (``[summary] + kept_messages``). It tries a sliding cutoff, then
``all``, then emergency eviction; the newest user message is never evicted (D4) and is cut only when
it alone overflows the window. Estimates are prefix sums, so planning stays linear. One module
because the rungs share those estimates and the D4 rules, and it is property-tested as a whole. The
rules, with reverie's choices where the specs leave room, are in docs/architecture.md, "The
compaction planner"."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

from orchestrator.base.errors import ReverieError
from orchestrator.compaction.settings import CompactionMode, CompactionSettings
from orchestrator.compaction.tokens import estimate_message, estimate_text, threshold
from orchestrator.models.types import Message
from orchestrator.tools.truncation import clip_middle

__all__ = [
    "EMERGENCY_PERCENTAGE",
    "MIN_KEPT_CHARS",
    "CompactionPlan",
    "ContextWindowTooSmall",
    "PlanningError",
    "find_sliding_cutoff",
    "hard_limit",
    "normalise_percentage",
    "plan_all",
    "plan_compaction",
    "plan_emergency",
    "round_half_up",
    "summary_allowance",
]

EMERGENCY_PERCENTAGE = 0.5
MIN_KEPT_CHARS = 200
_MIN_SUMMARY_TOKENS = 64


class PlanningError(ReverieError, ValueError):
    """No valid sliding cutoff; the routine falls back to ``all`` (never a compaction failure)."""


class ContextWindowTooSmall(ReverieError):
    """The system prompt, tool schemas and the newest message cannot share the window (D4): the turn
    is refused with this one line instead of sending a hollowed message."""

    def __init__(self, window: int, needed: int) -> None:
        self.window = window
        self.needed = needed
        super().__init__(
            f"the context window ({window:,} tokens) is too small for this request: the system prompt, "
            f"tool schemas and the newest message (the user's, or a tool call or result) need at least {needed:,}; "
            "raise it with --context-window "
            "(or [compaction] context_window in config.toml)"
        )


def hard_limit(window: int | None) -> int | None:
    """What a request may never exceed: the window less a twentieth (room for the answer and for the
    chars/4 estimate being off)."""
    if window is None or window <= 0:
        return None
    return window - max(1, window // 20)


def summary_allowance(reserve: int, window: int | None, fixed: int) -> int:
    """The summary size planned for (and asked of the summarizer): the reserve (S20), less in a small
    window so a summary never crowds out the newest message; at least 64 tokens."""
    limit = threshold(window)
    if limit is None:
        return reserve
    return min(reserve, max(_MIN_SUMMARY_TOKENS, (limit - fixed) // 2))


@dataclass(frozen=True)
class CompactionPlan:
    """One compaction's cut of the in-context list.

    ``evicted`` + ``kept`` partition ``range(messages_before)``. ``summarized`` are the evicted
    messages the summarizer reads, ``pinned`` the evicted previous summaries it updates, and the rest
    of ``evicted`` are dropped ``memory_update`` messages. ``kept_messages`` are the kept messages in
    order, with the S5 cut applied at ``cut_index`` (an index into the original list) if any.
    ``tokens_*`` are request estimates (system prompt and tools included; after assumes the summary
    costs ``summary_reserve``).
    """

    mode: CompactionMode
    requested_mode: CompactionMode
    cutoff: int
    evicted: tuple[int, ...]
    summarized: tuple[int, ...]
    pinned: tuple[int, ...]
    kept: tuple[int, ...]
    kept_messages: tuple[Message, ...]
    cut_index: int | None
    messages_before: int
    tokens_before: int
    tokens_after: int
    threshold: int | None
    escalated: bool
    window: int | None = None
    needed_tokens: int | None = None
    cut_indices: tuple[int, ...] = ()
    summary_tokens: int = 0

    @property
    def refused(self) -> bool:
        """True when not even the newest message fits (D4): the turn must be refused."""
        return self.needed_tokens is not None

    @property
    def evicted_count(self) -> int:
        """``k`` of the summary text: messages leaving the context, previous summaries excepted (S4)."""
        return len(self.evicted) - len(self.pinned)

    @property
    def fits(self) -> bool:
        return self.threshold is None or self.tokens_after < self.threshold


def round_half_up(x: Fraction) -> int:
    """``floor(x + 1/2)``; Python's ``round`` rounds half to even, which letta-code does not."""
    return math.floor(x + Fraction(1, 2))


def normalise_percentage(p: float) -> Fraction:
    """letta-code's normalisation: NaN/inf -> 0.3, <= 0 -> 0.1, > 1 -> 1; exact from the decimal text."""
    if not isinstance(p, int | float) or isinstance(p, bool) or not math.isfinite(p):
        return Fraction(3, 10)
    if p <= 0:
        return Fraction(1, 10)
    if p > 1:
        return Fraction(1)
    return Fraction(str(p))


class _Costs:
    """Per-message estimates and the suffix sums the planner needs, computed once."""

    def __init__(self, messages: Sequence[Message]) -> None:
        n = len(messages)
        self.est = [estimate_message(m) for m in messages]
        self.kept_suffix = [0] * (n + 1)
        for i in range(n - 1, -1, -1):
            own = 0 if messages[i].kind == "memory_update" else self.est[i]
            self.kept_suffix[i] = self.kept_suffix[i + 1] + own
        self.total = sum(self.est)


def _pending_tool_call(messages: Sequence[Message]) -> bool:
    return bool(messages) and messages[-1].role == "assistant" and bool(messages[-1].tool_calls)


def find_sliding_cutoff(
    messages: Sequence[Message],
    percentage: float,
    window: int | None,
    *,
    system_prompt_tokens: int = 0,
    tool_tokens: int = 0,
    summary_reserve: int | None = None,
    _costs: _Costs | None = None,
) -> int:
    """The sliding-window cutoff (index of the first kept message), or ``PlanningError``.

    ``window`` ``None`` means no token goal: the first valid cutoff at the first fraction wins. With
    ``summary_reserve`` ``None`` only the goal is checked (the search of COMPACTION-2.3 alone);
    otherwise a cutoff must also bring the request under ``threshold(window)``.
    """
    n = len(messages)
    if n < 4:
        raise PlanningError("Not enough messages for sliding window compaction.")
    costs = _costs or _Costs(messages)
    p = normalise_percentage(percentage)
    max_cut = n - 2 if _pending_tool_call(messages) else n - 1
    previous_valid = [-1] * n
    last = -1
    for i, m in enumerate(messages):
        if m.role == "assistant" and 0 < i < max_cut:
            last = i
        previous_valid[i] = last
    fixed = system_prompt_tokens + tool_tokens
    goal = None if window is None else (1 - p) * (window - fixed)
    limit = threshold(window) if summary_reserve is not None else None
    step = 0
    while (fraction := p + Fraction(step, 10)) <= 1:
        step += 1
        cut = previous_valid[min(round_half_up(fraction * n), n - 1)]
        if cut < 0:
            continue
        kept = costs.kept_suffix[cut]
        if goal is not None and not kept < goal:
            continue
        if limit is not None and summary_reserve is not None and not (summary_reserve + kept + fixed < limit):
            continue
        return cut
    raise PlanningError("No assistant message found for sliding window compaction.")


def _cut_marker(omitted: int) -> str:
    return (
        f"\n[... {omitted:,} characters were cut from the middle of this message to fit the context window; "
        "the whole message remains in the conversation transcript (conversation_search) ...]\n"
    )


def _tool_cut_marker(omitted: int) -> str:
    return (
        f"\n[... {omitted:,} characters were cut from the middle of this tool result to fit the context "
        "window; the whole result remains in the conversation transcript ...]\n"
    )


def _current_step(messages: Sequence[Message], newest: int) -> int:
    """Where the current step starts: the last assistant message after the newest user message."""
    for i in range(len(messages) - 1, newest, -1):
        if messages[i].role == "assistant":
            return i
    return len(messages)


def _rebuild(
    messages: Sequence[Message],
    costs: _Costs,
    plan: CompactionPlan,
    keep: Sequence[int],
    *,
    fixed: int,
    summary_reserve: int,
) -> CompactionPlan:
    return replace(
        _build(
            messages,
            costs,
            mode=plan.mode,
            requested_mode=plan.requested_mode,
            cutoff=min(keep, default=len(messages)),
            keep_from=keep,
            fixed=fixed,
            summary_reserve=summary_reserve,
            limit=plan.threshold,
            escalated=plan.escalated,
        ),
        window=plan.window,
        summary_tokens=plan.summary_tokens,
    )


def _window_needed(tokens: int) -> int:
    """The smallest window whose ``hard_limit`` admits ``tokens``."""
    window = tokens + tokens // 19 + 1
    while window > 1 and (hard_limit(window - 1) or 0) >= tokens:
        window -= 1
    while (hard_limit(window) or 0) < tokens:
        window += 1
    return window


def _fit_window(
    messages: Sequence[Message],
    costs: _Costs,
    plan: CompactionPlan,
    *,
    newest: int | None,
    fixed: int,
    summary_reserve: int,
    window: int | None,
) -> CompactionPlan:
    """D4, in order: keep the newest user message; if the plan misses the threshold, drop the earlier
    steps of the current turn; if the request would still pass the hard limit, plan a shorter summary
    (down to 64 tokens), then cut the current step's tool results, then the message itself, or refuse
    when under ``MIN_KEPT_CHARS`` of it would stay."""
    plan = replace(plan, window=window, summary_tokens=summary_reserve)
    if newest is None:
        return plan
    if newest not in plan.kept:
        plan = _rebuild(
            messages, costs, plan, sorted({newest, *plan.kept}), fixed=fixed, summary_reserve=summary_reserve
        )
    if not plan.fits:
        step = _current_step(messages, newest)
        tight = _rebuild(
            messages,
            costs,
            plan,
            [newest, *(i for i in plan.kept if i >= step)],
            fixed=fixed,
            summary_reserve=summary_reserve,
        )
        if tight.tokens_after < plan.tokens_after:
            plan = replace(tight, mode="all", escalated=plan.requested_mode != "all")
    limit = hard_limit(window)
    if limit is None or plan.tokens_after <= limit:
        return plan
    if summary_reserve > _MIN_SUMMARY_TOKENS:
        smaller = max(_MIN_SUMMARY_TOKENS, summary_reserve - (plan.tokens_after - limit))
        plan = replace(
            plan, tokens_after=plan.tokens_after - summary_reserve + smaller, summary_tokens=smaller
        )
        summary_reserve = smaller
        if plan.tokens_after <= limit:
            return plan
    kept = dict(zip(plan.kept, plan.kept_messages, strict=True))
    over = plan.tokens_after - limit
    cuts: list[int] = []
    results = [i for i in plan.kept if i > newest and messages[i].role == "tool"]
    total = sum(len(messages[i].content) for i in results)
    if results and total:
        share = max(0, total - over * 4)
        for i in results:
            text = messages[i].content
            allowed = max(MIN_KEPT_CHARS + len(_tool_cut_marker(len(text))), len(text) * share // total)
            clipped = clip_middle(text, allowed, _tool_cut_marker)
            if len(clipped) < len(text):
                kept[i] = replace(messages[i], content=clipped)
                over -= costs.est[i] - estimate_message(kept[i])
                cuts.append(i)
    user = messages[newest]
    if over > 0:
        room = (costs.est[newest] - over) * 4
        clipped = clip_middle(user.content, max(0, room), _cut_marker)
        if len(clipped) >= len(user.content) or len(clipped) - len(_cut_marker(len(user.content))) < MIN_KEPT_CHARS:
            floor = min(costs.est[newest], estimate_text(user.content[:MIN_KEPT_CHARS] + _cut_marker(len(user.content))))
            others = sum(estimate_message(kept[i]) for i in plan.kept if i != newest)
            return replace(plan, needed_tokens=_window_needed(fixed + summary_reserve + others + floor))
        kept[newest] = replace(user, content=clipped)
        over -= costs.est[newest] - estimate_message(kept[newest])
        cuts.append(newest)
    cut_indices = tuple(sorted(cuts))
    return replace(
        plan,
        kept_messages=tuple(kept[i] for i in plan.kept),
        cut_index=cut_indices[0] if cut_indices else None,
        cut_indices=cut_indices,
        tokens_after=fixed + summary_reserve + sum(estimate_message(kept[i]) for i in plan.kept),
    )


def _build(
    messages: Sequence[Message],
    costs: _Costs,
    *,
    mode: CompactionMode,
    requested_mode: CompactionMode,
    cutoff: int,
    keep_from: Sequence[int],
    fixed: int,
    summary_reserve: int,
    limit: int | None,
    escalated: bool,
) -> CompactionPlan:
    keep_set = {i for i in keep_from if messages[i].kind != "memory_update"}
    kept = tuple(sorted(keep_set))
    evicted = tuple(i for i in range(len(messages)) if i not in keep_set)
    pinned = tuple(i for i in evicted if messages[i].kind == "summary")
    summarized = tuple(i for i in evicted if messages[i].kind not in ("summary", "memory_update"))
    kept_tokens = sum(costs.est[i] for i in kept)
    return CompactionPlan(
        mode=mode,
        requested_mode=requested_mode,
        cutoff=cutoff,
        evicted=evicted,
        summarized=summarized,
        pinned=pinned,
        kept=kept,
        kept_messages=tuple(messages[i] for i in kept),
        cut_index=None,
        messages_before=len(messages),
        tokens_before=fixed + costs.total,
        tokens_after=fixed + summary_reserve + kept_tokens,
        threshold=limit,
        escalated=escalated,
    )


def _newest_user(messages: Sequence[Message]) -> int | None:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "user" and messages[i].kind == "message":
            return i
    return None


def plan_all(
    messages: Sequence[Message],
    *,
    window: int | None = None,
    system_prompt_tokens: int = 0,
    tool_tokens: int = 0,
    summary_reserve: int = 0,
    requested_mode: CompactionMode = "all",
    _costs: _Costs | None = None,
) -> CompactionPlan:
    """``all`` mode: summarise everything before the newest user message (C5, S5)."""
    costs = _costs or _Costs(messages)
    n = len(messages)
    fixed = system_prompt_tokens + tool_tokens
    limit = threshold(window)
    newest = _newest_user(messages)
    if newest is None:
        keep_from: Sequence[int] = [n - 1] if _pending_tool_call(messages) else []
        cutoff = n - 1 if keep_from else n
    else:
        keep_from, cutoff = range(newest, n), newest
    plan = _build(
        messages,
        costs,
        mode="all",
        requested_mode=requested_mode,
        cutoff=cutoff,
        keep_from=keep_from,
        fixed=fixed,
        summary_reserve=summary_reserve,
        limit=limit,
        escalated=requested_mode != "all",
    )
    return plan


def plan_compaction(
    messages: Sequence[Message],
    settings: CompactionSettings,
    *,
    system_prompt_tokens: int,
    tool_tokens: int,
    mode: CompactionMode | None = None,
) -> CompactionPlan:
    """The plan a compaction applies; never raises (a failed sliding search escalates to ``all``; a
    window too small for the newest message shows as ``plan.refused``)."""
    fixed = system_prompt_tokens + tool_tokens
    reserve = summary_allowance(settings.summary_reserve, settings.context_window, fixed)
    if reserve != settings.summary_reserve:
        settings = replace(settings, summary_reserve=reserve)
    costs = _Costs(messages)
    plan = _choose(
        messages, settings, costs, system_prompt_tokens=system_prompt_tokens, tool_tokens=tool_tokens, mode=mode
    )
    return _fit_window(
        messages,
        costs,
        plan,
        newest=_newest_user(messages),
        fixed=fixed,
        summary_reserve=reserve,
        window=settings.context_window,
    )


def _choose(
    messages: Sequence[Message],
    settings: CompactionSettings,
    costs: _Costs,
    *,
    system_prompt_tokens: int,
    tool_tokens: int,
    mode: CompactionMode | None,
) -> CompactionPlan:
    requested: CompactionMode = mode or settings.mode
    window = settings.context_window
    common = {"system_prompt_tokens": system_prompt_tokens, "tool_tokens": tool_tokens}
    try:
        largest_cut = find_sliding_cutoff(messages, 1.0, None, _costs=costs)
    except PlanningError:
        largest_cut = None
    if requested == "sliding_window":
        try:
            cut = find_sliding_cutoff(
                messages,
                settings.sliding_percentage,
                window,
                summary_reserve=settings.summary_reserve,
                _costs=costs,
                **common,
            )
        except PlanningError:
            pass
        else:
            return _sliding_plan(messages, costs, cut, settings, requested, **common)
    all_plan = plan_all(
        messages,
        window=window,
        summary_reserve=settings.summary_reserve,
        requested_mode=requested,
        _costs=costs,
        **common,
    )
    if all_plan.fits or largest_cut is None:
        return all_plan
    largest = _sliding_plan(messages, costs, largest_cut, settings, requested, **common)
    if largest.fits or largest.tokens_after < all_plan.tokens_after:
        return largest
    return all_plan


def _sliding_plan(
    messages: Sequence[Message],
    costs: _Costs,
    cut: int,
    settings: CompactionSettings,
    requested: CompactionMode,
    *,
    system_prompt_tokens: int,
    tool_tokens: int,
    summary_reserve: int | None = None,
) -> CompactionPlan:
    return _build(
        messages,
        costs,
        mode="sliding_window",
        requested_mode=requested,
        cutoff=cut,
        keep_from=range(cut, len(messages)),
        fixed=system_prompt_tokens + tool_tokens,
        summary_reserve=settings.summary_reserve if summary_reserve is None else summary_reserve,
        limit=threshold(settings.context_window),
        escalated=requested != "sliding_window",
    )


def plan_emergency(
    messages: Sequence[Message],
    settings: CompactionSettings,
    *,
    system_prompt_tokens: int,
    tool_tokens: int,
    summary_tokens: int = 0,
) -> CompactionPlan:
    """Emergency eviction (COMPACTION-5.7, C3): sliding with p = 0.5 and no token goal; without a
    valid cutoff, keep the last user message and a trailing pending tool call. ``summary_tokens`` is
    the fixed emergency text's estimate, so ``tokens_after`` is what will really be sent."""
    costs = _Costs(messages)
    fixed = system_prompt_tokens + tool_tokens
    newest = _newest_user(messages)
    try:
        cut = find_sliding_cutoff(messages, EMERGENCY_PERCENTAGE, None, _costs=costs)
    except PlanningError:
        n = len(messages)
        keep = [i for i in (newest, n - 1 if _pending_tool_call(messages) else None) if i is not None]
        plan = _build(
            messages,
            costs,
            mode="all",
            requested_mode=settings.mode,
            cutoff=min(keep) if keep else n,
            keep_from=sorted(set(keep)),
            fixed=fixed,
            summary_reserve=summary_tokens,
            limit=threshold(settings.context_window),
            escalated=settings.mode != "all",
        )
    else:
        plan = _sliding_plan(
            messages,
            costs,
            cut,
            settings,
            settings.mode,
            summary_reserve=summary_tokens,
            system_prompt_tokens=system_prompt_tokens,
            tool_tokens=tool_tokens,
        )
    return _fit_window(
        messages,
        costs,
        plan,
        newest=newest,
        fixed=fixed,
        summary_reserve=summary_tokens,
        window=settings.context_window,
    )
