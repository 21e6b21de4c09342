"""The local executors (in this process, or spread over worker processes), and the choice between
them and Ray's for a run.

All implement ``orchestrator.batch.protocol.Executor`` (the contract lives there, so neither
implementation imports the other).
"""

from __future__ import annotations

import contextlib
import heapq
import importlib
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import anyio
import sniffio
from anyio.abc import ByteReceiveStream

from orchestrator.base import blocking
from orchestrator.base.errors import UsageError
from orchestrator.batch.protocol import Executor, ResultSink
from orchestrator.batch.ray_exec import RayExecutor
from orchestrator.batch.results import TaskResult
from orchestrator.batch.runner import ProgressSink, RunOptions, load_backends, run_task
from orchestrator.batch.spawn import ForkedLink, WorkerLink, prefork, spawn
from orchestrator.batch.suite import Task, task_to_json
from orchestrator.batch.worker import READY, decode, encode

__all__ = ["BORROWED_SLOTS", "TASKS_PER_PROCESS", "LocalExecutor", "ProcessExecutor", "auto_processes", "make_executor"]

TASKS_PER_PROCESS = 16
"""A worker's start (~0.4 s of CPU: imports, libgit2) costs about what 14 tasks of three turns do,
so ``auto`` gives a process no fewer tasks in flight than this (bench/scale.py: 16 tasks on two
processes were slower than on one)."""
BORROWED_SLOTS = 8
"""While a child starts, the driver runs up to this many of its slots too: about half the tasks the
start costs, which evens out when the driver and the child finish (64 at once: 40 and 24)."""
_EXIT_GRACE = 10.0


class LocalExecutor:
    """Tasks as children of one task group in this process, at most ``concurrency`` at a time, in
    suite order. Cancelling the run cancels the running tasks (their turns end shielded)."""

    name = "local"

    def __init__(self, concurrency: int = 1) -> None:
        if concurrency < 1:
            raise UsageError(f"concurrency {concurrency}: must be at least 1")
        self.concurrency = concurrency

    async def run(
        self,
        tasks: Sequence[Task],
        options: RunOptions,
        *,
        on_result: ResultSink,
        progress: ProgressSink | None = None,
    ) -> None:
        # Slots are taken here, in suite order, before each task starts: a limiter acquired inside
        # the tasks would let the event loop's scheduling order pick who starts first.
        slots = anyio.Semaphore(self.concurrency)

        async def one(index: int, task: Task) -> None:
            try:
                with blocking.ranked(index):
                    result = await run_task(task, options, progress=progress)
                with anyio.CancelScope(shield=True):
                    await on_result(result)
            finally:
                slots.release()

        async with anyio.create_task_group() as tg:
            for index, task in enumerate(tasks):
                await slots.acquire()
                tg.start_soon(one, index, task, name=f"batch task {task.id}")


def auto_processes(concurrency: int, tasks: int) -> int:
    """``--processes auto``: one process per core, but only as many as keep about
    ``TASKS_PER_PROCESS`` tasks in flight in each (a child's start-up and the pipe are not worth it
    for fewer), and never more than the tasks."""
    busy = min(concurrency, tasks)
    return max(1, min(os.cpu_count() or 1, busy // TASKS_PER_PROCESS))


def _shares(concurrency: int, processes: int) -> list[int]:
    """Concurrency split as evenly as it goes; the driver (first) gets the larger part."""
    base, extra = divmod(concurrency, processes)
    return [base + (1 if i < extra else 0) for i in range(processes)]


def _exit_text(code: int | None) -> str:
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class _Queue:
    """The tasks not yet handed to anyone, lowest index (suite order) first. A task handed to a
    child that had died already is that child's: it ends as an ``error`` result like the rest it held
    (no take-back, so ``drained`` is final and nothing is handed out twice)."""

    def __init__(self, count: int) -> None:
        self._heap = list(range(count))
        self.drained = anyio.Event()
        if not count:
            self.drained.set()

    def take(self) -> int | None:
        if not self._heap:
            return None
        index = heapq.heappop(self._heap)
        if not self._heap:
            self.drained.set()
        return index


class _Lines:
    """Lines from a byte stream (a child's stdout); ``None`` at its end."""

    def __init__(self, stream: ByteReceiveStream) -> None:
        self._stream = stream
        self._ready: list[bytes] = []
        self._partial: list[bytes] = []

    async def next(self) -> bytes | None:
        while not self._ready:
            try:
                chunk = await self._stream.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                return None
            if b"\n" not in chunk:
                self._partial.append(chunk)
                continue
            *complete, rest = b"".join([*self._partial, chunk]).split(b"\n")
            self._partial = [rest] if rest else []
            self._ready = complete[::-1]
        return self._ready.pop()


class ProcessExecutor:
    """The local executor over several processes: this one (the driver) runs its share of the
    concurrency in-process from the first moment, exactly as ``LocalExecutor``, beside ``processes - 1``
    worker children. Those ``prefork`` forked before the loop can work at once; any other is
    spawned (``orchestrator.batch.spawn``), and while it starts the driver runs a few of its slots
    too (``BORROWED_SLOTS``). Each child pulls the next task in
    suite order whenever one of its slots is free, so early tasks still finish first and a slow
    child start only means the driver takes more of the suite. The driver alone awaits
    ``on_result`` (it appends ``results.jsonl``); each task's files are written by whichever
    process runs it. A child that dies turns the tasks it held into ``error`` results; cancelling
    the run kills every child (its process group) before ``run`` returns.

    ``processes=None`` is ``auto_processes``; one process is ``LocalExecutor``'s behaviour."""

    name = "local"

    def __init__(self, concurrency: int = 1, processes: int | None = None) -> None:
        if concurrency < 1:
            raise UsageError(f"concurrency {concurrency}: must be at least 1")
        if processes is not None and processes < 1:
            raise UsageError(f"--processes {processes}: must be auto or at least 1")
        if processes is not None and processes > concurrency:
            raise UsageError(
                f"--processes {processes} needs --concurrency {processes} or more (each process runs at least one task at a time)"
            )
        self.concurrency = concurrency
        self.processes = processes
        self.pids: list[int] = []
        """The children started by the latest ``run`` (for tests and diagnostics)."""
        self.forked_pids: list[int] = []
        """Those of them that were forked rather than spawned."""
        self._forked: list[ForkedLink] = []

    def plan(self, tasks: int) -> int:
        """How many processes a run of ``tasks`` tasks uses (the driver included)."""
        wanted = auto_processes(self.concurrency, tasks) if self.processes is None else self.processes
        return max(1, min(wanted, tasks))

    async def run(
        self,
        tasks: Sequence[Task],
        options: RunOptions,
        *,
        on_result: ResultSink,
        progress: ProgressSink | None = None,
    ) -> None:
        count = self.plan(len(tasks))
        self.pids = []
        self.forked_pids = []
        if count == 1:
            await LocalExecutor(self.concurrency).run(tasks, options, on_result=on_result, progress=progress)
            return
        shares = _shares(self.concurrency, count)
        queue = _Queue(len(tasks))
        options = replace(options, out_dir=options.out_dir.resolve())

        async def run_here(index: int) -> None:
            with blocking.ranked(index):
                result = await run_task(tasks[index], options, progress=progress)
            with anyio.CancelScope(shield=True):
                await on_result(result)

        async def local_slot() -> None:
            while (index := queue.take()) is not None:
                await run_here(index)

        async def borrowed_slot(child: _Child) -> None:
            while not child.ready.is_set() and (index := queue.take()) is not None:
                await run_here(index)

        forked, self._forked = self._forked[: count - 1], self._forked[count - 1 :]
        try:
            env = {**os.environ, "REVERIE_BACKEND": sniffio.current_async_library()}
            async with anyio.create_task_group() as tg:
                for _ in range(shares[0]):
                    tg.start_soon(local_slot, name="batch driver slot")
                for share in shares[1:]:
                    link = forked.pop(0) if forked else None
                    if link is not None:
                        self.forked_pids.append(link.pid)
                    child = _Child(share, count, tasks, queue, options, env, on_result, progress, self.pids)
                    tg.start_soon(child.run, link, name="batch worker process")
                    if link is None:
                        for _ in range(min(share, BORROWED_SLOTS)):
                            tg.start_soon(borrowed_slot, child, name="batch driver slot, borrowed")
        finally:
            for unused in forked:
                with anyio.CancelScope(shield=True):
                    await unused.aclose()

    def prefork(self, tasks: int, *, runs: int = 1) -> None:
        """Fork the workers ``runs`` runs of up to ``tasks`` tasks will use (a sweep's settings run
        one after another), now: call it before the event loop (and any thread) starts, e.g. right
        after parsing the command line. Where forking is not possible (``spawn.can_fork``) nothing
        happens and ``run`` spawns its workers. Each ``run`` takes the ones it needs and stops those
        it leaves; ``release`` stops what no run took."""
        self.release()
        if self.plan(tasks) > 1:
            load_backends()
            _load_event_loop()
            self._forked = prefork((self.plan(tasks) - 1) * max(1, runs))

    def release(self) -> None:
        """Stop forked workers no ``run`` used (for a command that ends before or without one).
        Blocking (it reaps them): call it where no event loop runs."""
        unused, self._forked = self._forked, []
        for link in unused:
            link.release()


def _load_event_loop() -> None:
    """Import the event loop the run will use (``REVERIE_BACKEND``, trio by default) before the
    workers are forked: the command imports it anyway, once its loop starts, and each forked worker
    otherwise imported it again on its own (trio and anyio's backend for it: ~90 ms of CPU per
    worker). Not in a run's ``elapsed`` (a worker imported it while the driver was still starting),
    but in its CPU, on cores a larger run shares."""
    backend = os.environ.get("REVERIE_BACKEND", "trio")
    if backend in ("trio", "asyncio"):
        # anyio loads its backend module by this name when the loop starts (anyio.run)
        importlib.import_module(f"anyio._backends._{backend}")


class _Child:
    """One worker process, from its start to its exit, as its driver sees it."""

    def __init__(
        self,
        slots: int,
        processes: int,
        tasks: Sequence[Task],
        queue: _Queue,
        options: RunOptions,
        env: dict[str, str],
        on_result: ResultSink,
        progress: ProgressSink | None,
        pids: list[int],
    ) -> None:
        self.slots = slots
        self.processes = processes
        self.tasks = tasks
        self.queue = queue
        self.options = options
        self.env = env
        self.on_result = on_result
        self.progress = progress
        self.pids = pids
        self.held: dict[int, Task] = {}
        self.open = True
        self.ready = anyio.Event()
        """Set once the child can run tasks: the driver stops borrowing its slots."""
        self._writing = anyio.Lock()

    async def run(self, link: WorkerLink | None) -> None:
        if link is None:
            link = await spawn(self.env)
        self.pids.append(link.pid)
        try:
            await self._talk(link)
        finally:
            with anyio.CancelScope(shield=True):
                await link.aclose()

    async def _send(self, link: WorkerLink, message: dict[str, Any]) -> bool:
        """Under ``_writing``."""
        try:
            await link.send(encode(message))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            return False
        return True

    async def _close_input(self, link: WorkerLink) -> None:
        """Under ``_writing`` (closing the input mid-write would lose that task)."""
        if self.open:
            self.open = False
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                await link.close_input()

    async def _feed(self, link: WorkerLink) -> None:
        """Hand over tasks while a slot is free; no work left closes the child's input (it then
        finishes what it holds and exits). Taking a task and sending it is one step under the lock,
        so the input is never closed between the two."""
        async with self._writing:
            while self.open and len(self.held) < self.slots:
                index = self.queue.take()
                if index is None:
                    await self._close_input(link)
                    return
                self.held[index] = self.tasks[index]
                if not await self._send(link, {"index": index, "task": task_to_json(self.tasks[index])}):
                    self.open = False
                    return

    async def _talk(self, link: WorkerLink) -> None:
        header = {"options": self.options.to_json(), "progress": self.progress is not None, "processes": self.processes}
        async with self._writing:
            if not await self._send(link, header):
                self.open = False
        lines = _Lines(await link.output())
        async with anyio.create_task_group() as tg:

            async def close_when_drained() -> None:
                await self.queue.drained.wait()
                async with self._writing:
                    await self._close_input(link)

            tg.start_soon(close_when_drained)
            while (line := await lines.next()) is not None:
                try:
                    message = decode(line)
                    await self._take(link, message)
                except (ValueError, KeyError, TypeError) as exc:
                    print(f"reverie: batch worker {link.pid}: bad message ({exc}); stopping it", file=sys.stderr)
                    link.kill()
                    break
            self.open = False
            tg.cancel_scope.cancel()
        with anyio.move_on_after(_EXIT_GRACE):
            await link.wait()
        if link.returncode is None:
            link.kill()
            await link.wait()
        how = _exit_text(link.returncode)
        for index in sorted(self.held):
            task = self.held.pop(index)
            result = TaskResult(
                id=task.id, status="error", checks_passed=0, checks_total=len(task.checks),
                error=f"batch worker process {link.pid} {how} while running this task", worker_pid=link.pid,
            )
            with anyio.CancelScope(shield=True):
                await self.on_result(result)
            if self.progress is not None:
                await self.progress(task.id, "task.end", {"status": "error", "checks_passed": 0, "error": result.error})

    async def _take(self, link: WorkerLink, message: dict[str, Any]) -> None:
        if "event" in message:
            task_id, kind, payload = message["event"]
            if self.progress is not None:
                await self.progress(str(task_id), str(kind), payload)
        elif "result" in message:
            index = int(message["index"])
            if index not in self.held:
                raise ValueError(f"a result for task #{index}, which it was not given")
            result = TaskResult.from_json(message["result"])
            del self.held[index]
            with anyio.CancelScope(shield=True):
                await self.on_result(result)
            await self._feed(link)
        elif READY in message:
            self.ready.set()
            await self._feed(link)
        else:
            raise ValueError(f"unknown message {sorted(message)}")


def make_executor(
    kind: str, concurrency: int, *, ray_address: str | None = None, processes: int | None = 1
) -> Executor:
    """``local`` or ``ray``; a bad name is a ``UsageError`` for the command line to report.
    ``processes`` (local only): ``None`` is auto, 1 keeps every task in this process."""
    if kind == "local":
        if ray_address:
            raise UsageError("--ray-address needs --executor ray")
        if processes == 1:
            return LocalExecutor(concurrency)
        return ProcessExecutor(concurrency, processes)
    if kind == "ray":
        if processes is not None and processes != 1:
            raise UsageError("--processes is for the local executor (Ray places its own workers)")
        return RayExecutor(concurrency, address=ray_address)
    raise UsageError(f"executor {kind!r}: use local or ray")
