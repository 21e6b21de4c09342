"""What ``reverie chat -p`` must not import before it answers (P1, P5): a deny-list of
modules known to be heavy to import, checked in ``sys.modules`` at the moment that matters, not as
a timing: on the embedded model, when the reply's first byte is written; on the real path, while
the first request is at the (loopback) server. Both after a first chat has created the agent, as
on every later start.

Only heavy modules are named: what a module costs to import is measured in ``bench/startup.py``
(``python -X importtime``), and a module that is cheap to import may move to the top of the file
that uses it. An exact list of everything allowed (this test before P5) pinned every
import in place and pushed a hundred of them into functions for gains under a millisecond.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from orchestrator.testing.openai_server import LoopbackOpenAI, text_reply
from tests.support import wait_until

_HEAVY = (
    "typer",  # with click and rich: the full command line, ~100 ms; chat -p parses its own arguments
    "click",
    "rich",
    "ray",
    "playwright",
    "icu",  # PyICU, for a compile's collation only
    "orchestrator.batch",  # the batch runner and its report
)
"""Never imported by a chat before its first byte or request."""
_SDK = ("openai", "httpx", "pydantic")
"""The SDK (about a second to import): the embedded model makes no request."""

_FIRST_BYTE = """
import json, sys

class _FirstWrite:
    def __init__(self, inner):
        self.inner, self.modules = inner, None
    def write(self, text):
        if self.modules is None and text:
            self.modules = sorted(sys.modules)
        return self.inner.write(text)
    def __getattr__(self, name):
        return getattr(self.inner, name)

out = sys.stdout = _FirstWrite(sys.stdout)
from orchestrator.cli.app import main
try:
    main(sys.argv[1:])
finally:
    sys.stderr.write("MODULES " + json.dumps(out.modules) + "\\n")
"""

_AT_REQUEST = """
import json, os, signal, sys

def dump(*_):
    with open(os.environ["SNAPSHOT"] + ".part", "w") as f:
        json.dump(sorted(sys.modules), f)
    os.replace(os.environ["SNAPSHOT"] + ".part", os.environ["SNAPSHOT"])

signal.signal(signal.SIGUSR1, dump)
from orchestrator.cli.app import main
main(sys.argv[1:])
"""


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"REVERIE_BASE_URL", "OPENAI_API_KEY"}}
    env.update(REVERIE_HOME=str(home), **extra)
    return env


def _warm_up(env: dict[str, str]) -> None:
    """The agent, its memory repository and the conversation's compiled prompt exist afterwards."""
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "chat", "-p", "warm up"], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def _heavy(modules: list[str], names: tuple[str, ...]) -> set[str]:
    return {m for m in modules if any(m == n or m.startswith(n + ".") for n in names)}


def test_embedded_chat_writes_its_first_byte_before_importing_what_it_does_not_need(tmp_path: Path) -> None:
    _warm_up(_env(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-c", _FIRST_BYTE, "chat", "-p", "hello"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "I heard: hello" in proc.stdout
    line = next(x for x in proc.stderr.splitlines() if x.startswith("MODULES "))
    modules = json.loads(line.removeprefix("MODULES "))
    assert modules, "nothing was written to stdout"
    assert "orchestrator.app.session" in modules
    assert _heavy(modules, _HEAVY + _SDK) == set()


def _modules_at_first_request(script: str, args: list[str], tmp_path: Path, name: str, *, warm_up: bool) -> list[str]:
    """``sys.modules`` of ``python -c script *args`` while its first request is at the loopback server."""
    snapshot = tmp_path / f"{name}.json"
    child: dict[str, subprocess.Popen[str]] = {}

    def respond(body: Any) -> Any:
        if "proc" in child and not snapshot.exists():
            child["proc"].send_signal(signal.SIGUSR1)
            wait_until(snapshot.exists, timeout=60, what="the child's sys.modules snapshot")
        return text_reply("(loopback) hi")

    with LoopbackOpenAI(fallback=respond) as server:
        env = _env(tmp_path, REVERIE_BASE_URL=server.base_url, REVERIE_MODEL="loopback-model", OPENAI_API_KEY="sk-test", SNAPSHOT=str(snapshot))
        if warm_up:
            _warm_up(env)
        child["proc"] = subprocess.Popen(
            [sys.executable, "-c", script, *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        out, err = child["proc"].communicate(timeout=120)
    assert child["proc"].returncode == 0, err[-2000:]
    if warm_up:
        assert "(loopback) hi" in out
    modules: list[str] = json.loads(snapshot.read_text())
    return modules


def test_first_request_waits_for_no_heavy_module_but_the_sdk(tmp_path: Path) -> None:
    modules = _modules_at_first_request(_AT_REQUEST, ["chat", "-p", "hello"], tmp_path, "reverie", warm_up=True)
    assert "openai" in modules and "orchestrator.app.session" in modules
    assert _heavy(modules, _HEAVY) == set()
