"""Stored times (T5): ISO-8601 UTC, milliseconds, ``Z``, one fixed width."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

from orchestrator.store.records import format_time, utc_now


def test_format_time_is_utc_milliseconds_with_a_z() -> None:
    assert format_time(datetime(2026, 1, 1, tzinfo=UTC)) == "2026-01-01T00:00:00.000Z"
    assert format_time(datetime(2026, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)) == "2026-12-31T23:59:59.999Z"
    assert format_time(datetime(2026, 3, 4, 5, 6, 7, 8_000, tzinfo=UTC)) == "2026-03-04T05:06:07.008Z"
    east = timezone(timedelta(hours=9))
    assert format_time(datetime(2026, 1, 1, 8, 30, tzinfo=east)) == "2025-12-31T23:30:00.000Z"


def test_utc_now_is_format_time_of_now() -> None:
    before = format_time(datetime.now(UTC))
    now = utc_now()
    after = format_time(datetime.now(UTC))
    assert before <= now <= after
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", now)
