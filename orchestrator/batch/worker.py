"""The child side of the multi-process local executor: a process forked from the driver before its
event loop started, or ``python -m orchestrator.batch.worker`` (``orchestrator.batch.spawn``).

A batch task costs tens of milliseconds of Python under the GIL, so one process uses one core at
most; ``executors.ProcessExecutor`` spreads tasks over child processes running this module. The
driver stays the owner of the run (it alone appends ``results.jsonl``): a worker only runs the
tasks it is handed with the same ``run_task`` as the in-process executor and writes back what
happened, so a task's result is the same whichever process ran it.

The protocol is JSON lines. The driver writes ``{"options": ..., "progress": bool, "processes": n}``
first (``processes``: how many share the cores, which sizes the worker's SQLite lanes), then
one ``{"index": i, "task": ...}`` per task it hands over (never more than the worker's slots at
once), and ends its input when it has no more. The worker answers ``{"ready": pid}`` once it can
run a task (imports and libgit2 loaded, so the driver does not wait behind them), then per task the
progress events (``{"event": [task_id, kind, payload]}``, only when the driver shows progress) and
one ``{"index": i, "result": ...}``. The protocol runs over stdin and stdout (spawned) or a socket
pair (forked); either way whatever else writes to fd 1 is sent to stderr, which is the driver's.
It ignores SIGINT (the driver decides when it stops) and never reads the terminal.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import socket
import sys
from collections.abc import Mapping
from functools import partial
from typing import IO, Any, cast

import anyio

from orchestrator.base import blocking
from orchestrator.base.processes import hide_secrets_from_proc
from orchestrator.batch.runner import RunOptions, batch_process, load_backends, run_task
from orchestrator.batch.suite import task_from_json

__all__ = ["READY", "decode", "encode", "main", "serve", "serve_socket"]

READY = "ready"


_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
"""One encoder for every line (``store.jobs.dumps`` says why)."""


def encode(message: Mapping[str, Any]) -> bytes:
    """One protocol line."""
    return (_ENCODE(message) + "\n").encode("utf-8")


def decode(line: bytes) -> dict[str, Any]:
    """One protocol line back; ``ValueError`` for anything that is not a JSON object."""
    raw = json.loads(line)
    if not isinstance(raw, dict):
        raise ValueError(f"not a protocol message: {line[:80]!r}")
    return raw


class _Outbox:
    """Lines for the driver, written by one task in a worker thread, in batches: a blocking write
    to a full pipe must not stop the event loop, and one thread hop per batch keeps it cheap."""

    def __init__(self, sink: IO[bytes]) -> None:
        self._sink = sink
        self._pending: list[bytes] = []
        self._wake = anyio.Event()
        self._closed = False

    def put(self, message: Mapping[str, Any]) -> None:
        self._pending.append(encode(message))
        self._wake.set()

    def close(self) -> None:
        self._closed = True
        self._wake.set()

    def _write(self, data: bytes) -> None:
        self._sink.write(data)
        self._sink.flush()

    async def pump(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            lines, self._pending = self._pending, []
            if lines:
                with anyio.CancelScope(shield=True):
                    await blocking.run_sync("files", partial(self._write, b"".join(lines)))
            if self._closed and not self._pending:
                return


async def serve(source: IO[bytes], sink: IO[bytes]) -> None:
    """Run tasks read from ``source`` until it ends, answering on ``sink``. An input that ends before
    the header is a driver that needed no worker after all (a forked one it did not use)."""
    await blocking.run_sync("files", load_backends)
    gc.freeze()  # as the driver does before its loop (cli/aio.py): the imports are never collected
    reader = anyio.wrap_file(source)
    first = await reader.readline()
    if not first:
        return
    header = decode(first)
    options = RunOptions.from_json(header["options"])
    outbox = _Outbox(sink)

    async def progress(task_id: str, kind: str, payload: Mapping[str, Any]) -> None:
        outbox.put({"event": [task_id, kind, dict(payload)]})

    async def one(index: int, raw: Mapping[str, Any]) -> None:
        task = task_from_json(raw)
        with blocking.ranked(index):
            result = await run_task(task, options, progress=progress if header.get("progress") else None)
        outbox.put({"index": index, "result": result.to_json()})

    with batch_process(int(header.get("processes") or 1)):  # this worker process's own entry
        async with anyio.create_task_group() as pump_group:
            pump_group.start_soon(outbox.pump)
            outbox.put({READY: os.getpid()})
            async with anyio.create_task_group() as tasks:
                while line := await reader.readline():
                    message = decode(line)
                    tasks.start_soon(one, int(message["index"]), message["task"])
            outbox.close()


def main() -> None:
    """A spawned worker: the protocol on stdin and stdout (see ``orchestrator.batch.spawn``)."""
    hide_secrets_from_proc()
    protocol = os.fdopen(os.dup(1), "wb", buffering=0)
    source = os.fdopen(os.dup(0), "rb")
    _serve_process(source, protocol)


def serve_socket(sock: socket.socket) -> None:
    """A forked worker: the protocol on its end of the socket pair (see ``orchestrator.batch.spawn``)."""
    sock.setblocking(True)
    _serve_process(sock.makefile("rb"), cast(IO[bytes], sock.makefile("wb", buffering=0)))


def _serve_process(source: IO[bytes], sink: IO[bytes]) -> None:
    """Keep fd 1 free of anything but stderr's text, never read the terminal, and serve on the
    backend the driver runs."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    backend = os.environ.get("REVERIE_BACKEND", "trio")
    anyio.run(serve, source, sink, backend=backend if backend in {"trio", "asyncio"} else "trio")


if __name__ == "__main__":
    main()
