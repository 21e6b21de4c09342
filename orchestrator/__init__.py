"""reverie: an async multi-agent orchestrator whose agents keep their memory in git.

This module is the library's face (docs/api.md): ``open_session`` for a chat, ``run_suite``,
``sweep``, ``stress`` and ``report`` for batch work, ``Settings`` and ``Home`` for configuration and
places; the command line is a thin layer over the same functions. Names load on first use (PEP 562),
so ``import orchestrator.memfs`` (the pre-commit hook) does not load the chat and batch machinery.

Layers, lowest first: ``base`` (values) -> the I/O seams ``memfs``, ``store``, ``models``, ``tools``
-> ``compaction`` -> ``agent`` (one turn) -> ``runtime`` (process, supervisor) -> the top-level
``subagents`` package (plugins) -> the composition root ``app``, ``cli`` and ``batch``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.api import (
        Change,
        CompactionResult,
        ContextUse,
        Decision,
        ReflectionRecord,
        ReflectionReview,
        Session,
        TurnOutcome,
        UndoOutcome,
        Usage,
        load_effective_settings,
        memory_log,
        open_session,
        report,
        restore,
        run_suite,
        stress,
        sweep,
        undo,
    )
    from orchestrator.app.stress_report import StressReport
    from orchestrator.base.config import ConfigError, Settings
    from orchestrator.base.errors import ReverieError
    from orchestrator.base.events import Event
    from orchestrator.base.paths import Home
    from orchestrator.batch.run import RunReport
    from orchestrator.batch.rundir import RunDirBusy
    from orchestrator.batch.sweep import SweepReport

__all__ = [
    "Change",
    "CompactionResult",
    "ConfigError",
    "ContextUse",
    "Decision",
    "Event",
    "Home",
    "ReflectionRecord",
    "ReflectionReview",
    "ReverieError",
    "RunDirBusy",
    "RunReport",
    "Session",
    "Settings",
    "StressReport",
    "SweepReport",
    "TurnOutcome",
    "UndoOutcome",
    "Usage",
    "__version__",
    "load_effective_settings",
    "memory_log",
    "open_session",
    "report",
    "restore",
    "run_suite",
    "stress",
    "sweep",
    "undo",
]

__version__ = "0.1.0"

_HOME = {
    **dict.fromkeys(
        (
            "Change", "CompactionResult", "ContextUse", "Decision", "ReflectionRecord", "ReflectionReview", "Session",
            "TurnOutcome", "UndoOutcome", "Usage", "load_effective_settings", "memory_log", "open_session", "report",
            "restore", "run_suite", "stress", "sweep", "undo",
        ),
        "api",
    ),
    "StressReport": "app.stress",
    "ConfigError": "base.config",
    "Settings": "base.config",
    "ReverieError": "base.errors",
    "Event": "base.events",
    "Home": "base.paths",
    "RunReport": "batch.run",
    "RunDirBusy": "batch.rundir",
    "SweepReport": "batch.sweep",
}



def __getattr__(name: str) -> Any:
    """PEP 562, written out rather than ``base.lazy``'s: ``reverie --version`` imports nothing else."""
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
