"""The root of every error reverie raises on purpose, and the rule for which ones reach the user.

A ``ReverieError`` is a failure someone outside the code can act on: a bad setting, a damaged
repository, an unreachable model, a flag out of range. Its ``str()`` is one line naming the thing and,
where there is one, the fix; the CLI prints exactly that line. Anything that is not a ``ReverieError``
is a bug and the CLI shows its traceback (``ValueError``, ``KeyError``, ``OSError`` from deep inside
included), so a mistake in reverie is never dressed up as a mistake of the user's.

Each layer raises its own subclass and translates the outside system's failures at its seam (SQLite in
the store, git in memfs, the SDK in models), so the exception a caller catches names the layer that
failed, not the library underneath. Classes that were ``ValueError``/``RuntimeError`` before the root
existed keep that base as a mixin, so code written against the old base still catches them::

    ReverieError                          orchestrator/base/errors.py
    ├── UsageError (ValueError)           orchestrator/base/errors.py: arguments that contradict each
    │   │                                 other or fall out of range (a flag, a constructor argument)
    │   └── ArchiveError                  batch/task_archive.py: a Ray task's archive names a file outside
    │                                     the task's paths, or cannot be read
    ├── ConfigError (ValueError)          orchestrator/base/config.py: a setting; names file/key/variable
    ├── BadValue (ValueError)             orchestrator/base/choices.py: a value a setting does not take (the reason alone)
    ├── LimitReached                      orchestrator/base/limits.py: a request would cross a limit and
    │                                     was not sent (B1); its scope stops with status ``limit``
    ├── StoreError                        orchestrator/store/records.py: the conversation store
    │   └── StoreDamaged (sqlite3.DatabaseError)  store/records.py: SQLite refused mid-query (damaged file, full disk)
    ├── MemfsError                        orchestrator/memfs/errors.py: the memory repository
    │   ├── GitError (RuntimeError)       memfs/errors.py: a git command or in-process git read failed
    │   │   └── TreeTooLarge              memfs/gittrees.py: a committed tree over a cap (paths, depth, bytes)
    │   ├── MemoryCommitRejected (RuntimeError)  memfs/repo.py: staged memory failed validation
    │   ├── ResolverFailed (RuntimeError) memfs/resolution.py: a merge conflict could not be reconciled
    │   ├── LockBusy (RuntimeError)       memfs/locks.py: the merge lock is held and waiting was refused
    │   ├── RepositoryNotWritable (RuntimeError)  memfs/locks.py: the lock file cannot be made (read-only)
    │   ├── RepositoryRefused (RuntimeError)  memfs/guard.py: a redirected or planted .git, an include
    │   │                                 in its config, or history without a branch; no git was run
    │   ├── HookPathRefused (RuntimeError)  memfs/hook.py: core.hooksPath (user's config) is no folder
    │   ├── ReflectionBranchError (ValueError)  memfs/merge.py: no such reflection branch, or not ours
    │   └── UndoError (ValueError)        memfs/undo.py: what to undo or restore names nothing to take back
    ├── ModelError                        orchestrator/models/types.py: a model call failed after retries
    ├── ToolError                         orchestrator/tools/context.py: a tool refused; the model reads it
    │   └── SandboxUnavailable            tools/sandbox.py: ``sandbox = auto | bwrap`` and bubblewrap cannot run
    ├── CompactionSettingsError (ValueError)  orchestrator/compaction/settings.py: a compaction setting
    ├── PlanningError (ValueError)        orchestrator/compaction/planner.py: no valid cutoff (caught)
    ├── ContextWindowTooSmall             orchestrator/compaction/planner.py: prompt + newest message
    │                                     cannot share the window (D4); the turn is refused
    ├── ReflectionError (RuntimeError)    subagents/reflection.py: a reflection gave up (recorded)
    ├── ReflectionUnfinished              subagents/reflection_reader.py: the reading loop ran out of
    │                                     steps (reflection.py records it as a ReflectionError)
    ├── SuiteError (ValueError)           orchestrator/batch/suite.py: a bad suite line
    ├── ReportError (ValueError)          orchestrator/batch/report_data.py: not a run or sweep directory
    ├── RunDirBusy                        orchestrator/batch/rundir.py: another process runs into that
    │                                     directory (the message names it)
    └── UserError                         orchestrator/cli/errors.py: a command line the CLI refuses
        └── ChatUsageError                cli/chat_start.py: a chat command line that does not parse

Deliberately outside the tree (bugs, so a traceback): ``WorkerClosedError`` (the store used after
close) and the private control-flow exceptions (``_Failed``, ``_Unreadable``). ``tests/base/
test_errors.py`` fails when a public exception class is added outside the tree or this drawing
misses one.
"""

from __future__ import annotations

__all__ = ["ReverieError", "UsageError", "error_line"]


class ReverieError(Exception):
    """An expected failure with a one-line message for whoever can fix it; the CLI prints ``str()``."""


class UsageError(ReverieError, ValueError):
    """Arguments that contradict each other or fall outside their range, named as the user wrote them
    (``--writers must be at least 1, got 0``); a ``ValueError`` too, as these were before the root."""


def error_line(exc: BaseException, limit: int = 300) -> str:
    """``Type: message`` on one line, at most ``limit`` characters: how a contained failure (one a
    subagent records instead of raising) is written into its record and its event."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:limit]
