from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from orchestrator.base.config import REFLECTION_TRIGGERS, Settings
from orchestrator.store import ReflectionState
from subagents.triggers import (
    POLICIES,
    LaunchDecision,
    Moment,
    after_compaction,
    after_failure,
    after_success,
    backoff_steps,
    decide_launch,
    idle_after,
)

STATE = ReflectionState("c", "a")


def decide(mode: str, count: int, state: ReflectionState, steps: int, **kwargs: Any) -> LaunchDecision:
    settings = Settings(reflection_trigger=mode, reflection_step_count=count)
    return decide_launch(settings, state, Moment(steps), **kwargs)


def test_every_declared_trigger_has_a_policy_and_nothing_else_does() -> None:
    assert list(POLICIES) == list(REFLECTION_TRIGGERS.names)


def test_step_count_fires_at_the_count() -> None:
    assert not decide("step-count", 3, STATE, 2).launch
    assert decide("step-count", 3, STATE, 3).launch


def test_compaction_event_stays_pending_until_consumed() -> None:
    assert not decide("compaction-event", 25, STATE, 10).launch
    armed = after_compaction(STATE)
    assert decide("compaction-event", 25, armed, 10).launch
    assert decide("compaction-event", 25, armed, 11).launch, "a declined launch keeps the flag"
    done = after_success(armed, through_seq=42)
    assert not decide("compaction-event", 25, done, 3).launch
    assert done.reflected_through_seq == 42


def test_off_and_nothing_to_reflect() -> None:
    assert not decide("off", 1, after_compaction(STATE), 50).launch
    assert not decide("step-count", 1, STATE, 0).launch
    assert decide("off", 1, STATE, 1, manual=True).launch


def test_failures_back_off_then_pause_until_compaction() -> None:
    failed = after_failure(STATE, unreflected_steps=25)
    assert not decide("step-count", 25, failed, 25 + 11).launch
    assert decide("step-count", 25, failed, 25 + 12).launch
    twice = after_failure(failed, unreflected_steps=40)
    assert backoff_steps(25, 2) == 24
    assert not decide("step-count", 25, twice, 40 + 23).launch
    thrice = after_failure(twice, unreflected_steps=70)
    assert thrice.paused and not decide("step-count", 25, thrice, 500).launch
    assert decide("step-count", 25, after_compaction(thrice), 500).launch


@given(st.integers(1, 200), st.integers(1, 6))
def test_backoff_doubles_and_has_a_floor(step_count: int, failures: int) -> None:
    wait = backoff_steps(step_count, failures)
    assert wait >= 5
    assert backoff_steps(step_count, failures + 1) == 2 * wait


def test_idle_fires_once_the_session_was_idle_long_enough() -> None:
    idle = Settings(reflection_trigger="idle", reflection_idle_seconds=30.0)
    assert idle_after(idle) == 30.0
    assert not decide_launch(idle, STATE, Moment(4)).launch, "a turn's end is no idle time"
    assert not decide_launch(idle, STATE, Moment(4, 29.5)).launch
    assert decide_launch(idle, STATE, Moment(4, 30.0)).launch
    assert not decide_launch(idle, STATE, Moment(0, 3600.0)).launch, "nothing to reflect on"
    assert not decide_launch(idle, after_failure(after_failure(after_failure(STATE, 1), 2), 3), Moment(9, 60.0)).launch
    assert idle_after(Settings(reflection_trigger="step-count")) is None
