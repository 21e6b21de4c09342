"""Start-up cost of the ``reverie`` command (issue 14.4), against ``python -c pass``.

Each probe is a fresh process, run ``--repeats`` times with the probes interleaved (so machine load
hits them alike); the table shows medians and the ratio to ``python -c pass``:

* ``--version`` must stay within 3x ``python -c pass`` (it imports nothing of reverie);
* ``chat -p`` on the embedded model: time until the reply's first byte reaches stdout (target
  0.3 s, median; the best run and the ratio to the target are printed too) and until the process
  exits (subagent waits and teardown included); the same on ``REVERIE_BACKEND=asyncio``, reported
  only, since trio (the default, DECISIONS S11) is about 50 ms of the budget on its own;
* ``chat -p`` against the loopback OpenAI-compatible server: time until the first request arrives,
  next to ``python -c "import openai"`` (the SDK import is the one thing allowed before it).

Bytecode caches are allowed (``PYTHONDONTWRITEBYTECODE`` is dropped for the children, and one
warm-up run writes them), as on a user's machine. Then ``python -X importtime`` of ``chat -p`` lists
the heaviest modules it imports.

    .venv/bin/python bench/startup.py [--repeats 21]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_PY = sys.executable
_FIRST_BYTE_TARGET = 0.3


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONDONTWRITEBYTECODE", "REVERIE_BASE_URL"}}
    env.update(REVERIE_HOME=str(home), REVERIE_WORKTREES=str(home / "worktrees"), **extra)
    return env


def _wall(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def _first_byte(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Seconds to the first byte on stdout, and to the exit."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    proc.stdout.read(1)
    first = time.perf_counter() - start
    proc.stdout.read()
    proc.wait()
    return first, time.perf_counter() - start


def _first_request(cmd: list[str], env: dict[str, str], arrivals: list[float]) -> float:
    arrivals.clear()
    start = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return arrivals[0] - start


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from orchestrator.testing.openai_server import LoopbackOpenAI, text_reply

    arrivals: list[float] = []

    def respond(body: Any) -> Any:
        arrivals.append(time.perf_counter())
        return text_reply("(loopback) hi")

    reverie = [_PY, "-m", "orchestrator"]
    with tempfile.TemporaryDirectory() as tmp, LoopbackOpenAI(fallback=respond) as server:
        home = Path(tmp) / "home"
        home.mkdir()
        env = _env(home)
        real_env = _env(home, REVERIE_BASE_URL=server.base_url, OPENAI_API_KEY="sk-loopback")
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
                "chat -p (server): first request",
            )
        }
        for _ in range(args.repeats):
            samples["python -c pass"].append(_wall([_PY, "-c", "pass"], env))
            samples['python -c "import openai"'].append(_wall([_PY, "-c", "import openai"], env))
            samples["reverie --version"].append(_wall([*reverie, "--version"], env))
            samples["reverie --help"].append(_wall([*reverie, "--help"], env))
            first, done = _first_byte([*reverie, "chat", "-p", "hello"], env)
            samples["chat -p: reply's first byte"].append(first)
            samples["chat -p: exit"].append(done)
            samples["chat -p on asyncio: first byte"].append(_first_byte([*reverie, "chat", "-p", "hello"], asyncio_env)[0])
            samples["chat -p (server): first request"].append(
                _first_request([*reverie, "chat", "-p", "hello", "-a", "real"], real_env, arrivals)
            )
        top = _top_level_imports(env, 12)

    base = statistics.median(samples["python -c pass"])
    sdk = statistics.median(samples['python -c "import openai"'])
    print(f"{'probe':36} {'median s':>9} {'min s':>8} {'x python -c pass':>17}")
    for name, values in samples.items():
        med = statistics.median(values)
        print(f"{name:36} {med:9.3f} {min(values):8.3f} {med / base:17.1f}")
    version = statistics.median(samples["reverie --version"])
    firsts = samples["chat -p: reply's first byte"]
    answer = statistics.median(firsts)
    first_request = statistics.median(samples["chat -p (server): first request"])
    print()
    print(f"--version / python -c pass = {version / base:.2f} (target <= 3)")
    verdict = "met" if answer <= _FIRST_BYTE_TARGET else "MISSED"
    print(
        f"chat -p first byte: median {answer:.3f} s, best {min(firsts):.3f} s over {len(firsts)} runs; "
        f"median / target = {answer / _FIRST_BYTE_TARGET:.2f} (target <= {_FIRST_BYTE_TARGET:.3f} s: {verdict})"
    )
    print(
        f"first request after {first_request:.3f} s; the SDK import alone takes {sdk:.3f} s: "
        f"{first_request - sdk:.3f} s go to reverie itself ({first_request / sdk:.2f}x the SDK import)"
    )
    print("\nheaviest imports of `chat -p` (python -X importtime, cumulative, top levels):")
    for micros, name in top:
        print(f"  {micros / 1000:8.1f} ms  {name}")


if __name__ == "__main__":
    main()
