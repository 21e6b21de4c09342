"""When reflection fires (TURN-5.3 and TURN-5.15; R5, S16, S17). Pure functions over
the per-conversation ``ReflectionState`` the store keeps, so the policy is tested without git.

The trigger names are declared once, with what each takes, in ``base/config.py``
(``REFLECTION_TRIGGERS``), where every reader of the setting parses them; how each one decides is
here, one ``Policy`` per name in ``POLICIES`` (a test keeps the two in step). Adding a trigger is its
declaration there and its policy here.

* ``off``: never automatically. ``compaction-event``: a compaction of the conversation leaves a
  pending flag that stays until a reflection actually starts or finds nothing to do.
  ``step-count``: once the unreflected transcript holds ``step_count`` assistant steps.
  ``idle``: once the session has been idle ``idle_seconds`` with something unreflected: no input
  for that long in a live session, or that much time between two recorded sessions of a replay.
* A policy may also ask to be consulted once the session has been idle a while (``idle_after``):
  the coordinator then waits that long between turns, or counts a replayed history's gap between
  recorded sessions as that wait (docs/suite-format.md).
* After a failed reflection the next automatic launch waits ``max(5, step_count // 2)`` further
  assistant steps, doubling per consecutive failure; after 3 consecutive failures automatic
  reflection pauses until the next compaction event or a manual ``reverie reflect``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from orchestrator.base.config import Settings
from orchestrator.store import ReflectionState

__all__ = [
    "MAX_CONSECUTIVE_FAILURES",
    "POLICIES",
    "LaunchDecision",
    "Moment",
    "Policy",
    "after_compaction",
    "after_failure",
    "after_success",
    "backoff_steps",
    "decide_launch",
    "idle_after",
]

MAX_CONSECUTIVE_FAILURES = 3


@dataclass(frozen=True)
class LaunchDecision:
    """Whether to launch a reflection now, with the reason (shown by ``/status`` and the event log)."""

    launch: bool
    reason: str


@dataclass(frozen=True)
class Moment:
    """What a trigger is asked about: assistant steps not yet reflected on, and how long the session
    has been idle (0 at a turn's end; the wait or the recorded gap after an idle wait)."""

    unreflected_steps: int
    idle_seconds: float = 0.0


def _never(_settings: Settings) -> float | None:
    return None


@dataclass(frozen=True)
class Policy:
    """How one trigger decides, past the checks every trigger shares (nothing to reflect on, a
    failure pause, the backoff); ``idle_after`` is how long an idle session must wait before the
    policy is asked again (None: only at turn ends)."""

    decide: Callable[[Settings, ReflectionState, Moment], LaunchDecision]
    idle_after: Callable[[Settings], float | None] = _never


def _off(_settings: Settings, _state: ReflectionState, _moment: Moment) -> LaunchDecision:
    return LaunchDecision(False, "reflection is off")


def _compaction_event(_settings: Settings, state: ReflectionState, _moment: Moment) -> LaunchDecision:
    return LaunchDecision(state.compaction_pending, "compaction event" if state.compaction_pending else "waiting for compaction")


def _step_count(settings: Settings, _state: ReflectionState, moment: Moment) -> LaunchDecision:
    steps, wanted = moment.unreflected_steps, settings.reflection_step_count
    if steps >= wanted:
        return LaunchDecision(True, f"{steps} steps since the last reflection")
    return LaunchDecision(False, f"{steps} of {wanted} steps")


def _idle(settings: Settings, _state: ReflectionState, moment: Moment) -> LaunchDecision:
    wanted = settings.reflection_idle_seconds
    if moment.idle_seconds >= wanted:
        return LaunchDecision(True, f"idle for {moment.idle_seconds:g} s")
    return LaunchDecision(False, f"waiting for {wanted:g} s without input")


def _idle_seconds(settings: Settings) -> float:
    return settings.reflection_idle_seconds


POLICIES: Mapping[str, Policy] = {
    "off": Policy(_off),
    "compaction-event": Policy(_compaction_event),
    "step-count": Policy(_step_count),
    "idle": Policy(_idle, idle_after=_idle_seconds),
}
"""Each trigger of ``REFLECTION_TRIGGERS`` (``base/config.py``) and how it decides."""


def backoff_steps(step_count: int, consecutive_failures: int) -> int:
    if consecutive_failures <= 0:
        return 0
    return max(5, step_count // 2) * 2 ** (consecutive_failures - 1)


def idle_after(settings: Settings) -> float | None:
    """How long the session must be idle before the configured trigger is asked again, or None."""
    return POLICIES[settings.reflection_trigger].idle_after(settings)


def decide_launch(
    settings: Settings, state: ReflectionState, moment: Moment, *, manual: bool = False
) -> LaunchDecision:
    if moment.unreflected_steps <= 0:
        return LaunchDecision(False, "nothing to reflect on")
    if manual:
        return LaunchDecision(True, "manual")
    if settings.reflection_trigger == "off":
        return _off(settings, state, moment)
    if state.paused:
        return LaunchDecision(False, "paused after repeated failures")
    wait = backoff_steps(settings.reflection_step_count, state.consecutive_failures)
    if wait and moment.unreflected_steps - state.failed_at_step < wait:
        return LaunchDecision(False, f"backing off: {wait} steps after the last failure")
    return POLICIES[settings.reflection_trigger].decide(settings, state, moment)


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
