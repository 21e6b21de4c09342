"""Start-up cost of the ``reverie`` command (P1), against ``python -c pass``.

Each probe is a fresh process, run ``--repeats`` times with the probes interleaved (so machine load
hits them alike); the table shows medians and the ratio to ``python -c pass``:

* ``--version`` must stay within 3x ``python -c pass`` (it imports nothing of reverie);
* ``chat -p`` on the embedded model: time until the reply's first byte reaches stdout (target
  0.3 s, median; the best run and the ratio to the target are printed too) and until the process
  exits (subagent waits and teardown included); the same on ``REVERIE_BACKEND=asyncio``, reported
  only, since trio (the default, S11) is about 50 ms of the budget on its own;
* ``chat -p`` against the loopback OpenAI-compatible server: time until the first request arrives,
  next to ``python -c "import openai"`` (the SDK import is the one thing allowed before it), and
  reverie's own time before the first request: the median of each repeat's first-request time minus
  the bare SDK import measured next to it. The CPU seconds the process has spent when the request
  arrives (``/proc``) are printed beside the bare import's (the same paired median), as they are
  less noisy on a shared machine than wall time, and the GIL makes the two differ only by waits.
  The same differences are printed against the SDK sending one request on its own (``SDK_REQUEST``):
  the bare import leaves out what the SDK itself does before its first request (httpcore2, which
  imports trio when it is installed, h11, the TLS context, ``uname -p`` for the platform headers).

Bytecode caches are allowed (``PYTHONDONTWRITEBYTECODE`` is dropped for the children, and one
warm-up run writes them), as on a user's machine. Then ``python -X importtime`` of ``chat -p`` lists
the heaviest modules it imports.

    .venv/bin/python bench/startup.py [--repeats 21] [--real-only | --instructions]

``--real-only`` runs only the real path's probes (``python -c pass``, the bare SDK import and the first
request), for comparing changes to that path quickly.

``--instructions`` counts instead of timing (valgrind's callgrind, ~50x slower): the CPU instructions
the SDK spends up to its own first request, and those ``chat -p`` spends up to its first request, each
process stopped at its first connect to the loopback server. The count is the same from run to run
whatever else the machine does (wall and CPU times here drift by tens of percent with the host), so it
is the figure to compare changes by; reverie's own share is the difference.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from thresholds import load_thresholds

_PY = sys.executable
_FIRST_BYTE_TARGET = float(load_thresholds()["startup"]["max_first_byte_s"])
SDK_REQUEST = """
import asyncio, os, openai

async def main():
    client = openai.AsyncOpenAI(base_url=os.environ["REVERIE_BASE_URL"], api_key="sk-loopback", max_retries=0)
    stream = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hello"}], stream=True
    )
    async for _ in stream:
        pass

asyncio.run(main())
"""
"""The SDK alone sending one streamed request: what a first request costs before any of reverie's
work (the client's transport imports, its TLS context, the platform headers come on top of the bare
import)."""


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONDONTWRITEBYTECODE", "REVERIE_BASE_URL"}}
    env.update(REVERIE_HOME=str(home), REVERIE_WORKTREES=str(home / "worktrees"), **extra)
    return env


def _wall(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def _first_byte(cmd: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """Seconds to the first byte on stdout and to the exit, and the CPU seconds the whole run used."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    proc.stdout.read(1)
    first = time.perf_counter() - start
    proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, cmd
    return first, time.perf_counter() - start, usage.ru_utime + usage.ru_stime


def _cpu_wall(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and the child's CPU seconds (user + system) for a whole run."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, cmd
    return wall, usage.ru_utime + usage.ru_stime


def _proc_cpu(pid: int) -> float:
    """CPU seconds process ``pid``'s live threads have run so far (``schedstat``: nanoseconds, where
    ``stat`` counts 10 ms ticks)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:
            continue
    return total / 1e9


def _first_request(cmd: list[str], env: dict[str, str], arrivals: list[tuple[float, float]], pid: list[int]) -> tuple[float, float]:
    """Seconds from start until the first request arrives, and the CPU the process had used by then."""
    arrivals.clear()
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pid[:] = [proc.pid]
    assert proc.wait() == 0, cmd
    at, cpu = arrivals[0]
    return at - start, cpu


def _top_level_imports(env: dict[str, str], top: int) -> list[tuple[int, str]]:
    proc = subprocess.run(
        [_PY, "-X", "importtime", "-m", "orchestrator", "chat", "-p", "hello"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    rows: list[tuple[int, str]] = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.split(":", 1)[1].split("|")
        depth = (len(name) - len(name.lstrip(" "))) // 2
        if depth <= 1:
            rows.append((int(cumulative), name.strip()))
    return sorted(rows, reverse=True)[:top]


_STOP_AT_CONNECT = """
import os, runpy, socket, sys

def _stop(original):
    def connect(self, address, *rest):
        if isinstance(address, tuple) and address[0] == "127.0.0.1":
            os._exit(0)
        return original(self, address, *rest)
    return connect

socket.socket.connect = _stop(socket.socket.connect)
socket.socket.connect_ex = _stop(socket.socket.connect_ex)
if sys.argv[1] == "-c":
    code, sys.argv = sys.argv[2], ["-c", *sys.argv[3:]]
    exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})
else:
    sys.argv = ["orchestrator", *sys.argv[2:]]
    runpy.run_module("orchestrator", run_name="__main__", alter_sys=True)
"""
"""Runs ``-c CODE`` or ``-m orchestrator ARGS`` and exits at the first connect to 127.0.0.1: the
moment the first request is about to go out."""


def _instructions(args: list[str], env: dict[str, str]) -> int:
    """Instructions callgrind counts for ``python -c _STOP_AT_CONNECT *args``."""
    proc = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", _PY, "-c", _STOP_AT_CONNECT, *args],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    for line in proc.stderr.splitlines():
        if "Collected :" in line:
            return int(line.rsplit(":", 1)[1].strip())
    raise RuntimeError(f"no instruction count from valgrind: {proc.stderr[-500:]}")


def _count_instructions() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from orchestrator.testing.openai_server import LoopbackOpenAI, text_reply

    with tempfile.TemporaryDirectory() as tmp, LoopbackOpenAI(fallback=lambda _body: text_reply("hi")) as server:
        home = Path(tmp) / "home"
        home.mkdir()
        env = _env(home, REVERIE_BASE_URL=server.base_url, REVERIE_MODEL="loopback-model", OPENAI_API_KEY="sk-loopback")
        _wall([_PY, "-m", "orchestrator", "chat", "-p", "warm up", "-a", "real"], env)
        sdk = _instructions(["-c", SDK_REQUEST], env)
        chat = _instructions(["-m", "chat", "-p", "hello", "-a", "real"], env)
    print(f"{'up to the first request':36} {'instructions':>14}")
    print(f"{'SDK alone':36} {sdk:14,}")
    print(f"{'chat -p (server)':36} {chat:14,}")
    print(f"{'reverie own':36} {chat - sdk:14,}")
    print(f"\nreverie's own work before the first request: {(chat - sdk) / sdk:.1%} of what the SDK spends on its own first request")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--real-only", action="store_true", help="only the real path's probes")
    parser.add_argument("--instructions", action="store_true", help="count instructions up to the first request (valgrind)")
    parser.add_argument("--json", type=Path, default=None, help="also write the probes' medians here (bench/check.py)")
    args = parser.parse_args()
    if args.instructions:
        _count_instructions()
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from orchestrator.testing.openai_server import LoopbackOpenAI, text_reply

    arrivals: list[tuple[float, float]] = []
    pid: list[int] = []

    def respond(body: Any) -> Any:
        at = time.perf_counter()
        arrivals.append((at, _proc_cpu(pid[0]) if pid else float("nan")))
        return text_reply("(loopback) hi")

    reverie = [_PY, "-m", "orchestrator"]
    with tempfile.TemporaryDirectory() as tmp, LoopbackOpenAI(fallback=respond) as server:
        home = Path(tmp) / "home"
        home.mkdir()
        env = _env(home)
        real_env = _env(home, REVERIE_BASE_URL=server.base_url, REVERIE_MODEL="loopback-model", OPENAI_API_KEY="sk-loopback")
        asyncio_env = _env(home, REVERIE_BACKEND="asyncio")
        _wall([*reverie, "chat", "-p", "warm up"], env)
        _wall([*reverie, "chat", "-p", "warm up", "-a", "real"], real_env)
        samples: dict[str, list[float]] = {
            k: []
            for k in (
                "python -c pass",
                'python -c "import openai"',
                "reverie --version",
                "reverie --help",
                "chat -p: reply's first byte",
                "chat -p: exit",
                "chat -p on asyncio: first byte",
                "SDK alone: first request",
                "chat -p (server): first request",
                "reverie's own before the request",
            )
        }
        cpu: dict[str, list[float]] = {
            "import openai": [],
            "SDK alone at the request": [],
            "chat -p (server) at the request": [],
            "own": [],
            "own vs SDK alone": [],
        }
        beyond_sdk: list[float] = []
        # CPU of a probe over CPU of a fixed reference process run beside it (paired, then the
        # median): what bench/check.py judges, since a busy or slowed machine scales both alike
        ratios: dict[str, list[float]] = {
            "--version CPU / python -c pass CPU": [],
            "chat -p CPU / import openai CPU": [],
            "own CPU before the request / import openai CPU": [],
        }
        for _ in range(args.repeats):
            bare_wall, bare_cpu = _cpu_wall([_PY, "-c", "pass"], env)
            samples["python -c pass"].append(bare_wall)
            sdk_wall, sdk_cpu = _cpu_wall([_PY, "-c", "import openai"], env)
            samples['python -c "import openai"'].append(sdk_wall)
            cpu["import openai"].append(sdk_cpu)
            if not args.real_only:
                version_wall, version_cpu = _cpu_wall([*reverie, "--version"], env)
                samples["reverie --version"].append(version_wall)
                ratios["--version CPU / python -c pass CPU"].append(version_cpu / bare_cpu)
                samples["reverie --help"].append(_wall([*reverie, "--help"], env))
                first, done, chat_cpu = _first_byte([*reverie, "chat", "-p", "hello"], env)
                samples["chat -p: reply's first byte"].append(first)
                samples["chat -p: exit"].append(done)
                ratios["chat -p CPU / import openai CPU"].append(chat_cpu / sdk_cpu)
                samples["chat -p on asyncio: first byte"].append(_first_byte([*reverie, "chat", "-p", "hello"], asyncio_env)[0])
            alone_wall, alone_cpu = _first_request([_PY, "-c", SDK_REQUEST], real_env, arrivals, pid)
            samples["SDK alone: first request"].append(alone_wall)
            cpu["SDK alone at the request"].append(alone_cpu)
            request_wall, request_cpu = _first_request([*reverie, "chat", "-p", "hello", "-a", "real"], real_env, arrivals, pid)
            samples["chat -p (server): first request"].append(request_wall)
            samples["reverie's own before the request"].append(request_wall - sdk_wall)
            beyond_sdk.append(request_wall - alone_wall)
            cpu["chat -p (server) at the request"].append(request_cpu)
            cpu["own"].append(request_cpu - sdk_cpu)
            ratios["own CPU before the request / import openai CPU"].append((request_cpu - sdk_cpu) / sdk_cpu)
            cpu["own vs SDK alone"].append(request_cpu - alone_cpu)
        top = [] if args.real_only else _top_level_imports(env, 12)

    base = statistics.median(samples["python -c pass"])
    sdk = statistics.median(samples['python -c "import openai"'])
    print(f"{'probe':36} {'median s':>9} {'min s':>8} {'x python -c pass':>17}")
    for name, values in samples.items():
        if values:
            med = statistics.median(values)
            print(f"{name:36} {med:9.3f} {min(values):8.3f} {med / base:17.1f}")
    first_request = statistics.median(samples["chat -p (server): first request"])
    print()
    if not args.real_only:
        version = statistics.median(samples["reverie --version"])
        firsts = samples["chat -p: reply's first byte"]
        answer = statistics.median(firsts)
        print(f"--version / python -c pass = {version / base:.2f} (target <= 3)")
        verdict = "met" if answer <= _FIRST_BYTE_TARGET else "MISSED"
        print(
            f"chat -p first byte: median {answer:.3f} s, best {min(firsts):.3f} s over {len(firsts)} runs; "
            f"median / target = {answer / _FIRST_BYTE_TARGET:.2f} (target <= {_FIRST_BYTE_TARGET:.3f} s: {verdict})"
        )
    own = statistics.median(samples["reverie's own before the request"])
    print(
        f"first request after {first_request:.3f} s; the SDK import alone takes {sdk:.3f} s: "
        f"reverie's own time before the first request {own:.3f} s (median of paired differences; "
        f"{first_request / sdk:.2f}x the SDK import)"
    )
    sdk_cpu = statistics.median(cpu["import openai"])
    request_cpu = statistics.median(cpu["chat -p (server) at the request"])
    own_cpu = statistics.median(cpu["own"])
    print(
        f"CPU used by the first request {request_cpu:.3f} s, by the whole bare SDK import {sdk_cpu:.3f} s: "
        f"reverie's own CPU before the first request {own_cpu:.3f} s (median of paired differences)"
    )
    print("CPU against a reference process run beside each probe (medians of paired ratios; bench/check.py's marks):")
    for name, values in ratios.items():
        if values:
            print(f"  {name:48} {statistics.median(values):7.3f}")
    alone = statistics.median(samples["SDK alone: first request"])
    alone_cpu = statistics.median(cpu["SDK alone at the request"])
    print(
        f"against the SDK sending its own first request ({alone:.3f} s, {alone_cpu:.3f} s CPU): reverie adds "
        f"{statistics.median(beyond_sdk):.3f} s, {statistics.median(cpu['own vs SDK alone']):.3f} s CPU "
        "(medians of paired differences)"
    )
    if args.json is not None:
        medians = {name: statistics.median(values) for name, values in samples.items() if values}
        medians["own CPU before the request"] = own_cpu
        medians.update({name: statistics.median(values) for name, values in ratios.items() if values})
        args.json.write_text(json.dumps(medians, indent=1))
    if top:
        print("\nheaviest imports of `chat -p` (python -X importtime, cumulative, top levels):")
    for micros, name in top:
        print(f"  {micros / 1000:8.1f} ms  {name}")


if __name__ == "__main__":
    main()
