"""When reflection fires (TURN-5.3 and TURN-5.15; R5, S16, S17). Pure functions over
the per-conversation ``ReflectionState`` the store keeps, so the policy is tested without git.

* ``off``: never automatically. ``compaction-event``: a compaction of the conversation leaves a
  pending flag that stays until a reflection actually starts or finds nothing to do.
  ``step-count``: once the unreflected transcript holds ``step_count`` assistant steps.
* After a failed reflection the next automatic launch waits ``max(5, step_count // 2)`` further
  assistant steps, doubling per consecutive failure; after 3 consecutive failures automatic
  reflection pauses until the next compaction event or a manual ``reverie reflect``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from orchestrator.store import ReflectionState

__all__ = [
    "MAX_CONSECUTIVE_FAILURES",
    "LaunchDecision",
    "TriggerMode",
    "after_compaction",
    "after_failure",
    "after_success",
    "backoff_steps",
    "decide_launch",
]

TriggerMode = Literal["off", "compaction-event", "step-count"]
MAX_CONSECUTIVE_FAILURES = 3


@dataclass(frozen=True)
class LaunchDecision:
    """Whether to launch a reflection now, with the reason (shown by ``/status`` and the event log)."""

    launch: bool
    reason: str


def backoff_steps(step_count: int, consecutive_failures: int) -> int:
    if consecutive_failures <= 0:
        return 0
    return max(5, step_count // 2) * 2 ** (consecutive_failures - 1)


def decide_launch(
    mode: TriggerMode, step_count: int, state: ReflectionState, unreflected_steps: int, *, manual: bool = False
) -> LaunchDecision:
    if unreflected_steps <= 0:
        return LaunchDecision(False, "nothing to reflect on")
    if manual:
        return LaunchDecision(True, "manual")
    if mode == "off":
        return LaunchDecision(False, "reflection is off")
    if state.paused:
        return LaunchDecision(False, "paused after repeated failures")
    wait = backoff_steps(step_count, state.consecutive_failures)
    if wait and unreflected_steps - state.failed_at_step < wait:
        return LaunchDecision(False, f"backing off: {wait} steps after the last failure")
    if mode == "compaction-event":
        return LaunchDecision(state.compaction_pending, "compaction event" if state.compaction_pending else "waiting for compaction")
    if unreflected_steps >= step_count:
        return LaunchDecision(True, f"{unreflected_steps} steps since the last reflection")
    return LaunchDecision(False, f"{unreflected_steps} of {step_count} steps")


def after_compaction(state: ReflectionState) -> ReflectionState:
    """A compaction arms the trigger and lifts a failure pause (S17)."""
    return replace(state, compaction_pending=True, paused=False)


def after_success(state: ReflectionState, through_seq: int) -> ReflectionState:
    """S16: only a finished reflection consumes its transcript."""
    return replace(
        state,
        reflected_through_seq=max(state.reflected_through_seq, through_seq),
        compaction_pending=False,
        consecutive_failures=0,
        failed_at_step=0,
        paused=False,
    )


def after_failure(state: ReflectionState, unreflected_steps: int) -> ReflectionState:
    failures = state.consecutive_failures + 1
    return replace(
        state,
        consecutive_failures=failures,
        failed_at_step=unreflected_steps,
        paused=failures >= MAX_CONSECUTIVE_FAILURES,
    )
