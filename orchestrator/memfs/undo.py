"""Taking changes back without rewriting history (H3): undo and restore as new commits.

An undo of the change ``(base, tip]`` (a commit, a reflection's merged commits, everything since a
time, a batch run's commits) is built where it cannot conflict: a worktree at ``tip`` gets one
commit whose tree is ``base``'s, made by the harness with ``Reverie-Source: undo`` and the changes
it takes back in its trailers. That branch is then merged back like a reflection's (``memfs.merge``):
rebased onto ``HEAD`` under the repository lock, the candidate ``HEAD`` audited by the same
validation, the checkout fast-forwarded. Later edits of the same lines make the rebase stop, and
that stop is handled as merge-back's is: a resolver reconciles it, or the branch is kept and named
(``reverie reflections list`` shows it). A reconciled file may keep lines the undo takes out (a
union keeps every line of both sides): the outcome names them (``kept_lines``, V6), so an undo that
is not complete in a file says so. Nothing is dropped, nothing half-applied, and the commits
taken back stay ancestors of ``HEAD``. A restore is the same with the worktree at ``HEAD`` and the
tree of the revision asked for. A running session sees the new commit as a ``<memory_update>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path

from orchestrator.base import blocking
from orchestrator.memfs.errors import MemfsError
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.history import changes, commit_before, read_committed, resolve_commit
from orchestrator.memfs.lockowner import holding_as
from orchestrator.memfs.merge import MergeOutcome, finalize_worktree
from orchestrator.memfs.provenance import Provenance, trailer_args
from orchestrator.memfs.resolution import Resolver
from orchestrator.memfs.worktrees import create_worktree, remove_worktree

__all__ = ["Span", "UndoError", "UndoOutcome", "plan_undo", "restore_tree", "undo_spans"]


class UndoError(MemfsError, ValueError):
    """What to undo or restore names nothing that can be taken back; ``str()`` is one line."""


@dataclass(frozen=True)
class Span:
    """A run of consecutive first-parent commits, taken back as one: ``commits`` newest first,
    ``base`` the commit before the oldest (what the files return to)."""

    base: str
    tip: str
    commits: tuple[str, ...]
    subject: str


@dataclass(frozen=True)
class UndoOutcome:
    """What an undo or restore did: ``status`` is merge-back's (``merged``, ``resolved``, ``kept``,
    ...) or ``dry-run``; ``spans`` what it took back; ``merges`` one merge-back outcome per span."""

    status: str
    spans: tuple[Span, ...]
    merges: tuple[MergeOutcome, ...]
    head: str | None
    kept_lines: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Per file a resolver reconciled with later edits, the lines the undo takes out that the file
    still holds afterwards (V6: a reconciliation by union keeps every line of both sides, so the
    undo is not complete there); empty when there are none."""

    @property
    def commits(self) -> tuple[str, ...]:
        """The new commits (the undo commits that reached ``HEAD``)."""
        return tuple(c for m in self.merges if m.in_head for c in m.commits)

    @property
    def kept(self) -> tuple[str, ...]:
        """The branches kept unmerged (a conflict no resolver reconciled, an invalid result)."""
        return tuple(m.branch for m in self.merges if not m.in_head)


def _first_parent_chain(repo: Path) -> list[tuple[str, str | None]]:
    """``(commit, first parent)`` of ``HEAD``'s first-parent history, newest first."""
    said = _git_out(repo, "log", "--first-parent", "--format=%H %P")
    chain = []
    for line in said.splitlines():
        parts = line.split()
        if parts:
            chain.append((parts[0], parts[1] if len(parts) > 1 else None))
    return chain


def _git_out(repo: Path, *args: str) -> str:
    said = GitRepo(repo).run(*args, check=False)
    return said.stdout if said.ok else ""


def plan_undo(
    repo: Path,
    *,
    revision: str | None = None,
    reflection: str | None = None,
    since: str | None = None,
    batch_run: str | None = None,
) -> tuple[Span, ...]:
    """The spans an undo takes back, newest first (blocking). Exactly one of ``revision``,
    ``reflection`` (its id), ``since`` (a time ``git log`` reads) or ``batch_run`` (a batch run's id).
    :class:`UndoError` in one line for a bad revision, an unknown id or an empty range."""
    chosen = [name for name, value in (("REV", revision), ("--reflection", reflection), ("--since", since), ("--run", batch_run)) if value]
    if len(chosen) != 1:
        raise UndoError("undo: give exactly one of REV, --reflection ID, --since TIME, --run RUN_DIR")
    chain = _first_parent_chain(repo)
    if not chain:
        raise UndoError(f"{repo}: no commits yet, nothing to undo")
    parents = dict(chain)
    if revision is not None:
        sha = resolve_commit(repo, revision)
        if sha is None:
            raise UndoError(f"undo: {revision!r} names no commit in {repo}")
        if sha not in parents:
            raise UndoError(f"undo: {revision!r} ({sha[:12]}) is not in the history of HEAD")
        if parents[sha] is None:
            raise UndoError(f"undo: {revision!r} is the repository's first commit; use `reverie memory restore` instead")
        return (_span(repo, parents, [sha]),)
    if since is not None:
        base = commit_before(repo, since)
        picked = [sha for sha, _ in chain[: [c for c, _ in chain].index(base)]] if base else []
        if base is None or not picked:
            raise UndoError(f"undo: no change since {since!r} in {repo}")
        return (_span(repo, parents, picked),)
    key, value = ("reflection", reflection) if reflection is not None else ("run", batch_run)
    picked = [c for change in changes(repo) if getattr(change.provenance, key) == value for c in change.commits]
    if not picked:
        raise UndoError(f"undo: no change of {'reflection' if key == 'reflection' else 'run'} {value!r} in the history of HEAD")
    return _spans(repo, chain, set(picked))


def _spans(repo: Path, chain: list[tuple[str, str | None]], picked: set[str]) -> tuple[Span, ...]:
    parents = dict(chain)
    runs: list[list[str]] = []
    for sha, _ in chain:
        if sha in picked:
            if runs and parents.get(runs[-1][-1]) == sha:
                runs[-1].append(sha)
            else:
                runs.append([sha])
    return tuple(_span(repo, parents, commits) for commits in runs)


def _span(repo: Path, parents: dict[str, str | None], commits: list[str]) -> Span:
    base = parents[commits[-1]]
    if base is None:
        raise UndoError(f"undo: {commits[-1][:12]} is the repository's first commit; use `reverie memory restore` instead")
    subject = _git_out(repo, "log", "-1", "--format=%s", commits[0]).strip()
    return Span(base=base, tip=commits[0], commits=tuple(commits), subject=subject)


async def undo_spans(
    repo: Path, spans: tuple[Span, ...], *, agent_id: str, what: str, resolver: Resolver | None = None
) -> UndoOutcome:
    """Take back each span (newest first), each as one commit merged back onto ``HEAD``."""
    merges = []
    for span in spans:
        message = f"undo: {span.subject}"
        provenance = Provenance("undo", agent_id, undoes=f"{what} {_ids(span)}")
        merges.append(await _commit_and_merge(repo, span.tip, span.base, message, provenance, agent_id, resolver))
    return await _outcome(repo, spans, tuple(merges))


async def restore_tree(
    repo: Path, revision: str, *, agent_id: str, resolver: Resolver | None = None
) -> UndoOutcome:
    """Make the whole tree as ``revision`` had it a new commit on ``HEAD`` (blocking parts off the loop)."""
    sha = await blocking.run_sync("git", partial(resolve_commit, repo, revision))
    if sha is None:
        raise UndoError(f"restore: {revision!r} names no commit in {repo}")
    head = await blocking.run_sync("git", partial(resolve_commit, repo, "HEAD"))
    assert head is not None
    span = Span(base=sha, tip=head, commits=(), subject=f"restore memory as of {sha[:12]}")
    provenance = Provenance("restore", agent_id, undoes=f"restore {sha[:12]}")
    merged = await _commit_and_merge(repo, head, sha, span.subject, provenance, agent_id, resolver)
    return await _outcome(repo, (span,), (merged,))


def _ids(span: Span) -> str:
    return span.tip[:12] if len(span.commits) == 1 else f"{span.base[:12]}..{span.tip[:12]} ({len(span.commits)} commits)"


async def _outcome(repo: Path, spans: tuple[Span, ...], merges: tuple[MergeOutcome, ...]) -> UndoOutcome:
    statuses = {m.status for m in merges}
    status = next((s for s in ("failed", "kept", "pending", "resolved", "merged") if s in statuses), "no_changes")
    head = next((m.new_head for m in reversed(merges) if m.new_head), None)
    kept = await blocking.run_sync("git", partial(_kept_lines, repo, spans, merges)) if "resolved" in statuses else ()
    return UndoOutcome(status, spans, merges, head, kept)


def _lines(repo: Path, path: str, revision: str) -> list[str]:
    return (read_committed(repo, path, revision) or b"").decode("utf-8", "replace").splitlines()


def _kept_lines(
    repo: Path, spans: tuple[Span, ...], merges: tuple[MergeOutcome, ...]
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """For each file a resolver reconciled, the lines the span's change brought in (what the undo
    takes out) that the merged file still holds (blocking, in-process reads)."""
    found = []
    for span, merged in zip(spans, merges, strict=True):
        if merged.status != "resolved" or not merged.new_head:
            continue
        for path in merged.resolved_files:
            taken_out = set(_lines(repo, path, span.tip)) - set(_lines(repo, path, span.base))
            still = tuple(line for line in _lines(repo, path, merged.new_head) if line.strip() and line in taken_out)
            if still:
                found.append((path, still))
    return tuple(found)


async def _commit_and_merge(
    repo: Path, at: str, tree_of: str, message: str, provenance: Provenance, agent_id: str, resolver: Resolver | None
) -> MergeOutcome:
    worktree = await create_worktree(repo, agent_id=agent_id, revision=at, kind="undo")
    try:
        await GitRepo(worktree.path).arun("read-tree", "-u", "--reset", tree_of, harness=True)
        await GitRepo(worktree.path).arun("commit", "-q", "--allow-empty", "-m", message, *trailer_args(provenance), harness=True)
    except BaseException:
        await remove_worktree(repo, worktree)
        raise
    with holding_as(f"memory {provenance.source}"):
        return await finalize_worktree(repo, worktree, resolver=resolver)
