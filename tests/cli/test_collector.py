"""The console script pauses the cyclic collector for a command's start-up and a headless chat
resumes it once the model has answered, with start-up's heap frozen out of later collections
(``cli/collector.py``); a caller of ``main()`` keeps its own collector setting."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.cli import collector

_CONSOLE_SCRIPT = textwrap.dedent(
    """
    import atexit, gc, json, os, sys
    from orchestrator.testing.openai_server import LoopbackOpenAI, text_reply

    seen = []

    def answer(_body):
        seen.append(gc.isenabled())
        return text_reply("hello back")

    server = LoopbackOpenAI(fallback=answer).__enter__()
    os.environ.update(REVERIE_BASE_URL=server.base_url, REVERIE_MODEL="loopback-model", OPENAI_API_KEY="sk-test")

    def report():
        print(json.dumps({"requests": seen, "after": gc.isenabled(), "frozen": gc.get_freeze_count()}), file=sys.stderr)

    atexit.register(report)
    sys.argv = ["reverie", *sys.argv[1:]]
    from orchestrator.cli.app import entry

    entry()
    """
)


def _run(home: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
    done = subprocess.run(
        [sys.executable, "-c", _CONSOLE_SCRIPT, *args],
        capture_output=True, text=True, timeout=120, env=dict(os.environ, REVERIE_HOME=str(home)),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done, json.loads(done.stderr.strip().splitlines()[-1])


@pytest.mark.parametrize("fmt", ["text", "json", "stream-json"])
def test_a_headless_chat_collects_again_once_the_model_has_answered(tmp_path: Path, fmt: str) -> None:
    done, seen = _run(tmp_path, "chat", "-p", "hi", "--output-format", fmt)
    assert "hello back" in done.stdout
    assert seen["requests"] == [False], "the first request is sent with the collector paused"
    assert seen["after"] is True, "collection resumes once the model has answered"
    assert isinstance(seen["frozen"], int) and seen["frozen"] > 10_000, "start-up's heap is frozen out of collection"


def test_a_command_without_a_model_collects_again_before_its_work(tmp_path: Path) -> None:
    _done, seen = _run(tmp_path, "agents")
    assert seen["requests"] == []
    assert seen["after"] is True


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.disable()
    yield
    gc.enable()
    gc.unfreeze()


def test_resume_leaves_a_collector_it_did_not_pause_as_it_was(collector_off: None) -> None:
    collector.resume()
    assert not gc.isenabled(), "a caller that turned collection off itself keeps it off"
    gc.enable()
    collector.pause()
    assert not gc.isenabled()
    collector.resume()
    assert gc.isenabled()
    collector.resume()
    assert gc.isenabled()
