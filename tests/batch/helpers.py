"""A small suite shared by the batch tests: a rule edit, a fact, plain chat and a failing check."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from orchestrator.testing.openai_server import Planned

TINY: list[dict[str, Any]] = [
    {"id": "rule", "turns": ["remember: always end answers with ~fin", "hello"],
     "checks": [{"contains": "hello ~fin"}, {"where": "memory", "file": "persona.md", "contains": "~fin"}]},
    {"id": "fact", "turns": ["remember: I live in Lisbon", "ok"],
     "checks": [{"where": "memory", "file": "human.md", "contains": "Lisbon"}]},
    {"id": "chat", "turns": ["just chatting"], "settings": {"reflection_trigger": "off"},
     "checks": [{"regex": "^\\(mock\\) I heard: just chatting$"}]},
    {"id": "seeded", "turns": ["hi"], "template": {"files": {"persona.md": "---\nname: persona\ndescription: rules\n---\n- always end answers with [t]\n"}},
     "checks": [{"contains": "hi [t]"}]},
    {"id": "wrong", "turns": ["hello"], "checks": [{"contains": "never said"}]},
]


def write_suite(path: Path, tasks: list[dict[str, Any]] | None = None) -> Path:
    path.write_text("".join(json.dumps(t) + "\n" for t in (tasks or TINY)), encoding="utf-8")
    return path


EXPECTED = {"rule": "passed", "fact": "passed", "chat": "passed", "seeded": "passed", "wrong": "failed"}


LAUNCH_CLI = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
import typer
from orchestrator.cli.batch import register
app = typer.Typer()
register(app)
app(sys.argv[1:])
"""
"""``python -c LAUNCH_CLI run ...``: the batch commands in a child that turns SIGINT into
KeyboardInterrupt as a terminal's Ctrl-C does (a child started from Python may inherit it ignored)."""


HOLD_SECONDS = 240
"""A held call gives up waiting for its release after this long (a failed test must not hang)."""


class HoldingModel:
    """The loopback model: the first call of each ``slow`` prompt is held until ``release``, and
    ``arrived[prompt]`` says it came in (the task is on its node, mid-turn)."""

    def __init__(self, prompts: list[str]) -> None:
        self.arrived = {p: threading.Event() for p in prompts}
        self.release = threading.Event()
        self.calls: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, body: Any) -> Planned:
        text = next(m["content"] for m in reversed(body["messages"]) if m.get("role") == "user")
        with self._lock:
            self.calls[text] = self.calls.get(text, 0) + 1
            first = self.calls[text] == 1
        if text in self.arrived and first:
            self.arrived[text].set()
            self.release.wait(HOLD_SECONDS)
        return Planned(text=f"(loopback) {text}")


def two_sessions_an_hour_apart(task_id: str = "gap", **settings: Any) -> dict[str, Any]:
    """A task whose history is two recorded sessions, dated an hour apart, then one question."""
    def session(date: str, user: str, assistant: str) -> dict[str, Any]:
        return {"date": date, "messages": [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]}

    return {
        "id": task_id,
        "history": [
            session("2023-05-20T10:00:00Z", "my name is Ada Lovelace", "Nice to meet you, Ada."),
            session("2023-05-20T11:00:00Z", "what a nice day it is", "It is."),
        ],
        "turns": ["what is my name?"],
        "checks": [{"regex": "."}],
        **({"settings": settings} if settings else {}),
    }


def limited_sweep(out: Path) -> Any:
    """A two-setting sweep on the scripted model where both settings reflect after every step but
    only ``tight``'s reflections have a budget too small for them (one model call: the scripted
    reflection commits in its first and reports in its second); returns the ``SweepReport``."""
    # lazy: only the sweep tests that count limit stops need the runner
    import anyio

    from orchestrator.batch.executors import LocalExecutor
    from orchestrator.batch.runner import RunOptions
    from orchestrator.batch.suite import load_suite
    from orchestrator.batch.sweep import SweepSetting, run_sweep

    suite = write_suite(out.parent / "limited.jsonl", [
        {"id": "fact", "turns": ["remember: I live in Lisbon", "ok"], "checks": [{"contains": "ok"}]},
        {"id": "rule", "turns": ["remember: always end answers with ~fin", "hello"], "checks": [{"contains": "hello"}]},
    ])
    every_step = {"reflection_trigger": "step-count", "reflection_step_count": 1}
    settings = [SweepSetting("tight", {**every_step, "limit_reflection_calls": 1}), SweepSetting("roomy", every_step)]
    return anyio.run(
        lambda: run_sweep(load_suite(suite), settings, RunOptions(out_dir=out), lambda: LocalExecutor(1)),
        backend="trio",
    )
