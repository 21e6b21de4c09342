"""The import budget of ``reverie chat -p`` (issue 14.4), as a property of ``sys.modules`` at the
moment that matters, not as a timing: on the embedded model, when the reply's first byte is written;
on the real path, while the first request is at the (loopback) server. Both after a first chat has
created the agent (its memory repository's first commits and compile are a one-time cost, with
their own needs), as on every later start. What another command needs
(typer's help, the batch runner, stress, plotting) or what only a later step needs (tenacity's
retries, ICU's collation of a compile, the SDK on the embedded model) must not be imported by then.

On the real path the budget is closed: beyond what the SDK imports to send a request on its own
(measured here, in a fresh interpreter against the same server), only the packages named in
``_TURN_NEEDS`` may be loaded when reverie's first request arrives, so anything new on that path
fails until someone decides it belongs there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from orchestrator.testing.openai_server import LoopbackOpenAI, text_reply

_ELSEWHERE = (
    "typer",
    "click",
    "rich",
    "matplotlib",
    "icu",
    "orchestrator.batch",
    "orchestrator.cli.batch",
    "orchestrator.cli.memory",
    "orchestrator.cli.stress",
    "orchestrator.app.stress",
)
"""Needed by other commands or later steps, never before chat's first byte or request."""
_EMBEDDED_ONLY = ("openai", "httpx", "pydantic", "tenacity")
"""The SDK and its retries: the embedded model makes no request."""
_REAL_PATH_NEVER = ("orchestrator.models.scripted", "orchestrator.models.scripted_resolve")
"""The embedded model, which a configured endpoint does not use."""
_AFTER_A_FAILURE = ("tenacity",)
"""The retry loop: the first attempt is made without it, and only a transient failure imports it."""
_AFTER_THE_REPLY = (
    "orchestrator.agent.memory_sync",
    "orchestrator.agent.audit",
    "orchestrator.memfs.compiler",
    "orchestrator.memfs.locks",
    "orchestrator.memfs.validator",
    "orchestrator.memfs.merge",
    "orchestrator.memfs.worktrees",
    "orchestrator.memfs.recovery",
    "orchestrator.memfs.resolution",
    "orchestrator.compaction.ladder",
    "orchestrator.tools.bash",
    "orchestrator.tools.sandbox",
    "subagents.reflection_merge",
    "subagents.reflection_reader",
    "subagents.resolver",
    "subagents.triggers",
    "orchestrator.base.subagent_events",
)
"""What only the post-turn sync, a tool call, a compaction, a reflection (its trigger policy at the
turn's end, its reader, the subagents' events) or a compile uses (a warm start's prompt is cached
for HEAD). libgit2 is not among them: it is the one in-process reader of memory repositories
(``memfs.git``), so the first request's HEAD, skills and hook location are read through it."""
_TURN_NEEDS = frozenset(
    {
        "orchestrator",
        "subagents",
        "prompts",
        "pygit2",  # the one in-process reader of memory repositories (memfs.git)
        "_cffi_backend",  # pygit2's binding
        "tarfile",  # pygit2 imports it (archives), and it pwd and grp
        "pwd",
        "grp",
        "sqlite3",
        "_sqlite3",
        "tomllib",  # config.toml, when one exists
        "shlex",  # the pre-commit hook's command line
        "stringprep",  # trio's getaddrinfo encodes the host name as IDNA
    }
)
"""Top-level packages reverie's turn needs before its first request, beyond the SDK's own."""

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


_SDK_ALONE = """
import asyncio, json, os, signal, sys

def dump(*_):
    with open(os.environ["SNAPSHOT"] + ".part", "w") as f:
        json.dump(sorted(sys.modules), f)
    os.replace(os.environ["SNAPSHOT"] + ".part", os.environ["SNAPSHOT"])

signal.signal(signal.SIGUSR1, dump)
import openai

async def main():
    client = openai.AsyncOpenAI(base_url=os.environ["REVERIE_BASE_URL"], api_key="sk-test", max_retries=0)
    stream = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
    async for _ in stream:
        pass

asyncio.run(main())
"""
"""The SDK sending one streamed request by itself, snapshotting ``sys.modules`` like ``_AT_REQUEST``."""


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
    assert _heavy(modules, _ELSEWHERE + _EMBEDDED_ONLY + _AFTER_THE_REPLY) == set()


def _modules_at_first_request(script: str, args: list[str], tmp_path: Path, name: str, *, warm_up: bool) -> list[str]:
    """``sys.modules`` of ``python -c script *args`` while its first request is at the loopback server."""
    snapshot = tmp_path / f"{name}.json"
    child: dict[str, subprocess.Popen[str]] = {}

    def respond(body: Any) -> Any:
        if "proc" in child and not snapshot.exists():
            child["proc"].send_signal(signal.SIGUSR1)
            deadline = time.monotonic() + 30
            while not snapshot.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        return text_reply("(loopback) hi")

    with LoopbackOpenAI(fallback=respond) as server:
        env = _env(tmp_path, REVERIE_BASE_URL=server.base_url, OPENAI_API_KEY="sk-test", SNAPSHOT=str(snapshot))
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


def test_first_request_waits_for_nothing_but_the_sdk_and_the_session(tmp_path: Path) -> None:
    modules = _modules_at_first_request(_AT_REQUEST, ["chat", "-p", "hello"], tmp_path, "reverie", warm_up=True)
    assert "openai" in modules and "orchestrator.app.session" in modules
    assert _heavy(modules, _ELSEWHERE + _REAL_PATH_NEVER + _AFTER_THE_REPLY + _AFTER_A_FAILURE) == set()


def test_first_request_loads_only_the_sdks_own_needs_and_the_turns(tmp_path: Path) -> None:
    reverie = _modules_at_first_request(_AT_REQUEST, ["chat", "-p", "hello"], tmp_path, "reverie", warm_up=True)
    sdk = _modules_at_first_request(_SDK_ALONE, [], tmp_path, "sdk", warm_up=False)
    assert "openai" in sdk and "orchestrator" not in {m.split(".")[0] for m in sdk}
    beyond = {m.split(".")[0] for m in reverie} - {m.split(".")[0] for m in sdk}
    assert beyond - _TURN_NEEDS == set(), "imported before the first request, not needed by the SDK or the turn"
    assert {"orchestrator", "sqlite3"} <= beyond
