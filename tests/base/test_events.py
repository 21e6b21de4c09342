"""Event payloads: what the store and the event log keep is exactly the dataclass's fields."""

from __future__ import annotations

from dataclasses import asdict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.base import events
from orchestrator.base.events import CompactionDone, Event

KINDS = sorted(
    (cls for name in events.__all__ if isinstance(cls := getattr(events, name), type) and issubclass(cls, Event)),
    key=lambda cls: cls.__name__,
)


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
