"""What reverie loads late, and how: the one list of modules a function may import, and a
package's names that load their module on first use (PEP 562).

Imports sit at the top of a module (K3): an import inside a function hides a dependency from a
reader and from the layer checks. ``HEAVY_IMPORTS`` names the exceptions, each with its reason, and
``tests/test_imports.py`` fails on a function-level import of anything else. An entry is a
third-party module that is slow to import or optional, or one of reverie's own that a process
loads only when it needs it because importing it earlier was measured to cost start-up time: a
one-shot chat's time to its first request or first byte (P1, ``bench/startup.py``), ``reverie
--version`` (nothing of reverie's), or ``reverie --help`` (which imports every command module, so a
command's implementation loads when the command runs). A cycle is never a reason: the shared piece
moves down a layer instead.

A package re-exports its modules' names for its users, but some modules cost start-up time that
most processes never need (the compaction ladder, the bash tool's sandbox, the validator in the
pre-commit hook): their names resolve through the package's ``__getattr__`` instead, and the value
is kept in the package's namespace so later look-ups are plain attribute reads.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["HEAVY_IMPORTS", "lazy_attributes"]

_AFTER_REPLY = "loaded after a one-shot's reply, or with the first background run (P1)"
_COMMAND = "a command's implementation: `reverie --help` imports every command module"
_VERSION = "`reverie --version` imports nothing of reverie's (cli/app.py)"

HEAVY_IMPORTS: Mapping[str, str] = {
    # third-party: slow to import, or an optional extra
    "git": "GitPython's command runner (~60 ms with its `git version`), with the first git process",
    "pygit2": "libgit2 (~45 ms), loaded before a chat's event loop with its TLS set-up stubbed (memfs/git.py)",
    "ssl": "only to stub the CA bundle while pygit2 loads (memfs/git.py)",
    "icu": "PyICU (20 MB resident), only for a label that is not ASCII (MEMFS-3.9)",
    "opentelemetry": "the `otel` extra, loaded only when telemetry is configured",
    "typer": "the full command line with click and rich (~100 ms): chat and --version parse their own",
    "prompt_toolkit": "the REPL's line editor, never a one-shot's",
    "termios": "the terminal's modes, POSIX only, for the REPL",
    "tenacity": "retries (~9 ms), with the first retrying call",
    "tomllib": "the TOML parser (~3 ms), only when a config file exists",
    "trio": "~100 ms, only on the trio backend (asyncio needs none of it)",
    "asyncio": "only on the asyncio backend",
    # reverie's own: one of two models per process
    "orchestrator.models.openai_client": "the real model's client and the SDK; the embedded model needs neither",
    "orchestrator.models.scripted": "the embedded model (~11 ms), not on the real model's path",
    # reverie's own: what a one-shot does after its reply, or a background run does (measured with
    # bench/startup.py and `python -X importtime`)
    "orchestrator.agent.memory_sync": "the post-turn sync (~24 ms with the audit), " + _AFTER_REPLY,
    "orchestrator.agent.audit": "the audit of a new HEAD (~18 ms); a cached prompt for HEAD sends without it",
    "orchestrator.memfs.validator": "the validator (~11 ms): the hook, the audit, a harness commit",
    "orchestrator.tools.bash": "the bash tool and its sandbox (~30 ms), with the first command",
    "orchestrator.tools.sandbox": "bubblewrap's arguments (~22 ms), with the first command",
    "orchestrator.base.subagent_events": "compaction's and reflection's events (~20 ms), with the first one",
    "orchestrator.cli.memory_diff": "a memory edit's diff (~5 ms), shown only after a turn that edits memory",
    "subagents.compaction_summary": "the summary ladder, its worktree and the compiler, with the first compaction",
    "subagents.triggers": "reflection's trigger policy, " + _AFTER_REPLY,
    "subagents.reflection_reader": "reflection's reading loop, " + _AFTER_REPLY,
    "subagents.reflection_merge": "a reflection's merge outcome (~40 ms with merge-back), " + _AFTER_REPLY,
    "subagents.reflection_review": "a reflection held for a person (~64 ms), " + _AFTER_REPLY,
    "subagents.resolver": "the merge resolver, with the first conflict",
    "orchestrator.memfs.merge": "merge-back (~24 ms), " + _AFTER_REPLY,
    "orchestrator.memfs.review": "a branch held for a person (V1), " + _AFTER_REPLY,
    "orchestrator.memfs.worktrees": "worktrees, " + _AFTER_REPLY,
    "orchestrator.memfs.parent": "the parent branch's watch across a subagent's run, " + _AFTER_REPLY,
    "orchestrator.memfs.recovery": "full start-up recovery; memfs/tidy.py answers the common case without it",
    "orchestrator.memfs.locks": "the repository lock (~12 ms with anyio's primitives), with the first harness commit",
    "orchestrator.memfs.gitsnapshot": "the staged tree's reader (~9 ms), only in a hook run without the hook service",
    "orchestrator.memfs.protection": "protected paths (~12 ms), only in a hook run without the hook service",
    # reverie's own: the command line's entry and its commands
    "orchestrator.cli.chat_start": "chat's parser and everything a chat imports; " + _VERSION,
    "orchestrator.cli.chat_repl": "the REPL, never a one-shot's",
    "orchestrator.cli.chat_headless": "a one-shot's session and turn (~27 ms); `--help` reads chat's options without them",
    "orchestrator.cli.chat_editor": "the line editor and prompt_toolkit, only for a terminal",
    "orchestrator.cli.errors": "the error tree, for a failing command only; " + _VERSION,
    "orchestrator.base.processes": "process helpers; " + _VERSION,
    "orchestrator.api": "the whole library (~200 ms); " + _COMMAND,
    "orchestrator.app.session": "a chat session and its subagents (~27 ms); " + _COMMAND,
    "orchestrator.app.review": "reviewing a held reflection (~44 ms); " + _COMMAND,
    "orchestrator.runtime.runtime": "the runtime and its model (~13 ms); " + _COMMAND,
    "orchestrator.batch.sweep": "the sweep and the batch runner (~107 ms); " + _COMMAND,
    "orchestrator.batch.report_data": "the report's data and the batch runner (~91 ms); " + _COMMAND,
}
"""Every module a function may import, with why it is not at the top (K3). An entry covers its
submodules too (``opentelemetry`` covers ``opentelemetry.sdk.trace``)."""


def lazy_attributes(package: str, namespace: dict[str, Any], home: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``home`` maps each lazy name to the submodule
    defining it; ``namespace`` is the package's ``globals()``."""

    def __getattr__(name: str) -> Any:
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    return __getattr__
