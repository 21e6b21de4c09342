"""The Ray executor (optional extra ``reverie[ray]``): each task is one Ray task running the same
``run_task`` as the local executor, in a worker process, on its own event loop.

Without ``--ray-address`` a private Ray instance starts on loopback only (127.0.0.1, no dashboard,
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``) and is shut down at the end; with it, the run joins that
cluster untouched (DECISIONS S28) and the run directory must be on storage every node sees.
"Private" is ``address="local"``: a bare ``ray.init()`` joins whatever cluster ``RAY_ADDRESS`` or
``/tmp/ray`` names, another process's included, so joining is only ever what ``--ray-address`` asks.
Results are awaited with ``blocking.run_sync("wait", ray.get)`` (abandoned on cancel). Ray is imported only here and
only when a run uses it, so reverie works without the extra.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from functools import partial
from typing import Any

import anyio

from orchestrator.base import blocking
from orchestrator.base.errors import UsageError
from orchestrator.batch.protocol import ResultSink
from orchestrator.batch.results import TaskResult
from orchestrator.batch.runner import ProgressSink, RunOptions, run_task
from orchestrator.batch.suite import Task, task_from_json, task_to_json

__all__ = ["RayExecutor", "ray_available", "ray_session", "start_local_ray"]

_FORWARDED = ("OPENAI_API_KEY", "OPENAI_BASE_URL")
_FORWARDED_LOCAL = ("HOME", "PATH")


def ray_available() -> bool:
    """Installed? (Without importing it: Ray reads its loopback switch at import time.)"""
    return importlib.util.find_spec("ray") is not None


def _loopback_only() -> None:
    """Make a local start bind every Ray server to 127.0.0.1: Ray reads this switch when it is
    imported (and its servers, started later, inherit the environment)."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None:
        constants.ENABLE_RAY_CLUSTER = False  # type: ignore[attr-defined]


def _worker_env(environ: Mapping[str, str], *, local: bool) -> dict[str, str]:
    """What a worker needs from the driver's environment: reverie's, git's and the endpoint's
    variables; ``HOME`` and ``PATH`` too on a local Ray (another node has its own)."""
    names = _FORWARDED + (_FORWARDED_LOCAL if local else ())
    return {k: v for k, v in environ.items() if k.startswith(("REVERIE_", "GIT_")) or k in names}


def _ray_entry(task_json: dict[str, Any], options_json: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    """Runs inside a Ray worker: a fresh event loop for one task."""
    os.environ.update(env)
    task = task_from_json(task_json)
    options = RunOptions.from_json(options_json)
    backend = env.get("REVERIE_BACKEND", "trio")
    result: TaskResult = anyio.run(partial(run_task, task, options), backend=backend)
    return result.to_json()


def start_local_ray(num_cpus: int) -> None:
    """Start (blocking) a private loopback-only Ray with no dashboard, as a local run does; for
    callers that share one Ray across several runs (tests, sweeps). Stop it with ``ray.shutdown``."""
    RayExecutor(num_cpus)._ensure_ray()


@asynccontextmanager
async def ray_session(concurrency: int, address: str | None = None) -> AsyncIterator[None]:
    """Keep one Ray connection (or private local Ray) across several runs, e.g. a sweep's settings."""
    executor = RayExecutor(concurrency, address=address)
    started = await blocking.run_sync("files", executor._ensure_ray)
    try:
        yield
    finally:
        if started:
            with anyio.CancelScope(shield=True):
                await blocking.run_sync("files", importlib.import_module("ray").shutdown)


class RayExecutor:
    name = "ray"

    def __init__(self, concurrency: int = 1, *, address: str | None = None) -> None:
        if concurrency < 1:
            raise UsageError(f"concurrency {concurrency}: must be at least 1")
        self.concurrency = concurrency
        self.address = address

    def _ensure_ray(self) -> bool:
        """Connect or start Ray (blocking); True when this call started it (and must stop it)."""
        if not ray_available():
            raise UsageError("the Ray executor needs the ray extra: pip install 'reverie[ray]'")
        if not self.address:
            _loopback_only()
        ray = importlib.import_module("ray")
        if ray.is_initialized():
            return False
        if self.address:
            ray.init(address=self.address, log_to_driver=False)
        else:
            ray.init(
                address="local",
                include_dashboard=False,
                _node_ip_address="127.0.0.1",
                num_cpus=self.concurrency,
                log_to_driver=False,
            )
        return True

    async def run(
        self,
        tasks: Sequence[Task],
        options: RunOptions,
        *,
        on_result: ResultSink,
        progress: ProgressSink | None = None,
    ) -> None:
        started_here = await blocking.run_sync("files", self._ensure_ray)
        ray = importlib.import_module("ray")
        options = replace(options, out_dir=options.out_dir.resolve())
        remote = ray.remote(num_cpus=1, max_retries=0)(_ray_entry)
        limiter = anyio.CapacityLimiter(self.concurrency)

        async def one(task: Task) -> None:
            async with limiter:
                env = _worker_env(os.environ, local=not self.address)
                ref = await blocking.run_sync("files", partial(remote.remote, task_to_json(task), options.to_json(), env))
                try:
                    raw = await blocking.run_sync("wait", partial(ray.get, ref))
                    result = TaskResult.from_json(raw)
                except anyio.get_cancelled_exc_class():
                    with anyio.CancelScope(shield=True):
                        await blocking.run_sync("files", partial(ray.cancel, ref, force=True))
                    raise
                except Exception as exc:
                    detail = " ".join(str(exc).split())[:500]
                    result = TaskResult(
                        id=task.id,
                        status="error",
                        checks_passed=0,
                        checks_total=len(task.checks),
                        error=f"ray: {type(exc).__name__}: {detail}",
                    )
                with anyio.CancelScope(shield=True):
                    await on_result(result)
                if progress is not None:
                    await progress(task.id, "task.end", {"status": result.status})

        try:
            async with anyio.create_task_group() as tg:
                for task in tasks:
                    tg.start_soon(one, task, name=f"ray task {task.id}")
        finally:
            if started_here:
                with anyio.CancelScope(shield=True):
                    await blocking.run_sync("files", ray.shutdown)
