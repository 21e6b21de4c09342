"""The Ray executor on a real two-node cluster on loopback, inside a network namespace that has only
``lo`` (``unshare -n``), so nothing can leave the machine and nothing but loopback can be reached.

The tests re-execute themselves in one child ``unshare -n`` process (as root; skipped with the reason
otherwise). In there: a head node (``ray.cluster_utils.Cluster``, 127.0.0.1, shared by the tests,
each leaving it with its own worker node dead) and, per test, a worker node
started by ``ray start`` in a mount namespace of its own whose temporary directory is a private
tmpfs, so the driver cannot see where the worker node's tasks run: what reaches the run directory
came back through Ray. The driver joins by address (``--ray-address``'s path). Then the worker node
is killed mid-run: the task it held with a soft pin is retried on the head node, the task pinned to
it hard ends ``error`` naming it, the rest is untouched, and ``--retry-failed`` completes the run.
Readiness is waited on, never timed: ``ray start`` says when it has joined, and the loopback model
server says when a task has reached the worker node's model call (and holds it there)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import venv
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import anyio
import pytest

from orchestrator import __version__
from orchestrator.batch.eventlog import read_events
from orchestrator.batch.report_data import gather
from orchestrator.batch.run import run_suite
from orchestrator.batch.runner import RunOptions, task_paths
from orchestrator.batch.suite import Task, load_suite
from orchestrator.testing.openai_server import LoopbackOpenAI
from tests.batch.helpers import EXPECTED, HoldingModel, write_suite
from tests.support import wait_until

# One worker of the parallel run takes both Ray modules: one local Ray at a time on two cores.
pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("ray") is None,
        reason="ray is not installed (optional extra: pip install 'reverie[ray]')",
    ),
    pytest.mark.xdist_group("ray"),
]

IN_NAMESPACE = "REVERIE_TEST_IN_NETNS"
_CHILD_SECONDS = 240


def _why_no_namespace() -> str | None:
    if os.geteuid() != 0:
        return "needs root to make a network namespace with only loopback (unshare -n)"
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "needs unshare and ip (util-linux, iproute2) for a loopback-only network namespace"
    probe = subprocess.run(["unshare", "-n", "-m", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"unshare -n -m is not permitted here: {probe.stderr.strip()}"
    return None


@pytest.fixture(scope="module")
def in_namespace(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str]]:
    """This module's selected tests again, in one child with its own network namespace (``lo`` up,
    nothing else), where they share one head node: ``{test name: (outcome, what it said)}``. One
    child and one head for both tests, not one each: a pytest and a head node take seconds to start."""
    if os.environ.get(IN_NAMESPACE) == "1":
        return {}
    why = _why_no_namespace()
    if why is not None:
        pytest.skip(why)
    here = Path(__file__).resolve()
    # under xdist's --dist loadgroup a node id ends in "@<group>", which the child would not find
    wanted = [item.nodeid.split("@", 1)[0] for item in request.session.items if Path(str(item.path)).resolve() == here]
    where = tmp_path_factory.mktemp("netns")
    report = where / "junit.xml"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env[IN_NAMESPACE] = "1"
    script = (
        'ip link set lo up && base="$1" junit="$2" && shift 2 && '
        'exec "$0" -m pytest -q -p no:cacheprovider --basetemp "$base" --junitxml "$junit" "$@"'
    )
    command = ["unshare", "-n", "sh", "-c", script, sys.executable, str(where / "inner"), str(report), *wanted]
    child = subprocess.Popen(
        command, cwd=request.config.rootpath, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = child.communicate(timeout=_CHILD_SECONDS * len(wanted))
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    text = out.decode("utf-8", "replace")
    assert report.is_file(), text[-6000:]
    outcomes = {}
    for case in ElementTree.parse(report).iter("testcase"):
        said = "".join(part.text or "" for part in case)
        found = [part.tag for part in case if part.tag in ("failure", "error", "skipped")]
        outcomes[case.get("name", "")] = (found[0] if found else "passed", said or text[-2000:])
    return outcomes


def _ran_in_namespace(request: pytest.FixtureRequest, outcomes: dict[str, tuple[str, str]]) -> None:
    """This test's outcome in the child: it passed there (not failed, not skipped)."""
    outcome, said = outcomes.get(request.node.name, ("missing", str(sorted(outcomes))))
    assert outcome == "passed", said[-6000:]


_RAY_CLI = "import sys; from ray.scripts.scripts import main; sys.argv[0] = 'ray'; sys.exit(main())"
"""``ray`` as its console script runs it, by whichever Python starts it (a node's workers are that Python)."""


class _WorkerNode:
    """A second Ray node: ``ray start --block`` in a mount namespace whose ``TMPDIR`` is a private
    tmpfs (the directory the driver sees there stays empty). Killing it kills every process in that
    mount namespace, as a machine that dies takes all of its processes (a Ray worker is not in
    ``ray start``'s process group, and one that outlived its raylet still answered its caller)."""

    def __init__(self, head: str, hidden: Path, python: str = sys.executable, env: dict[str, str] | None = None) -> None:
        start = (
            'mount -t tmpfs tmpfs "$1" && TMPDIR="$1" exec "$0" -c "$3" start --block --address "$2" '
            "--node-ip-address 127.0.0.1 --num-cpus 2 --resources '{\"worker_node\": 8}' --disable-usage-stats"
        )
        self.process = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", start, python, str(hidden), head, _RAY_CLI],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, text=True, env=env,
        )
        self.said: list[str] = []
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.said.append(line)
            if "Ray runtime started" in line:
                break
        else:
            raise AssertionError("the worker node did not start:\n" + "".join(self.said))
        self.namespace = os.readlink(f"/proc/{self.process.pid}/ns/mnt")
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.said.append(line)

    def _members(self) -> list[int]:
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.readlink(f"/proc/{entry}/ns/mnt") == self.namespace:
                        pids.append(int(entry))
                except OSError:
                    continue
        return pids

    def kill(self) -> None:
        for pid in self._members():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        self.process.wait()


@pytest.fixture(scope="module")
def head() -> Iterator[Any]:
    """The head node, from this process's Python (reverie installed), on 127.0.0.1, one for the
    module: each test adds a worker node of its own and leaves with it dead; a lost node is noticed
    within about two seconds."""
    if os.environ.get(IN_NAMESPACE) != "1":
        yield None
        return
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "node_ip_address": "127.0.0.1",
            "num_cpus": 2,
            "resources": {"head_node": 8},
            "include_dashboard": False,
            "_system_config": {"health_check_period_ms": 500, "health_check_failure_threshold": 3},
        },
    )
    try:
        yield cluster
    finally:
        cluster.shutdown()


def _gone(head: Any, worker: _WorkerNode) -> None:
    """Kill a test's worker node and wait until the head has marked it dead, so the next test
    finds the head with no worker node but its own."""
    worker.kill()
    wait_until(lambda: "worker_node" not in _alive(head), timeout=60, what="the worker node marked dead")


@pytest.fixture
def cluster(head: Any) -> Iterator[tuple[Any, _WorkerNode, Path]]:
    if os.environ.get(IN_NAMESPACE) != "1":
        yield None, None, Path()  # type: ignore[misc]
        return
    # short: the memory hook's socket lives under TMPDIR, and a socket path has ~100 bytes at most
    hidden = Path(tempfile.mkdtemp(prefix="rvw-", dir="/tmp"))
    worker = None
    try:
        worker = _WorkerNode(head.address, hidden)
        yield head, worker, hidden
    finally:
        import ray

        ray.shutdown()
        if worker is not None:
            _gone(head, worker)
        shutil.rmtree(hidden, ignore_errors=True)


def _node_ids() -> dict[str, str]:
    import ray

    ids = {}
    for node in ray.nodes():
        if node["Alive"]:
            for name in ("head_node", "worker_node"):
                if name in node["Resources"]:
                    ids[name] = node["NodeID"]
    return ids


def _hidden_marker() -> str:
    """Runs on the worker node: a file in its temporary directory, for the driver to look for."""
    fd, path = tempfile.mkstemp(prefix="only-on-the-worker-")
    os.close(fd)
    return path


@pytest.mark.slow
def test_two_nodes_no_shared_disk_then_a_lost_node(
    request: pytest.FixtureRequest, in_namespace: dict[str, tuple[str, str]],
    cluster: tuple[Any, _WorkerNode, Path], tmp_path: Path,
) -> None:
    if os.environ.get(IN_NAMESPACE) != "1":
        _ran_in_namespace(request, in_namespace)
        return
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from orchestrator.batch.ray_exec import RayExecutor

    head, worker, hidden = cluster
    address = head.address
    RayExecutor(4, address=address)._ensure_ray()  # joins, and checks the workers can import reverie
    nodes = _node_ids()
    assert set(nodes) == {"head_node", "worker_node"}, ray.nodes()
    assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}

    marker = ray.get(ray.remote(resources={"worker_node": 1})(_hidden_marker).remote())
    assert marker.startswith(str(hidden)) and not os.path.exists(marker), "the worker node's disk is its own"

    # 1. the example suite across both nodes: everything comes back to the driver's run directory
    suite = write_suite(tmp_path / "s.jsonl")
    tasks = load_suite(suite)
    side = {t.id: ("worker_node" if i % 2 == 0 else "head_node") for i, t in enumerate(tasks)}

    def pinned(task: Task) -> dict[str, Any]:
        return {"resources": {side[task.id]: 1}}

    out = tmp_path / "run"
    report = anyio.run(
        lambda: run_suite(tasks, RunOptions(out_dir=out), RayExecutor(4, address=address, placement=pinned)),
        backend="trio",
    )
    assert {r.id: r.status for r in report.results} == EXPECTED, [r for r in report.results if r.status != EXPECTED[r.id]]
    assert set(side.values()) == {"head_node", "worker_node"}
    assert os.listdir(hidden) == []
    data = gather(out)
    rows = {r["id"]: r for r in data.index["runs"][0]["rows"]}
    for task_id, where in side.items():
        detail = data.details[rows[task_id]["n"]]
        assert detail["transcript"]["conversations"], (task_id, where)
        assert detail["timeline"][0]["kind"] == "task.start" and detail["timeline"][-1]["kind"] == "task.end"
    assert [f["path"] for f in data.details[rows["rule"]["n"]]["diff"]["files"]] == ["persona.md"]
    assert side["rule"] == "worker_node"
    assert "~fin" in (task_paths(out, "rule").memory / "persona.md").read_text()

    # 2. the worker node dies mid-run
    held = HoldingModel(["slow moved", "slow lost"])
    lost_run = tmp_path / "lost"
    lost_suite = write_suite(tmp_path / "lost.jsonl", [
        {"id": "moved", "turns": ["slow moved"], "checks": [{"contains": "slow moved"}]},
        {"id": "lost", "turns": ["slow lost"], "checks": [{"contains": "slow lost"}]},
        {"id": "stays", "turns": ["quick"], "checks": [{"contains": "quick"}]},
    ])
    lost_tasks = load_suite(lost_suite)
    worker_id = nodes["worker_node"]
    strategies = {
        "moved": {"scheduling_strategy": NodeAffinitySchedulingStrategy(worker_id, soft=True)},
        "lost": {"scheduling_strategy": NodeAffinitySchedulingStrategy(worker_id, soft=False)},
        "stays": {"resources": {"head_node": 1}},
    }

    with LoopbackOpenAI(fallback=held) as server:
        os.environ.update({"REVERIE_BASE_URL": server.base_url, "REVERIE_MODEL": "loopback-model", "OPENAI_API_KEY": "sk-test"})

        async def kill_when_held() -> None:
            for event in held.arrived.values():
                await anyio.to_thread.run_sync(event.wait)
            await anyio.to_thread.run_sync(worker.kill)
            held.release.set()

        async def go() -> Any:
            executor = RayExecutor(4, address=address, placement=lambda t: strategies[t.id])
            async with anyio.create_task_group() as tg:
                tg.start_soon(kill_when_held)
                result = await run_suite(lost_tasks, RunOptions(out_dir=lost_run), executor)
            return result

        try:
            lost_report = anyio.run(go, backend="trio")
        finally:
            held.release.set()
        statuses = {r.id: r for r in lost_report.results}
        assert statuses["stays"].status == "passed"
        assert statuses["moved"].status == "passed" and held.calls["slow moved"] == 2, "retried on the head node"
        assert statuses["lost"].status == "error", statuses["lost"]
        assert f"node {worker_id} at 127.0.0.1 was lost" in (statuses["lost"].error or ""), statuses["lost"].error
        assert (task_paths(lost_run, "moved").memory / ".git").is_dir()
        moved = [r.kind for r in read_events(lost_run, task="moved")]
        assert moved.count("task.start") == 1 and moved[-1] == "task.end", "the lost attempt's live lines were replaced"

        # 3. --retry-failed finishes the run on what is left
        retried = anyio.run(
            lambda: run_suite(lost_tasks, RunOptions(out_dir=lost_run), RayExecutor(4, address=address),
                              resume=True, retry=["lost"]),
            backend="trio",
        )
    assert list(retried.ran) == ["lost"]
    assert {r.id: r.status for r in retried.results} == dict.fromkeys(("moved", "lost", "stays"), "passed")
    lines = (lost_run / "results.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["id"] for line in lines) == ["lost", "moved", "stays"]


_REVERIE_PARTS = ("orchestrator", "subagents", "prompts")


def _python_without_reverie(where: Path) -> str:
    """A Python that has Ray and every other dependency, but not reverie: a venv whose one ``.pth``
    line names a folder of links to this environment's site-packages, all but reverie's packages
    and its install records (lines of a ``.pth`` are not site directories, so reverie's editable
    finder, itself a ``.pth``, is not run either)."""
    purelib = Path(sysconfig.get_paths()["purelib"])
    shared = where / "shared-site-packages"
    shared.mkdir(parents=True)
    for entry in purelib.iterdir():
        name = entry.name
        if name in _REVERIE_PARTS or name.startswith(("__editable__", "reverie-", "_reverie")) or name.endswith(".pth"):
            continue
        (shared / name).symlink_to(entry)
    venv.EnvBuilder(with_pip=False).create(where / "venv")
    python = where / "venv" / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    (Path(site) / "shared.pth").write_text(f"{shared}\n", encoding="utf-8")
    check = subprocess.run(
        [str(python), "-c", "import ray, importlib.util as u; print(u.find_spec('orchestrator') is None)"],
        capture_output=True, text=True, cwd=where, env=_without_reverie_env(),
    )
    assert check.stdout.strip() == "True", ("Ray but no reverie", check.stdout, check.stderr)
    return str(python)


def _without_reverie_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


@pytest.fixture
def head_and_bare_node(head: Any, tmp_path: Path) -> Iterator[tuple[Any, _WorkerNode]]:
    """The head node with reverie and a worker node whose Python has Ray but not reverie."""
    if os.environ.get(IN_NAMESPACE) != "1":
        yield None, None  # type: ignore[misc]
        return
    python = _python_without_reverie(tmp_path / "bare")
    hidden = Path(tempfile.mkdtemp(prefix="rvb-", dir="/tmp"))
    worker = None
    try:
        worker = _WorkerNode(head.address, hidden, python=python, env=_without_reverie_env())
        yield head, worker
    finally:
        if worker is not None:
            _gone(head, worker)
        shutil.rmtree(hidden, ignore_errors=True)


def _alive(head: Any) -> dict[str, str]:
    """``{"head_node" | "worker_node": node id}`` of the live nodes, asked of the head's GCS (this
    process is not a Ray driver here: the run under test is its own process)."""
    found = {}
    for node in head.global_state.node_table():
        if node["Alive"]:
            for name in ("head_node", "worker_node"):
                if name in node["Resources"]:
                    found[name] = node["NodeID"]
    return found


@pytest.mark.slow
def test_a_node_without_reverie_is_refused_in_one_line_and_the_run_can_resume(
    request: pytest.FixtureRequest, in_namespace: dict[str, tuple[str, str]],
    head_and_bare_node: tuple[Any, _WorkerNode], tmp_path: Path,
) -> None:
    """``reverie run --ray-address`` against a cluster one of whose nodes runs Ray from a Python
    without reverie: one line naming that node and what to install, rc 1, no traceback, no task
    started, nothing in the run directory but ``run.json``; once that node is gone, ``--resume``
    runs every task on the head."""
    if os.environ.get(IN_NAMESPACE) != "1":
        _ran_in_namespace(request, in_namespace)
        return
    head, worker = head_and_bare_node
    nodes = _alive(head)
    assert set(nodes) == {"head_node", "worker_node"}
    suite = write_suite(tmp_path / "s.jsonl", [
        {"id": "one", "turns": ["hello"], "checks": [{"contains": "hello"}]},
        {"id": "two", "turns": ["hi there"], "checks": [{"contains": "hi there"}]},
    ])
    out = tmp_path / "run"
    reverie = str(Path(sys.executable).with_name("reverie"))
    command = [reverie, "run", str(suite), "--executor", "ray", "--ray-address", head.address, "--out", str(out), "--quiet"]
    # not from the repository: Ray puts the driver's working directory on every worker's sys.path
    refused = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=_CHILD_SECONDS)

    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "Traceback" not in refused.stderr, refused.stderr
    said = [line for line in refused.stderr.splitlines() if line.startswith("reverie")]
    assert said == [
        f"reverie: error: --ray-address {head.address}: the cluster's workers cannot import reverie on node "
        f"{nodes['worker_node']} at 127.0.0.1 (ModuleNotFoundError: No module named 'orchestrator'): install "
        f"reverie[ray]=={__version__} (the driver's version) in the Python that runs Ray on every node"
    ], refused.stderr
    assert refused.stderr.strip().splitlines()[-1] == said[0]
    assert refused.stdout == ""
    left = sorted(p.name for p in out.iterdir())
    assert left == [".reverie-run.lock", "run.json"], left
    assert json.loads((out / "run.json").read_text())["tasks"] == ["one", "two"]

    worker.kill()
    wait_until(lambda: set(_alive(head)) == {"head_node"}, timeout=60, what="the worker node marked dead")
    resumed = subprocess.run([*command, "--resume"], capture_output=True, text=True, cwd=tmp_path, timeout=_CHILD_SECONDS)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted((r["id"], r["status"]) for r in results) == [("one", "passed"), ("two", "passed")]
    assert all(r["worker_pid"] != os.getpid() for r in results)
    assert gather(out).index["runs"][0]["rows"]
