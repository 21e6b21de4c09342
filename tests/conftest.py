"""Shared fixtures: an isolated reverie home, a clean git environment, and a guard that fails any
blocking call made on the event loop thread while a test's async code runs."""

from __future__ import annotations

import builtins
import contextlib
import os
import platform
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import sniffio

# anyio loads some submodules on first use; load them now so that first use inside a test does not
# read files on the event loop.
_ = (anyio.run_process, anyio.open_process, anyio.Path, anyio.open_file, anyio.to_thread.run_sync)
# The OpenAI SDK reads /etc/os-release for its platform header at a process's first request, in a
# thread that inherits the test's async context (so the guard below takes it for the loop). Which
# test is first differs from worker to worker of the parallel run: read it (cached) here instead.
with contextlib.suppress(OSError):
    platform.platform()
    platform.freedesktop_os_release()
_ASYNC_RUNTIMES = ("asyncio", "trio", "anyio")

SHARED = Path(__file__).resolve().parents[2] / "shared"


@pytest.fixture(params=["trio", "asyncio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Backend-neutral tests run on both backends (S25)."""
    return str(request.param)


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private ``REVERIE_HOME`` and a git that reads no user or system configuration."""
    home = tmp_path / "reverie-home"
    home.mkdir()
    fake_user_home = tmp_path / "user-home"
    fake_user_home.mkdir()
    monkeypatch.setenv("REVERIE_HOME", str(home))
    monkeypatch.setenv("REVERIE_WORKTREES", str(home / "worktrees"))
    monkeypatch.setenv("HOME", str(fake_user_home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    for name, value in {
        "GIT_AUTHOR_NAME": "reverie-test",
        "GIT_AUTHOR_EMAIL": "test@reverie.invalid",
        "GIT_COMMITTER_NAME": "reverie-test",
        "GIT_COMMITTER_EMAIL": "test@reverie.invalid",
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("REVERIE_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "REVERIE_MODEL", "REVERIE_FAULT"):
        monkeypatch.delenv(name, raising=False)
    yield home


class BlockingCallOnEventLoop(AssertionError):
    pass


def _on_event_loop() -> bool:
    try:
        sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        return False
    return True


def _called_by_async_runtime() -> bool:
    """asyncio starts subprocesses (for ``anyio.run_process``) from the loop thread by design: allow
    a call whose nearest caller outside ``subprocess`` is the async runtime itself."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__") == "subprocess":
        frame = frame.f_back
    module = str(frame.f_globals.get("__name__", "")) if frame is not None else ""
    return module.split(".", 1)[0] in _ASYNC_RUNTIMES


def _guard(name: str, original: Any) -> Any:
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if _on_event_loop() and not _called_by_async_runtime():
            raise BlockingCallOnEventLoop(f"blocking call {name} made on the event loop thread")
        return original(*args, **kwargs)

    return guarded


@pytest.fixture(autouse=True)
def no_blocking_on_loop(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail a test whose async code blocks the loop with a subprocess, a sleep, a file or SQLite.

    Mark a test ``@pytest.mark.allow_blocking`` only where blocking is the point of the test.
    """
    if request.node.get_closest_marker("allow_blocking"):
        return
    original_popen_init = subprocess.Popen.__init__
    monkeypatch.setattr(subprocess.Popen, "__init__", _guard("subprocess.Popen", original_popen_init))
    monkeypatch.setattr(time, "sleep", _guard("time.sleep", time.sleep))
    monkeypatch.setattr(builtins, "open", _guard("open", builtins.open))
    monkeypatch.setattr(sqlite3, "connect", _guard("sqlite3.connect", sqlite3.connect))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "allow_blocking: the test blocks the event loop on purpose")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``make unit``'s parallel run (pytest-xdist, ``--dist loadgroup``), a module whose tests
    share a module-scoped fixture (a Chromium, a reverie story, an import graph) runs on one worker,
    so what is expensive to start starts once. Tests that name their own group keep it (the Ray
    modules share ``ray``: one local Ray at a time on two cores). Harmless without xdist."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info is not None else ()
        if any(chain[-1].scope in ("module", "package", "class") for chain in defs if chain):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
