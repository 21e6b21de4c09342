"""The Ray executor (optional extra ``reverie[ray]``): each task is one Ray task running the same
``run_task`` as the local executor, in a worker process, on its own event loop.

A private Ray on loopback unless ``--ray-address`` joins a cluster (S28); no shared disk (a task
returns its result and an archive of its files through Ray, so the run directory is where the
driver runs and ``report``/``--resume`` see what a local run leaves); events stream back through a
Ray generator; a lost node is retried once, then the task ends ``error`` naming the node. Ray is
imported only here and only when a run uses it, so reverie works without the extra. The reasons for
each are in docs/architecture.md, "The Ray executor"."""

from __future__ import annotations

import builtins
import importlib
import importlib.util
import json
import logging
import os
import re
import socket
import sys
import tempfile
import threading
import types
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import anyio

from orchestrator.base import blocking
from orchestrator.base.errors import UsageError
from orchestrator.batch.eventlog import EventRecord
from orchestrator.batch.protocol import ResultSink
from orchestrator.batch.results import TaskResult
from orchestrator.batch.runner import ProgressSink, RunOptions, run_task, task_paths
from orchestrator.batch.suite import Task, task_from_json, task_to_json
from orchestrator.batch.task_archive import pack_task, unpack_task

__all__ = ["Placement", "RayExecutor", "ray_available", "ray_session", "start_local_ray"]

_FORWARDED = ("OPENAI_API_KEY", "OPENAI_BASE_URL")
_FORWARDED_LOCAL = ("HOME", "PATH")
_NOT_FORWARDED = ("REVERIE_HOME", "REVERIE_WORKTREES")
"""Paths on the driver's disk: a task's home is its scratch directory's."""
_RETRIES = 1
_PROBE_SECONDS = 60.0
_LOOPBACK = ("127.0.0.1", "localhost")
_RAY_LOG_LEVEL = logging.ERROR
"""Ray's own driver-side lines (connecting, connected, the SIGTERM handler a thread cannot set) are
not the user's: reverie says what matters in its own words, and Ray's errors still show."""


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
    return {
        k: v
        for k, v in environ.items()
        if (k.startswith(("REVERIE_", "GIT_")) or k in names) and k not in _NOT_FORWARDED
    }


@dataclass(frozen=True)
class _Shipped:
    """What a Ray task sends back last: its result line, its files, the node it ran on."""

    result: dict[str, Any]
    archive: bytes
    node: str


@dataclass(frozen=True)
class _Events:
    """Lines a running task appended to its event log, from byte ``offset`` of the log its attempt
    ``attempt`` writes (whole lines only)."""

    attempt: str
    offset: int
    lines: bytes


_KV_NAMESPACE = "reverie"
_STREAM_SECONDS = 0.5
"""How often a running task's event log is looked at for new lines (its runner appends them at
most once a second, and after every turn that follows a quiet second)."""


def _new_lines(path: Path, offset: int) -> bytes:
    """The whole lines appended to ``path`` after ``offset`` (none yet: b"")."""
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            chunk = handle.read()
    except FileNotFoundError:
        return b""
    return chunk[: chunk.rfind(b"\n") + 1]


def _ray_entry(
    task_json: dict[str, Any], options_json: dict[str, Any], env: dict[str, str], config_text: str | None, key: str
) -> Iterator[_Events | _Shipped]:
    """Runs inside a Ray worker, on whichever node (a Ray generator task): the task in a scratch run
    directory of its own on a fresh event loop in a thread, while this yields each batch of lines
    its event log gains (``_Events``); then its files packed for the driver (``_Shipped``)."""
    os.environ.update(env)
    task = task_from_json(task_json)
    node = _node_id()
    _kv().put(key, f"{node} {_node_ip()}", namespace=_KV_NAMESPACE)
    attempt = uuid.uuid4().hex
    with tempfile.TemporaryDirectory(prefix="reverie-task-") as scratch:
        out = Path(scratch).resolve() / "run"
        out.mkdir()
        config_file: str | None = None
        if config_text is not None:
            config_path = Path(scratch).resolve() / "config.toml"
            config_path.write_text(config_text, encoding="utf-8")
            config_file = str(config_path)
        options = replace(RunOptions.from_json(options_json), out_dir=out, config_file=config_file)
        backend = env.get("REVERIE_BACKEND", "trio")
        outcome: list[TaskResult | BaseException] = []
        done = threading.Event()

        def work() -> None:
            try:
                outcome.append(anyio.run(partial(run_task, task, options), backend=backend))
            except BaseException as exc:
                outcome.append(exc)
            finally:
                done.set()

        threading.Thread(target=work, name=f"reverie task {task.id}", daemon=True).start()
        log, offset = task_paths(out, task.id).events, 0
        while True:
            finished = done.wait(_STREAM_SECONDS)
            lines = _new_lines(log, offset)
            if lines:
                yield _Events(attempt, offset, lines)
                offset += len(lines)
            if finished:
                break
        result = outcome[0]
        if isinstance(result, BaseException):
            raise result
        archive = pack_task(out, task.id)
    yield _Shipped(result.to_json(), archive, node)


class _LiveLog:
    """The driver's copy of a running task's event log in the run directory, appended as its lines
    arrive, so ``reverie events --follow`` shows a remote task as it runs. Only lines that follow on
    from what is written are taken: a new attempt (Ray retried the task) starts the file again, and
    lines Ray does not resend after a retry leave a gap that the task's archive fills at its end
    (it replaces the file with the whole log, of which what was written is the start)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.attempt: str | None = None
        self.written = 0
        self.gap = False

    def take(self, events: _Events) -> list[EventRecord]:
        """Write ``events`` if they follow on (blocking); the records written."""
        if events.attempt != self.attempt:
            self.attempt, self.written, self.gap = events.attempt, 0, False
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_bytes(b"")
        if self.gap or events.offset != self.written:
            self.gap = True
            return []
        with self.path.open("ab") as handle:
            handle.write(events.lines)
        self.written += len(events.lines)
        return [EventRecord.from_json(json.loads(line)) for line in events.lines.splitlines() if line.strip()]


def _node_id() -> str:
    ray = importlib.import_module("ray")
    return str(ray.get_runtime_context().get_node_id())


def _node_ip() -> str:
    return str(importlib.import_module("ray.util").get_node_ip_address())


class _Kv:
    """Ray's GCS key-value store (``ray.experimental.internal_kv``), named in one place."""

    def __init__(self) -> None:
        self._kv = importlib.import_module("ray.experimental.internal_kv")

    def put(self, key: str, value: str, *, namespace: str) -> None:
        self._kv._internal_kv_put(key, value, namespace=namespace)

    def pop(self, key: str, *, namespace: str) -> str | None:
        """The value (``None`` if none) and the key removed."""
        try:
            raw = self._kv._internal_kv_get(key, namespace=namespace)
            self._kv._internal_kv_del(key, namespace=namespace)
        except Exception:
            return None
        return raw.decode("utf-8", "replace") if raw else None


def _kv() -> _Kv:
    return _Kv()


def _probe() -> str | None:
    """Runs on one node's worker: can it import reverie (the package, not just Ray)? Self-contained
    and sent by value (``_by_value``) with only the builtins as its globals, so it loads where
    reverie is missing and says so: it imports through ``__import__``, never a module-level name."""
    try:
        __import__("orchestrator.batch.runner")
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _by_value(function: Callable[[], str | None]) -> Callable[[], str | None]:
    """A copy of ``function`` that Ray's pickler sends by value (a function of ``__main__``): by
    reference, as it sends a module's functions, the worker would have to import reverie to load
    it, and the probe would fail with Ray's own error instead of answering."""
    copy = types.FunctionType(function.__code__, {"__builtins__": builtins}, function.__name__)
    copy.__module__ = "__main__"
    copy.__qualname__ = function.__name__
    return copy


def _task_nodes(ray: Any) -> list[tuple[str, str]]:
    """``(node id, ip)`` of every live node a task can run on (one CPU or more): a head started
    with ``--num-cpus 0`` never runs one, so whether it has reverie does not matter."""
    return [
        (str(n["NodeID"]), str(n.get("NodeManagerAddress", "")))
        for n in ray.nodes()
        if n.get("Alive") and float(n.get("Resources", {}).get("CPU", 0)) >= 1
    ]


def _missing_on(ray: Any, nodes: Sequence[tuple[str, str]]) -> list[str]:
    """Ask every node whether its workers can import reverie (blocking); the nodes that cannot,
    each as ``node <id> at <ip> (<why>)``. A probe Ray cannot run raises Ray's error."""
    strategies = importlib.import_module("ray.util.scheduling_strategies")
    probe = ray.remote(num_cpus=0, max_retries=0)(_by_value(_probe))
    refs = [
        probe.options(scheduling_strategy=strategies.NodeAffinitySchedulingStrategy(node, soft=False)).remote()
        for node, _ in nodes
    ]
    answers = ray.get(refs, timeout=_PROBE_SECONDS)
    return [f"node {node} at {ip} ({why})" for (node, ip), why in zip(nodes, answers, strict=True) if why is not None]


def _version() -> str:
    return str(importlib.import_module("orchestrator").__version__)


def _read_config(options: RunOptions) -> str | None:
    if not options.config_file:
        return None
    try:
        return Path(options.config_file).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


_NODE_PATTERNS = (
    re.compile(r"node ID:?\s*([0-9a-f]{8,})", re.IGNORECASE),
    re.compile(r"node_id[=:]\s*([0-9a-f]{8,})", re.IGNORECASE),
    re.compile(r"\bnode ([0-9a-f]{16,})", re.IGNORECASE),
)
_IP_PATTERN = re.compile(r"(?:node IP|IP)[:=]?\s*(\d+\.\d+\.\d+\.\d+)", re.IGNORECASE)


_LOST = ("NodeDiedError", "WorkerCrashedError", "TaskUnschedulableError", "LocalRayletDiedError", "ObjectLostError")
"""Ray's errors for a task whose worker or node went away (or whose retry could not be placed)."""


def _task_error(exc: BaseException, started_on: str | None) -> str:
    """The ``error`` of a task Ray could not finish: the node first (where its last attempt
    started, else as Ray's message names it), then Ray's own words, shortened."""
    text = " ".join(str(exc).split())
    node = next((m.group(1) for p in _NODE_PATTERNS if (m := p.search(text))), None)
    found_ip = _IP_PATTERN.search(text)
    ip = found_ip.group(1) if found_ip else None
    if started_on:
        node, _, ip = started_on.partition(" ")
    where = " ".join(x for x in (f"node {node}" if node else "", f"at {ip}" if ip else "") if x)
    name = type(exc).__name__
    if name in _LOST:
        lost = where or "the node"
        return f"ray: {lost} was lost while running this task (tried {1 + _RETRIES} times): {name}: {text[:400]}"
    return f"ray{f' ({where})' if where else ''}: {name}: {text[:500]}"


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


_CONNECT_SECONDS = 10.0


def _resolve_auto() -> str | None:
    """What ``auto`` names (``RAY_ADDRESS``, else ``/tmp/ray``'s latest cluster), as Ray resolves it;
    ``None`` when it names nothing or Ray's resolver moved (then ``ray.init`` says)."""
    try:
        services = importlib.import_module("ray._private.services")
        found = services.canonicalize_bootstrap_address("auto")
    except Exception:
        return None
    return str(found) if found else None


def _answers(address: str) -> None:
    """A ``HOST:PORT`` that nothing answers is refused here: ``ray.init`` would retry it without
    end (ten minutes measured, still waiting); ``auto`` is checked as what it resolves to.
    ``ray://`` (Ray Client) is Ray's to check."""
    if "://" in address:
        return
    given = address
    if address == "auto":
        resolved = _resolve_auto()
        if resolved is None:
            return
        address = resolved
        given = f"auto ({resolved})"
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise UsageError(f"--ray-address {given}: use auto or HOST:PORT (the head node's GCS port, 6379 by default)")
    try:
        socket.create_connection((host, int(port)), timeout=_CONNECT_SECONDS).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UsageError(f"--ray-address {given}: cannot join that Ray cluster: nothing answers there ({reason})") from None


def _note(text: str) -> None:
    print(f"reverie: {text}", file=sys.stderr, flush=True)


Placement = Callable[[Task], Mapping[str, Any]]
"""A task's extra Ray options (``resources``, ``scheduling_strategy``, ...), for a library caller
that places tasks itself: on a GPU node, or across nodes as the cluster tests do."""


async def _follow(
    ray: Any, stream: Any, live: _LiveLog, task_id: str, progress: ProgressSink | None
) -> _Shipped:
    """Take a Ray task's items as they come: its event lines into the run directory (and the
    progress sink, ``task.end`` aside: the executor says that with the result), then its result."""
    while True:
        ref = await blocking.run_sync("wait", partial(next, stream, None))
        if ref is None:
            raise RuntimeError("the Ray task ended without its result")
        item = await blocking.run_sync("wait", partial(ray.get, ref))
        if isinstance(item, _Shipped):
            return item
        records = await blocking.run_sync("files", partial(live.take, item))
        if progress is not None:
            for record in records:
                if record.kind != "task.end":
                    await progress(task_id, record.kind, record.payload)


class RayExecutor:
    """``placement`` (library only): each task's extra options for its Ray task; Ray places it
    wherever a CPU is free otherwise."""

    name = "ray"

    def __init__(
        self, concurrency: int = 1, *, address: str | None = None, placement: Placement | None = None
    ) -> None:
        if concurrency < 1:
            raise UsageError(f"concurrency {concurrency}: must be at least 1")
        self.concurrency = concurrency
        self.address = address or None
        self.placement = placement

    def hold(self) -> AbstractAsyncContextManager[None]:
        """One Ray connection (or private Ray) for every run while held: a sweep's settings."""
        return ray_session(self.concurrency, self.address)

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
            self._join(ray)
        else:
            joining = os.environ.get("RAY_ADDRESS", "").strip()
            if joining:
                _note(f"RAY_ADDRESS={joining} is set; this run uses a private local Ray (--ray-address {joining} joins that cluster)")
            ray.init(
                address="local",
                include_dashboard=False,
                _node_ip_address="127.0.0.1",
                num_cpus=self.concurrency,
                log_to_driver=False,
                logging_level=_RAY_LOG_LEVEL,
            )
        return True

    def _join(self, ray: Any) -> None:
        address = str(self.address)
        _answers(address)
        extra: dict[str, Any] = {}
        if address.rsplit(":", 1)[0] in _LOOPBACK:
            extra["_node_ip_address"] = "127.0.0.1"
        try:
            ray.init(address=address, log_to_driver=False, logging_level=_RAY_LOG_LEVEL, **extra)
        except Exception as exc:
            first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
            raise UsageError(f"--ray-address {address}: cannot join that Ray cluster: {first.strip()}") from None
        try:
            nodes = _task_nodes(ray)
            missing = _missing_on(ray, nodes)
        except Exception as exc:
            ray.shutdown()
            detail = " ".join(str(exc).split())[:200]
            raise UsageError(f"--ray-address {address}: the cluster's workers cannot run reverie: {detail}") from None
        if not nodes:
            ray.shutdown()
            raise UsageError(f"--ray-address {address}: the cluster has no live node with a CPU to run a task on")
        if missing:
            ray.shutdown()
            more = f" and {len(missing) - 2} more" if len(missing) > 2 else ""
            raise UsageError(
                f"--ray-address {address}: the cluster's workers cannot import reverie on "
                f"{'; '.join(missing[:2])}{more}: install reverie[ray]=={_version()} (the driver's version) in the Python that runs Ray on every node"
            )

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
        config_text = await blocking.run_sync("files", partial(_read_config, options))
        remote = ray.remote(num_cpus=1, max_retries=_RETRIES, retry_exceptions=False)(_ray_entry)
        limiter = anyio.CapacityLimiter(self.concurrency)
        env = _worker_env(os.environ, local=not self.address)
        run_key = uuid.uuid4().hex
        kv = _kv()

        async def one(task: Task) -> None:
            key = f"task/{run_key}/{task.id}"
            live = _LiveLog(task_paths(options.out_dir, task.id).events)
            async with limiter:
                placed = remote.options(**self.placement(task)) if self.placement is not None else remote
                stream = await blocking.run_sync(
                    "files", partial(placed.remote, task_to_json(task), options.to_json(), env, config_text, key)
                )
                try:
                    shipped = await _follow(ray, stream, live, task.id, progress)
                    await blocking.run_sync("files", partial(unpack_task, options.out_dir, task.id, shipped.archive))
                    result = TaskResult.from_json(shipped.result)
                except anyio.get_cancelled_exc_class():
                    with anyio.CancelScope(shield=True):
                        await blocking.run_sync("files", partial(ray.cancel, stream, force=True))
                    raise
                except Exception as exc:
                    started_on = await blocking.run_sync("files", partial(kv.pop, key, namespace=_KV_NAMESPACE))
                    result = TaskResult(
                        id=task.id,
                        status="error",
                        checks_passed=0,
                        checks_total=len(task.checks),
                        error=_task_error(exc, started_on),
                    )
                else:
                    await blocking.run_sync("files", partial(kv.pop, key, namespace=_KV_NAMESPACE))
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
