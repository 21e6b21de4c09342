"""``reverie run`` and ``reverie events`` with wrong paths or names: one line, or a hint, never silence."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_user_errors import one_line_error, reverie


def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "events").mkdir(parents=True)
    record = {"seq": 1, "at": "2026-01-01T00:00:00.000Z", "task": "t1", "kind": "turn.start",
              "agent_id": "t1", "conversation_id": "c", "payload": {"turn_id": "x"}}
    (run / "events" / "t1.jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")
    return run


def test_a_directory_given_as_the_suite_is_one_line(tmp_path: Path) -> None:
    one_line_error(reverie(tmp_path, "run", str(tmp_path)), "is a directory", "nothing was run")


def test_events_name_the_missing_run_task_or_kind(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    one_line_error(reverie(tmp_path, "events", str(tmp_path / "nope"), "--follow"), "no such run directory")
    one_line_error(reverie(tmp_path, "events", str(run), "--task", "t2"), "no events of task 't2' (tasks: t1)")
    kinds = reverie(tmp_path, "events", str(run), "--kind", "turn.ends")
    assert kinds.returncode == 0 and kinds.stdout == ""
    assert "no events of kind turn.ends (kinds in this log: turn.start)" in kinds.stderr
