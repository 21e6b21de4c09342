"""The limits vocabulary (B1, B2): caps per scope from the settings, with the subagents' derived defaults."""

from __future__ import annotations

from orchestrator.base.config import load_settings
from orchestrator.base.limits import LimitReached, Limits, limits_for


def test_a_scope_takes_its_caps_from_the_settings_and_a_subagent_has_defaults(tmp_path) -> None:
    settings = load_settings(
        cli={"limit_session_cost": "0.5", "context_window": 10_000},
        environ={"REVERIE_LIMIT_REFLECTION_CALLS": "7"},
        path=tmp_path / "none.toml",
    )
    assert limits_for(settings, "session") == Limits("session", tokens=None, cost=0.5)
    assert limits_for(settings, "turn") == Limits("turn")
    reflection = limits_for(settings, "reflection")
    assert (reflection.tokens, reflection.calls, reflection.seconds) == (320_000, 7, 600.0)
    assert limits_for(settings, "resolver").tokens == 320_000


def test_a_reached_limit_is_one_line_naming_it_and_its_setting() -> None:
    stop = LimitReached("session.cost", 0.01, 0.0098, 0.003)
    assert str(stop) == (
        "stopped at the session cost limit (0.01 USD): spent 0.009800 USD; raise [limits] session_cost to go on"
    )
    hit = stop.event("abc")
    assert hit.kind == "limit.reached"
    assert hit.payload() == {
        "limit": "session.cost", "scope": "session", "measure": "cost", "cap": 0.01, "spent": 0.0098,
        "needed": 0.003, "subject": "abc",
    }  # fmt: skip
