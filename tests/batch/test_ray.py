"""The Ray executor on a private loopback Ray (one for this module): same statuses as the local
executor, the tasks really ran in Ray worker processes, a private Ray even when ``RAY_ADDRESS``
names another cluster, and a run directory the driver alone writes that ``report``, ``--resume``
and ``--retry-failed`` use as a local run's. (The two-node cluster is ``test_ray_cluster.py``.)"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from orchestrator.batch.eventlog import event_log_path, follow_events, read_events
from orchestrator.batch.executors import LocalExecutor
from orchestrator.batch.report_data import gather
from orchestrator.batch.results import read_results
from orchestrator.batch.run import run_suite
from orchestrator.batch.runner import RunOptions, task_paths
from orchestrator.batch.suite import load_suite
from orchestrator.testing.openai_server import LoopbackOpenAI
from tests.batch.helpers import EXPECTED, HOLD_SECONDS, HoldingModel, write_suite
from tests.support import wait_until

# One worker of the parallel run takes both Ray modules: one local Ray at a time on two cores.
pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("ray") is None,
        reason="ray is not installed (optional extra: pip install 'reverie[ray]')",
    ),
    pytest.mark.xdist_group("ray"),
]


@pytest.fixture(scope="module")
def local_ray() -> Iterator[str]:
    """A private Ray even when the environment names another cluster: ``RAY_ADDRESS`` points at a
    port nothing listens on, so a bare ``ray.init()`` would try to join it and fail. Yields what
    the start said on stderr. One for this module, stopped at its end: an idle Ray's daemons and
    prestarted workers would otherwise take CPU from every test after it."""
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


_TIMES = ("elapsed", "wall_time")
_TOKENS = ("tokens", "main_tokens_in", "main_tokens_out", "subagent_tokens_in", "subagent_tokens_out")
"""The prompt names the memory folder by its path, so token counts follow that path's length: a
scratch folder on a Ray node, ``OUT/<label>`` locally (they differ between local settings too)."""


def _sweep(suite: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [str(Path(sys.executable).with_name("reverie")), "sweep", str(suite), "-j", "2", "--epochs", "2",
               "-t", "off", "-t", "step-count:2", "-t", "compaction-event", "--out", str(out), "--quiet", *extra]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=out.parent, env=env)


@pytest.mark.slow
def test_a_sweep_with_epochs_on_ray_is_one_driver_deciding_as_the_local_executor(tmp_path: Path) -> None:
    """``reverie sweep --epochs 2`` with three settings on a private Ray and on the local executor:
    every setting runs every task twice (``<id>.epoch-<k>``) with the same statuses and checks,
    and the decision is the same (quality and its interval, tokens, reflection outcomes, memory
    size, front, recommendation; only times differ). One Ray serves every setting: the same worker
    processes ran each setting's tasks (a Ray per setting would have new ones)."""
    suite = write_suite(tmp_path / "s.jsonl")
    ray_run = _sweep(suite, tmp_path / "ray", "--executor", "ray")
    assert ray_run.returncode == 0, ray_run.stderr
    local_run = _sweep(suite, tmp_path / "local", "--executor", "local", "--processes", "1")
    assert local_run.returncode == 0, local_run.stderr

    def decision(out: Path) -> dict[str, Any]:
        summary = json.loads((out / "summary.json").read_text())
        summary["settings"] = [{k: v for k, v in row.items() if k not in _TIMES + _TOKENS} for row in summary["settings"]]
        summary["recommendation"] = summary["recommendation"]["setting"]
        return summary

    assert decision(tmp_path / "ray") == decision(tmp_path / "local")
    summary = decision(tmp_path / "ray")
    assert summary["epochs"] == 2 and summary["pinned"] == {"chat": "off"}
    assert [(r["setting"], r["tasks"], r["epochs"], r["samples"]) for r in summary["settings"]] == [
        ("off", 4, 2, 8), ("step-count-2", 4, 2, 8), ("compaction-event", 4, 2, 8)
    ]
    assert summary["settings"][1]["reflections"] > 0, "step-count:2 reflects in this suite"
    for mine, theirs in zip(*(json.loads((tmp_path / d / "summary.json").read_text())["settings"] for d in ("ray", "local")),
                            strict=True):
        assert abs(mine["main_tokens_in"] - theirs["main_tokens_in"]) < 0.02 * theirs["main_tokens_in"], (mine, theirs)
    wanted = {f"{t}.epoch-{k}": status for t, status in EXPECTED.items() if t != "chat" for k in (1, 2)}
    pids = []
    for label in ("off", "step-count-2", "compaction-event"):
        mine = {r.id: r for r in read_results(tmp_path / "ray" / label / "results.jsonl").values()}
        theirs = {r.id: r for r in read_results(tmp_path / "local" / label / "results.jsonl").values()}
        assert {i: r.status for i, r in mine.items()} == wanted
        assert {i: r.checks for i, r in mine.items()} == {i: r.checks for i, r in theirs.items()}
        assert json.loads((tmp_path / "ray" / label / "run.json").read_text())["executor"] == "ray"
        pids.append({r.worker_pid for r in mine.values()})
    assert os.getpid() not in set.union(*pids)
    for n in range(1, len(pids)):
        assert pids[n] & set.union(*pids[:n]), f"one Ray for every setting: worker pids per setting {pids}"


def test_a_remote_task_s_events_reach_the_run_directory_while_it_runs(
    local_ray: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a Ray task's model call is held, its ``task.start`` line (the worker's pid) is already
    in the driver's run directory and the progress sink has heard it, with no result recorded yet;
    a follower of the log (``reverie events --follow``'s) sees every line once, in order, the same
    lines the task's archive leaves at its end."""
    from orchestrator.batch.ray_exec import RayExecutor

    held = HoldingModel(["slow"])
    out = tmp_path / "run"
    log = event_log_path(out, "live")
    tasks = load_suite(write_suite(tmp_path / "s.jsonl", [
        {"id": "live", "turns": ["slow", "after"], "checks": [{"contains": "after"}], "settings": {"reflection_trigger": "off"}},
    ]))
    heard: list[str] = []

    async def sink(task_id: str, kind: str, payload: Any) -> None:
        heard.append(kind)

    def started_here() -> bool:
        return log.is_file() and '"task.start"' in log.read_text()

    with LoopbackOpenAI(fallback=held) as server:
        monkeypatch.setenv("REVERIE_BASE_URL", server.base_url)
        monkeypatch.setenv("REVERIE_MODEL", "loopback-model")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")

        async def go() -> tuple[Any, list[Any], list[str]]:
            followed: list[Any] = []
            during: list[str] = []
            ended = threading.Event()

            async def watch() -> None:
                try:
                    arrived = await anyio.to_thread.run_sync(held.arrived["slow"].wait, HOLD_SECONDS)
                    assert arrived, "the task's model call never came"
                    await anyio.to_thread.run_sync(
                        lambda: wait_until(started_here, timeout=120, what="task.start in the driver's run directory")
                    )
                    during.extend([*heard, "results" if (out / "results.jsonl").exists() else "no results"])
                    during.append(str(read_events(out, task="live")[0].payload["pid"]))
                finally:
                    held.release.set()

            def follow() -> None:
                followed.extend(follow_events(out, task="live", poll=0.1, stop=ended.is_set))

            async with anyio.create_task_group() as tg:
                tg.start_soon(watch)
                tg.start_soon(anyio.to_thread.run_sync, follow)
                try:
                    report = await run_suite(tasks, RunOptions(out_dir=out), RayExecutor(2), progress=sink)
                finally:
                    ended.set()
                    held.release.set()
            return report, followed, during

        report, followed, during = anyio.run(go, backend="trio")
    assert [r.status for r in report.results] == ["passed"], report.results
    assert during[:-1] == ["task.start", "no results"], during
    assert int(during[-1]) not in (0, os.getpid()), "the line came from the Ray worker"
    final = read_events(out, task="live")
    assert [(r.seq, r.kind) for r in followed] == [(r.seq, r.kind) for r in final]
    assert [r.seq for r in final] == list(range(1, len(final) + 1)) and final[-1].kind == "task.end"
    assert heard.count("task.end") == 1 and {"turn.start", "model.call"} <= set(heard)


def test_the_driver_s_copy_of_a_live_log_starts_again_on_a_retry_and_waits_out_a_gap(tmp_path: Path) -> None:
    """A retry's first item after a lost node is the first one the driver had not taken (Ray does
    not resend the rest), so the new attempt's copy starts empty and takes nothing until the
    archive; lines that follow on are appended and returned as records."""
    from orchestrator.batch.ray_exec import _Events, _LiveLog

    def line(seq: int, kind: str) -> bytes:
        return (json.dumps({"seq": seq, "at": "t", "task": "a", "kind": kind, "payload": {}}) + "\n").encode()

    path = tmp_path / "events" / "a.jsonl"
    live = _LiveLog(path)
    first, second = line(1, "task.start"), line(2, "turn.start")
    assert [r.kind for r in live.take(_Events("one", 0, first))] == ["task.start"]
    assert [r.seq for r in live.take(_Events("one", len(first), second))] == [2]
    assert path.read_bytes() == first + second
    assert live.take(_Events("two", len(first), second)) == [] and path.read_bytes() == b""
    assert live.take(_Events("two", len(first) + len(second), line(3, "model.call"))) == []
    assert path.read_bytes() == b""
    assert [r.kind for r in _LiveLog(path).take(_Events("three", 0, first))] == ["task.start"]
