"""A report never silently describes results a resume or retry has changed: it is marked stale
when they start changing and rewritten when they are done."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from orchestrator import report, run_suite
from orchestrator.batch.run import REPORT_FILE, mark_stale
from tests.batch.helpers import TINY, write_suite

pytestmark = pytest.mark.anyio


async def test_a_retry_rewrites_the_report_and_an_interrupted_one_leaves_it_marked(tmp_path: Path) -> None:
    suite, out = write_suite(tmp_path / "s.jsonl", TINY), tmp_path / "run"
    first = await run_suite(suite, out, processes=1)
    assert first.summary["failed"] == 1
    page = await report(out)
    before = page.read_text(encoding="utf-8")
    assert 'id="reverie-stale"' not in before

    await run_suite(None, out, retry_failed=True)
    after = page.read_text(encoding="utf-8")
    assert after != before and 'id="reverie-stale"' not in after, "rewritten once the retry finished"

    with anyio.CancelScope() as scope:

        async def stop(task_id: str, kind: str, payload: object) -> None:
            if kind == "task.start":
                scope.cancel()

        await run_suite(None, out, retry_failed=True, progress=stop)
    stale = page.read_text(encoding="utf-8")
    assert 'id="reverie-stale"' in stale and "was retried on" in stale and f"reverie report {out}" in stale


def test_marking_twice_keeps_one_banner_and_no_report_is_fine(tmp_path: Path) -> None:
    assert not mark_stale(tmp_path, "resumed")
    (tmp_path / REPORT_FILE).write_text("<html><body><p>x</p></body></html>", encoding="utf-8")
    assert mark_stale(tmp_path, "resumed") and mark_stale(tmp_path, "resumed")
    assert (tmp_path / REPORT_FILE).read_text(encoding="utf-8").count('id="reverie-stale"') == 1
