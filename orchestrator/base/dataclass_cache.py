"""A bytecode cache for the methods ``dataclasses`` writes for reverie's own classes.

CPython 3.11 defines a dataclass by writing the source of ``__init__``, ``__repr__``, ``__eq__``,
``__hash__`` (and, frozen, ``__setattr__`` and ``__delattr__``) and compiling each with ``exec``:
about 3 M instructions per frozen class, which made defining the ~70 classes a turn needs most of
reverie's own start-up before its first request (issue 14.4, measured with callgrind). Python
caches the bytecode of modules in ``__pycache__`` but not this, so a process compiles the same
texts on every start.

``install`` routes that one ``exec`` through a table from source text to compiled code, kept next
to the package's bytecode (``orchestrator/__pycache__``, named with the interpreter's cache tag and
optimisation level, like a ``.pyc``). What runs is what ``exec`` would have compiled from the same
text, with the same flags (``dont_inherit``), so a class behaves exactly as without the cache; only
the compile is skipped. The choices, for whoever meets this:

* only classes of reverie's own packages go through the table (the module the class is defined in
  is in the globals ``dataclasses`` passes); any other library's dataclasses are compiled as
  ``dataclasses`` always does, so installing it changes nothing for them;
* the table is written once, at exit, and only when this process compiled a text it did not have
  (atomically: a temporary file, then a rename; concurrent processes may lose each other's new
  entries, which the next start adds again). A table that cannot be read (another format, a
  truncated write) is ignored and rewritten; a directory that cannot be written is left alone;
* texts no class uses any more stay until the table outgrows ``_MAX_ENTRIES``, then it starts over;
* it is installed by the entry points (``reverie``, the batch worker), not by importing
  ``orchestrator``: a library user's process is left as it was unless it asks.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import dataclasses
import marshal
import os
import sys
import threading
from importlib.util import MAGIC_NUMBER
from pathlib import Path
from types import CodeType
from typing import Any, NamedTuple

__all__ = ["CacheStats", "default_path", "install", "stats"]

_OWN_PACKAGES = ("orchestrator.", "subagents.", "prompts.")
_MAX_ENTRIES = 4096
_FORMAT = b"reverie-dataclass-methods-1 " + MAGIC_NUMBER + b"\n"
"""The table's header: this format, for code objects of this bytecode version."""


class CacheStats(NamedTuple):
    """What the installed cache has done in this process, for tests and benches (a named tuple,
    not a dataclass: this module is imported before the cache is installed)."""

    path: Path
    loaded: int
    """Entries read from the table at install."""
    hits: int
    misses: int
    passed: int
    """``exec`` calls left to ``exec``: another library's class, or code that is not a text."""


class _Table:
    """The process's table: what was read, what this process compiled or used."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.codes = _read(path)
        self.loaded = len(self.codes)
        self.used: set[str] = set()
        self.hits = self.misses = self.passed = 0
        self.lock = threading.Lock()

    def code(self, source: str) -> CodeType:
        code = self.codes.get(source)
        if code is None:
            code = _compiled(source)
            with self.lock:
                self.codes[source] = code
                self.misses += 1
        else:
            self.hits += 1
        self.used.add(source)
        return code

    def save(self) -> None:
        """At exit: the table with this process's new entries, if it compiled any. Past
        ``_MAX_ENTRIES`` only what this process used is kept. A place this process may not write
        (a system-wide install) is left before the table is serialised."""
        if not self.misses:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            return
        if not os.access(self.path.parent, os.W_OK):
            return
        with self.lock:
            table = dict(self.codes)
            if len(table) > _MAX_ENTRIES:
                table = {k: v for k, v in table.items() if k in self.used}
        part = self.path.with_name(f"{self.path.name}.{os.getpid()}.part")
        try:
            part.write_bytes(_FORMAT + marshal.dumps(table))
            os.replace(part, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                part.unlink(missing_ok=True)


_table: _Table | None = None
_install_lock = threading.Lock()


def default_path() -> Path:
    """Beside the package's own bytecode, one table per interpreter and optimisation level."""
    tag = sys.implementation.cache_tag or "python"
    opt = f".opt-{sys.flags.optimize}" if sys.flags.optimize else ""
    return Path(__file__).resolve().parents[1] / "__pycache__" / f"dataclass-methods.{tag}{opt}.marshal"


def stats() -> CacheStats | None:
    """The installed cache's counts, or None when ``install`` has not run in this process."""
    table = _table
    if table is None:
        return None
    return CacheStats(table.path, table.loaded, table.hits, table.misses, table.passed)


def install(path: Path | None = None) -> None:
    """Route ``dataclasses``' compiles of reverie's classes through the table at ``path``
    (``default_path()``); idempotent. Classes defined before the call are not affected."""
    global _table
    with _install_lock:
        if _table is not None:
            return
        _table = _Table(path or default_path())
    dataclasses.exec = _cached_exec  # type: ignore[attr-defined]
    atexit.register(_table.save)


def _cached_exec(source: Any, globals: dict[str, Any] | None = None, locals: Any = None, /) -> None:
    """``exec`` as ``dataclasses`` calls it: ``exec(text, the class's module globals, namespace)``."""
    table = _table
    module = globals.get("__name__") if isinstance(globals, dict) else None
    if table is None or type(source) is not str or not isinstance(module, str) or not module.startswith(_OWN_PACKAGES):
        if table is not None:
            table.passed += 1
        builtins.exec(_compiled(source), globals, locals)
        return
    builtins.exec(table.code(source), globals, locals)


def _compiled(source: Any) -> Any:
    """``source`` compiled as ``exec`` in ``dataclasses`` would compile it: ``exec`` of a text
    inherits the calling frame's ``__future__`` flags, and this module's (annotations) would turn
    the generated methods' annotations into strings."""
    return compile(source, "<string>", "exec", dont_inherit=True) if isinstance(source, str) else source


def _read(path: Path) -> dict[str, CodeType]:
    """The table at ``path``; empty when it is missing, of another format or damaged."""
    try:
        data = path.read_bytes()
    except OSError:
        return {}
    if not data.startswith(_FORMAT):
        return {}
    try:
        table = marshal.loads(data[len(_FORMAT) :])
    except (EOFError, ValueError, TypeError):
        return {}
    if not isinstance(table, dict):
        return {}
    return {k: v for k, v in table.items() if isinstance(k, str) and isinstance(v, CodeType)}
