"""Stored times: ``utc_now`` (which formats each second once) says what ``format_time`` of the
same moment says, across second boundaries too."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from orchestrator.store.records import format_time, utc_now


def test_utc_now_is_format_time_of_now_across_seconds() -> None:
    seen: set[str] = set()
    deadline = time.monotonic() + 1.2  # at least one second boundary
    while time.monotonic() < deadline:
        before = format_time(datetime.now(UTC))
        now = utc_now()
        after = format_time(datetime.now(UTC))
        assert before <= now <= after
        assert len(now) == len(before) and now.endswith("Z")
        seen.add(now[:19])
    assert len(seen) >= 2
