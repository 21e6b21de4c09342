"""What an executor is: the contract between the batch driver and whatever schedules its tasks.

It lives apart from both implementations (``executors.LocalExecutor`` in this process,
``ray_exec.RayExecutor`` on a Ray cluster) so that each imports the contract and neither imports the
other; ``executors.make_executor`` is the one place that chooses between them.

Executors only schedule; ``run_task`` does the work, so every executor yields results of one shape.
``on_result`` is awaited once per finished task, from the driver, as soon as it finishes.

An executor whose start is costly and worth keeping across runs (a Ray connection, or a private
Ray) also offers ``hold()``: a sweep holds it around all of its settings, so one driver and one
cluster serve every setting, as one local process does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol, runtime_checkable

from orchestrator.batch.results import TaskResult
from orchestrator.batch.runner import ProgressSink, RunOptions
from orchestrator.batch.suite import Task

__all__ = ["Executor", "HeldAcrossRuns", "ResultSink"]

ResultSink = Callable[[TaskResult], Awaitable[None]]


class Executor(Protocol):
    """Runs every task of ``tasks`` under ``options`` and awaits ``on_result`` for each as it ends.

    Returns when all have reported; cancelling ``run`` cancels the tasks still running (their turns
    end shielded) and no ``on_result`` is awaited for them."""

    name: str
    concurrency: int

    async def run(
        self,
        tasks: Sequence[Task],
        options: RunOptions,
        *,
        on_result: ResultSink,
        progress: ProgressSink | None = None,
    ) -> None: ...


@runtime_checkable
class HeldAcrossRuns(Protocol):
    """An executor whose runs can share one start: while ``hold()`` is entered, each ``run`` uses
    what it started instead of starting and stopping its own."""

    def hold(self) -> AbstractAsyncContextManager[None]: ...
