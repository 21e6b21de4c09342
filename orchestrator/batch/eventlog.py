"""The JSONL event log of a batch run: ``RUN_DIR/events/<task-id>.jsonl``, one line per event.

A task's log is a copy of its store's event table (S8 shapes, ``docs/events.md``) plus
``task.start`` / ``task.end`` lines written by the runner, so subagent events that never pass
through the observer are logged too. Lines are ``{"seq", "at", "task", "kind", "agent_id",
"conversation_id", "payload"}``; ``seq`` orders the lines of one task.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.base.event_lines import event_detail

__all__ = [
    "EVENTS_DIR",
    "EventRecord",
    "append_records",
    "event_log_path",
    "follow_events",
    "format_record",
    "read_events",
]

EVENTS_DIR = "events"


@dataclass(frozen=True)
class EventRecord:
    """One line of a run's event log, with the task it came from."""

    seq: int
    at: str
    task: str
    kind: str
    payload: Mapping[str, Any]
    agent_id: str | None = None
    conversation_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "at": self.at,
            "task": self.task,
            "kind": self.kind,
            "agent_id": self.agent_id,
            "conversation_id": self.conversation_id,
            "payload": dict(self.payload),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> EventRecord:
        return cls(
            seq=int(raw["seq"]),
            at=str(raw["at"]),
            task=str(raw["task"]),
            kind=str(raw["kind"]),
            payload=dict(raw.get("payload") or {}),
            agent_id=raw.get("agent_id"),
            conversation_id=raw.get("conversation_id"),
        )


def event_log_path(run_dir: Path, task_id: str) -> Path:
    return run_dir / EVENTS_DIR / f"{task_id}.jsonl"


_ENCODE = json.JSONEncoder(ensure_ascii=False, default=str).encode
"""One encoder for every record (``store.jobs.dumps`` says why)."""


def append_records(path: Path, records: Sequence[EventRecord]) -> None:
    """Append records (blocking); the directory is created on first use."""
    if not records:
        return
    text = "".join(_ENCODE(record.to_json()) + "\n" for record in records)
    try:
        handle = path.open("a", encoding="utf-8")
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = path.open("a", encoding="utf-8")
    with handle:
        handle.write(text)


def _parse_lines(text: str) -> Iterator[EventRecord]:
    for line in text.splitlines():
        try:
            yield EventRecord.from_json(json.loads(line))
        except (ValueError, KeyError, TypeError):
            continue


def read_events(run_dir: Path, *, task: str | None = None, kinds: Sequence[str] = ()) -> list[EventRecord]:
    """Every logged event of a run (blocking), ordered by time then task and sequence."""
    folder = run_dir / EVENTS_DIR
    if not folder.is_dir():
        raise FileNotFoundError(f"{run_dir}: no event log here (expected {folder})")
    found: list[EventRecord] = []
    paths = sorted(folder.glob("*.jsonl")) if task is None else [event_log_path(run_dir, task)]
    for path in paths:
        if not path.is_file():
            continue
        found.extend(r for r in _parse_lines(path.read_text(encoding="utf-8")) if not kinds or r.kind in kinds)
    found.sort(key=lambda r: (r.at, r.task, r.seq))
    return found


def follow_events(
    run_dir: Path,
    *,
    task: str | None = None,
    kinds: Sequence[str] = (),
    poll: float = 0.5,
    stop: Callable[[], bool] = lambda: False,
) -> Iterator[EventRecord]:
    """Yield logged events as they are written, like ``tail -f`` over every task's log (blocking;
    for the command line). Ends after a quiet poll that began with ``stop()`` true: asked before
    reading, so whatever was written before the run said it ended has been read."""
    folder = run_dir / EVENTS_DIR
    offsets: dict[Path, int] = {}
    while True:
        ended = stop()
        fresh: list[EventRecord] = []
        for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
            if task is not None and path.stem != task:
                continue
            with path.open("rb") as handle:
                start = offsets.get(path, 0)
                if os.fstat(handle.fileno()).st_size < start:
                    start = 0  # written again from the start: a Ray task's retry (``batch.ray_exec``)
                handle.seek(start)
                chunk = handle.read()
            complete = chunk[: chunk.rfind(b"\n") + 1]
            offsets[path] = start + len(complete)
            fresh.extend(
                r for r in _parse_lines(complete.decode("utf-8", "replace")) if not kinds or r.kind in kinds
            )
        fresh.sort(key=lambda r: (r.at, r.task, r.seq))
        yield from fresh
        if not fresh:
            if ended:
                return
            time.sleep(poll)


def format_record(record: EventRecord) -> str:
    """One human line: time, task, kind and the payload's most useful fields (``base.event_lines``)."""
    detail = event_detail(record.kind, record.payload)
    return f"{record.at}  {record.task}  {record.kind}  {detail}"
