"""The Ray executor on a private loopback Ray (one per test session): same statuses as the local
executor, and the tasks really ran in Ray worker processes."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from orchestrator.batch.executors import LocalExecutor
from orchestrator.batch.run import run_suite
from orchestrator.batch.runner import RunOptions
from orchestrator.batch.suite import load_suite
from tests.batch.helpers import EXPECTED, write_suite

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None, reason="ray is not installed (optional extra: pip install 'reverie[ray]')"
)


@pytest.fixture(scope="session")
def local_ray() -> Iterator[None]:
    """A private Ray even when the environment names another cluster: ``RAY_ADDRESS`` points at a
    port nothing listens on, so a bare ``ray.init()`` would try to join it and fail."""
    from orchestrator.batch.ray_exec import start_local_ray

    saved = os.environ.get("RAY_ADDRESS")
    os.environ["RAY_ADDRESS"] = "127.0.0.1:9"
    try:
        start_local_ray(2)
    finally:
        if saved is None:
            del os.environ["RAY_ADDRESS"]
        else:
            os.environ["RAY_ADDRESS"] = saved
    import ray

    try:
        yield
    finally:
        ray.shutdown()


def test_ray_executor_matches_local(local_ray: None, tmp_path: Path) -> None:
    from orchestrator.batch.ray_exec import RayExecutor

    suite = write_suite(tmp_path / "s.jsonl")

    async def both() -> tuple[object, object]:
        tasks = await anyio.to_thread.run_sync(load_suite, suite)
        local = await run_suite(tasks, RunOptions(out_dir=tmp_path / "local"), LocalExecutor(2))
        remote = await run_suite(tasks, RunOptions(out_dir=tmp_path / "ray"), RayExecutor(2))
        return local, remote

    local, remote = anyio.run(both, backend="trio")
    assert {r.id: r.status for r in remote.results} == EXPECTED  # type: ignore[attr-defined]
    assert {r.id: r.checks for r in remote.results} == {r.id: r.checks for r in local.results}  # type: ignore[attr-defined]
    pids = {r.worker_pid for r in remote.results}  # type: ignore[attr-defined]
    assert os.getpid() not in pids and all(pids)
    assert {r.worker_pid for r in local.results} == {os.getpid()}  # type: ignore[attr-defined]
    assert remote.summary["executor"] == "ray"  # type: ignore[attr-defined]
    import ray

    assert {node["NodeManagerAddress"] for node in ray.nodes()} == {"127.0.0.1"}
    persona = tmp_path / "ray" / "home" / "agents" / "rule" / "memory" / "persona.md"
    assert "~fin" in persona.read_text()
