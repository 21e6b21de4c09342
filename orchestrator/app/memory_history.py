"""A memory repository's history for a person: read it, take changes back, restore a past tree (H2, H3).

The one place the command line, the REPL and the library ask these questions, so ``reverie memory
log``, ``/memory log`` and ``orchestrator.memory_log`` agree. Reading filters ``memfs.history``'s
changes by the provenance their commits carry (``memfs.provenance``); undo and restore are
``memfs.undo``'s, with the merge policy of the agent's settings: under ``resolve`` the resolver
subagent reconciles an undo that meets later edits of the same lines, under ``keep`` the undo's
branch is kept and named. Everything blocking runs off the loop.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path

from anyio import Path as AsyncPath

from orchestrator.base import blocking
from orchestrator.base.config import Settings
from orchestrator.memfs.history import Change, changes, commit_before, resolve_commit
from orchestrator.memfs.provenance import SOURCES
from orchestrator.memfs.resolution import Resolver
from orchestrator.memfs.undo import Span, UndoError, UndoOutcome, plan_undo, restore_tree, undo_spans

__all__ = [
    "LogFilter",
    "check_time",
    "kept_lines_notes",
    "memory_changes",
    "policy_resolver",
    "restore_memory",
    "undo_changes",
]

_AGO = re.compile(r"^\d+ (second|minute|hour|day|week|month|year)s? ago$")


def check_time(text: str, option: str) -> str:
    """``text`` when it is a time git reads the same way everywhere (ISO 8601, ``@<unix seconds>``
    or ``N units ago``); else a one-line :class:`~orchestrator.memfs.undo.UndoError` naming
    ``option`` (git would read any other word as "now")."""
    value = text.strip()
    if _AGO.match(value) or re.fullmatch(r"@\d+", value):
        return value
    try:
        datetime.fromisoformat(value)
    except ValueError:
        raise UndoError(
            f"{option} {text!r}: not a time; use ISO 8601 (2026-12-07 or 2026-12-07T10:30), @<unix seconds> or 'N hours ago'"
        ) from None
    return value


@dataclass(frozen=True)
class LogFilter:
    """What ``memory log`` keeps: changes by ``agent``, of ``source``, touching ``path``, made at
    or after ``since``; the newest ``count`` of them (None: all)."""

    agent: str | None = None
    source: str | None = None
    path: str | None = None
    since: str | None = None
    count: int | None = None


async def memory_changes(repo: Path, wanted: LogFilter = LogFilter()) -> tuple[Change, ...]:
    """The changes of ``repo``'s history that ``wanted`` keeps, newest first. A source that is not
    one of :data:`~orchestrator.memfs.provenance.SOURCES` or a negative count is a one-line
    :class:`~orchestrator.memfs.undo.UndoError`."""
    if wanted.source is not None and wanted.source not in SOURCES:
        raise UndoError(f"--source {wanted.source!r}: use one of {', '.join(SOURCES)}")
    if wanted.count is not None and wanted.count < 0:
        raise UndoError(f"-n {wanted.count}: give a count of 0 or more")
    since = None if wanted.since is None else check_time(wanted.since, "--since")
    found = await blocking.run_sync("git", partial(changes, repo, path=wanted.path, since=since))
    kept = [
        change for change in found
        if (wanted.source is None or change.provenance.source == wanted.source)
        and (wanted.agent is None or change.provenance.agent == wanted.agent)
    ]
    return tuple(kept if wanted.count is None else kept[: wanted.count])


async def undo_changes(
    repo: Path,
    *,
    agent_id: str,
    revision: str | None = None,
    reflection: str | None = None,
    since: str | None = None,
    run_dir: Path | None = None,
    dry_run: bool = False,
    resolver: Resolver | None = None,
) -> UndoOutcome:
    """Take back one change (``revision``), a reflection's (its id), everything since a time, or a
    batch run's commits (the run directory's name in their ``Reverie-Run``), as new commits merged
    back onto ``HEAD``; with ``dry_run`` only say what would be taken back (``status == "dry-run"``)."""
    run = None if run_dir is None else (await AsyncPath(run_dir).resolve()).name
    if since is not None:
        check_time(since, "--since")
    spans = await blocking.run_sync(
        "git", partial(plan_undo, repo, revision=revision, reflection=reflection, since=since, batch_run=run)
    )
    if dry_run:
        return UndoOutcome("dry-run", spans, (), None)
    what = (
        f"reflection {reflection}" if reflection else f"since {since}" if since else f"run {run}" if run else "change"
    )
    return await undo_spans(repo, spans, agent_id=agent_id, what=what, resolver=resolver)


async def restore_memory(
    repo: Path, at: str, *, agent_id: str, dry_run: bool = False, resolver: Resolver | None = None
) -> UndoOutcome:
    """Make the whole tree as of ``at`` (a revision, or a time: the last commit before it) a new
    commit on ``HEAD``."""
    sha = await blocking.run_sync("git", partial(resolve_commit, repo, at))
    if sha is None:
        try:
            when = check_time(at, "--at")
        except UndoError:
            raise UndoError(f"restore --at {at!r}: names no commit in {repo}, and is not a time") from None
        sha = await blocking.run_sync("git", partial(commit_before, repo, when))
    if sha is None:
        raise UndoError(f"restore --at {at!r}: names no commit and no time with a commit before it in {repo}")
    if dry_run:
        return UndoOutcome("dry-run", (Span(base=sha, tip=sha, commits=(), subject=f"restore memory as of {sha[:12]}"),), (), None)
    return await restore_tree(repo, sha, agent_id=agent_id, resolver=resolver)


def kept_lines_notes(outcome: UndoOutcome, verb: str = "undo") -> list[str]:
    """One line per file in which the resolver kept lines ``verb`` takes out (V6): said by every
    front end, so a "resolved" undo that is not complete in a file never reads as done."""
    return [
        f"the resolver reconciled {path} with later edits and kept {len(lines)} line(s) this {verb} takes out "
        f"({lines[0][:60]!r}{', …' if len(lines) > 1 else ''}); edit the file to finish it"
        for path, lines in outcome.kept_lines
    ]


def policy_resolver(settings: Settings, agent_id: str) -> Resolver | None:
    """The merge policy of ``settings`` (D3) for an undo outside a session: the resolver subagent on
    the configured model under ``resolve``, none (a conflict keeps the branch) under ``keep``."""
    if settings.reflection_merge != "resolve":
        return None
    # deferred: only an undo under `resolve` needs a model and the subagent
    from orchestrator.runtime.runtime import build_model
    from subagents.resolver import make_resolver

    return make_resolver(build_model(settings), agent_id=agent_id, settings=settings)
