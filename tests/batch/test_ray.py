"""The Ray executor on a private loopback Ray (one per test session): same statuses as the local
executor, the tasks really ran in Ray worker processes, a private Ray even when ``RAY_ADDRESS``
names another cluster, and a run directory the driver alone writes that ``report``, ``--resume``
and ``--retry-failed`` use as a local run's. (The two-node cluster is ``test_ray_cluster.py``.)"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from orchestrator.batch.executors import LocalExecutor
from orchestrator.batch.report_data import gather
from orchestrator.batch.run import run_suite
from orchestrator.batch.runner import RunOptions, task_paths
from orchestrator.batch.suite import load_suite
from tests.batch.helpers import EXPECTED, write_suite

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None, reason="ray is not installed (optional extra: pip install 'reverie[ray]')"
)


@pytest.fixture(scope="session")
def local_ray() -> Iterator[str]:
    """A private Ray even when the environment names another cluster: ``RAY_ADDRESS`` points at a
    port nothing listens on, so a bare ``ray.init()`` would try to join it and fail. Yields what
    the start said on stderr."""
    from orchestrator.batch.ray_exec import start_local_ray

    saved = os.environ.get("RAY_ADDRESS")
    os.environ["RAY_ADDRESS"] = "127.0.0.1:9"
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            start_local_ray(2)
    finally:
        if saved is None:
            del os.environ["RAY_ADDRESS"]
        else:
            os.environ["RAY_ADDRESS"] = saved
    import ray

    try:
        yield said.getvalue()
    finally:
        ray.shutdown()


def test_ray_address_in_the_environment_is_ignored_in_one_line(local_ray: str) -> None:
    import ray

    lines = [line for line in local_ray.splitlines() if line.startswith("reverie")]
    assert lines == [
        "reverie: RAY_ADDRESS=127.0.0.1:9 is set; this run uses a private local Ray "
        "(--ray-address 127.0.0.1:9 joins that cluster)"
    ]
    assert {node["NodeManagerAddress"] for node in ray.nodes()} == {"127.0.0.1"}


def test_ray_executor_matches_local(local_ray: str, tmp_path: Path) -> None:
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
    persona = tmp_path / "ray" / "home" / "agents" / "rule" / "memory" / "persona.md"
    assert "~fin" in persona.read_text()


def test_the_driver_writes_the_run_directory_that_report_resume_and_retry_use(local_ray: str, tmp_path: Path) -> None:
    """Every file of a task comes back through Ray; tasks ran in scratch directories (their
    ``task.start`` records the worker's pid, never the run directory), the report renders their
    transcript, diff and events, and ``--retry-failed`` reruns only the failed task."""
    from orchestrator.batch.ray_exec import RayExecutor

    suite = write_suite(tmp_path / "s.jsonl")
    out = tmp_path / "run"

    async def go() -> tuple[object, object]:
        tasks = await anyio.to_thread.run_sync(load_suite, suite)
        first = await run_suite(tasks[:3], RunOptions(out_dir=out), RayExecutor(2))
        rest = await run_suite(tasks, RunOptions(out_dir=out), RayExecutor(2), resume=True, retry=["wrong", "rule"])
        return first, rest

    first, rest = anyio.run(go, backend="trio")
    assert [r.id for r in first.results] == ["rule", "fact", "chat"]  # type: ignore[attr-defined]
    assert set(rest.ran) == {"seeded", "wrong"}  # type: ignore[attr-defined]
    assert {r.id: r.status for r in rest.results} == EXPECTED  # type: ignore[attr-defined]
    for task_id in EXPECTED:
        paths = task_paths(out, task_id)
        assert (paths.memory / ".git").is_dir() and paths.store.is_file() and paths.events.is_file()
    assert not (out / "templates").exists(), "templates are built where tasks run, never on the driver"

    data = gather(out)
    rows = {r["id"]: r for r in data.index["runs"][0]["rows"]}
    assert {i: r["status"] for i, r in rows.items()} == EXPECTED
    rule = data.details[rows["rule"]["n"]]
    assert [f["path"] for f in rule["diff"]["files"]] == ["persona.md"]
    texts = [m["content"] for c in rule["transcript"]["conversations"] for t in c["turns"] for m in t["messages"]]
    assert "remember: always end answers with ~fin" in texts
    assert [e["kind"] for e in rule["timeline"]][0] == "task.start" and rule["timeline"][-1]["kind"] == "task.end"


@pytest.mark.parametrize("given, said", [
    ("127.0.0.1:{port}", "--ray-address 127.0.0.1:{port}: cannot join that Ray cluster: nothing answers there (Connection refused)"),
    ("no-port", "--ray-address no-port: use auto or HOST:PORT (the head node's GCS port, 6379 by default)"),
    ("auto", "--ray-address auto (127.0.0.1:{port}): cannot join that Ray cluster: nothing answers there (Connection refused)"),
])
def test_a_cluster_that_cannot_be_joined_is_one_line(tmp_path: Path, given: str, said: str) -> None:
    """No Ray starts: the address is refused before ``ray.init``, which retries an address nothing
    answers without end."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    suite = write_suite(tmp_path / "s.jsonl")
    address = given.format(port=port)
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("reverie")), "run", str(suite), "--executor", "ray", "--ray-address", address,
         "--out", str(tmp_path / "out"), "--quiet"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "RAY_ADDRESS": f"127.0.0.1:{port}"},
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "reverie: error: " + said.format(port=port)


def test_a_sweep_on_ray_equals_one_on_the_local_executor(local_ray: str, tmp_path: Path) -> None:
    """Every setting runs on the one Ray into its own run directory the driver writes, with the
    local executor's statuses and checks."""
    from orchestrator.batch.ray_exec import RayExecutor
    from orchestrator.batch.sweep import expand_triggers, run_sweep

    suite = write_suite(tmp_path / "s.jsonl")
    settings = expand_triggers(["off", "step-count:2"])

    async def both() -> tuple[object, object]:
        tasks = await anyio.to_thread.run_sync(load_suite, suite)
        local = await run_sweep(tasks, settings, RunOptions(out_dir=tmp_path / "local"), lambda: LocalExecutor(2))
        remote = await run_sweep(tasks, settings, RunOptions(out_dir=tmp_path / "ray"), lambda: RayExecutor(2))
        return local, remote

    local, remote = anyio.run(both, backend="trio")
    for mine, theirs in zip(remote.runs, local.runs, strict=True):  # type: ignore[attr-defined]
        assert {r.id: (r.status, r.checks) for r in mine.results} == {r.id: (r.status, r.checks) for r in theirs.results}
        assert mine.summary["executor"] == "ray"
    for setting in settings:
        assert (task_paths(tmp_path / "ray" / setting.label, "rule").memory / ".git").is_dir()
    assert (tmp_path / "ray" / "comparison.json").is_file()
