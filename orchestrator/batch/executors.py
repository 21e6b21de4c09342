"""The in-process executor, and the choice between it and Ray's for a run.

Both implement ``orchestrator.batch.protocol.Executor`` (the contract lives there, so neither
implementation imports the other).
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio

from orchestrator.base import blocking
from orchestrator.base.errors import UsageError
from orchestrator.batch.protocol import Executor, ResultSink
from orchestrator.batch.ray_exec import RayExecutor
from orchestrator.batch.runner import ProgressSink, RunOptions, batch_environment, run_task
from orchestrator.batch.suite import Task

__all__ = ["LocalExecutor", "make_executor"]


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
        limiter = anyio.CapacityLimiter(self.concurrency)

        async def one(index: int, task: Task) -> None:
            with blocking.ranked(index):
                async with limiter:
                    result = await run_task(task, options, progress=progress)
                with anyio.CancelScope(shield=True):
                    await on_result(result)

        with batch_environment(options.out_dir):
            async with anyio.create_task_group() as tg:
                for index, task in enumerate(tasks):
                    tg.start_soon(one, index, task, name=f"batch task {task.id}")


def make_executor(kind: str, concurrency: int, *, ray_address: str | None = None) -> Executor:
    """``local`` or ``ray``; a bad name is a ``UsageError`` for the command line to report."""
    if kind == "local":
        if ray_address:
            raise UsageError("--ray-address needs --executor ray")
        return LocalExecutor(concurrency)
    if kind == "ray":
        return RayExecutor(concurrency, address=ray_address)
    raise UsageError(f"executor {kind!r}: use local or ray")
