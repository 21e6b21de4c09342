"""Real-model tests: a llama.cpp server with SmolLM2-135M, started once per session.

``real_model`` tests are deselected unless ``-m`` names the marker (``make test-real-model``), so
the default suite neither needs llama-cpp-python nor spends minutes on a real model.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from orchestrator.testing.llama_server import LlamaServer, LlamaServerError, llama_server

_MARK = "real_model"
_started: list[LlamaServer] = []
_PROMPT_CACHE = 512 << 20
"""About ten saved prompt states of a 2,048-token context (some 45 MB each)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _MARK in (config.getoption("markexpr", default="") or ""):
        return
    deselected = [item for item in items if item.get_closest_marker(_MARK) is not None]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item.get_closest_marker(_MARK) is None]


@pytest.fixture(scope="session")
def llama() -> Iterator[LlamaServer]:
    """One server for the whole session; a missing install fails with the command that fixes it.

    A thread per core, and a prompt cache: the benchmark smoke alternates compaction and reflection
    requests whose long system prompts the cache evaluates once each (docs/testing.md)."""
    try:
        with llama_server(n_ctx=2048, n_threads=os.cpu_count() or 2, prompt_cache=_PROMPT_CACHE) as server:
            _started.append(server)
            yield server
    except LlamaServerError as exc:
        pytest.fail(str(exc), pytrace=False)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for server in _started:
        terminalreporter.write_line(
            f"llama.cpp server: model {server.model_id!r} at {server.base_url}, "
            f"ready in {server.startup_seconds:.1f} s (log: {server.log_path})"
        )
