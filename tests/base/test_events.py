"""Event payloads: what the store and the event log keep is exactly the dataclass's fields."""

from __future__ import annotations

from dataclasses import asdict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.base import events, subagent_events
from orchestrator.base.events import Event
from orchestrator.base.subagent_events import CompactionDone

KINDS = sorted(
    (
        cls
        for module in (events, subagent_events)
        for name in module.__all__
        if isinstance(cls := getattr(module, name), type) and issubclass(cls, Event)
    ),
    key=lambda cls: cls.__name__,
)


def test_every_kind_names_one_class() -> None:
    kinds = [cls.kind for cls in KINDS if cls is not Event]
    assert len(kinds) == len(set(kinds))
    assert {cls.__module__ for cls in KINDS} == {events.__name__, subagent_events.__name__}


@pytest.mark.parametrize("cls", KINDS, ids=lambda cls: cls.__name__)
@given(data=st.data())
def test_payload_is_asdict(cls: type[Event], data: st.DataObject) -> None:
    event = data.draw(st.builds(cls))
    payload = event.payload()
    assert payload == asdict(event)
    assert payload is not event.payload()


def test_a_container_field_is_copied_not_shared() -> None:
    done = CompactionDone("auto", 3, 100, 40, stats={"nested": [1, 2]})
    payload = done.payload()
    payload["stats"]["nested"].append(3)
    assert done.stats == {"nested": [1, 2]}
