"""What a memory repository's history says, for display and reports: its commits, their diffs,
the files a revision holds. The layers above memfs (the chat's ``/memory``, ``reverie memory``, a
batch task's report, the audit's fallback) ask these questions here instead of building git
command lines, so the git seam (``memfs.git``) stays the one place that knows how to ask git.

Each verb says whether it answers in-process (libgit2, through the pooled handle) or with a git
process (a diff as git prints it, which libgit2 would render differently). All are blocking: async
callers run them in a worker thread. A question git cannot answer (a revision that is gone, no
commits yet) is ``None`` or empty, as each verb says; only :func:`line_counts` raises, since a
report shows git's own words for the failure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from orchestrator.memfs.errors import GitError
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.gittrees import display_path
from orchestrator.memfs.provenance import SOURCE_KEY, Provenance, parse

__all__ = [
    "EMPTY_TREE",
    "BlameLine",
    "Change",
    "CommitLine",
    "FileChange",
    "blame",
    "changes",
    "commit_before",
    "commit_identities",
    "commit_message",
    "committed_bytes",
    "first_parents",
    "line_counts",
    "patch",
    "patch_ids",
    "provenance_of",
    "reachable_commits",
    "read_committed",
    "recent_commits",
    "resolve_commit",
    "root_commit",
    "top_level",
    "tracked_files",
]

EMPTY_TREE: Final = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
"""git's empty tree: the "before" of a repository's first commit."""


@dataclass(frozen=True)
class CommitLine:
    """One commit as a log line shows it: its id, its first parent (None for a root) and subject."""

    commit: str
    parent: str | None
    subject: str


@dataclass(frozen=True)
class FileChange:
    """Lines added and removed in one file (None for a binary file, as ``git diff --numstat``)."""

    path: str
    added: int | None
    removed: int | None


def top_level(path: Path) -> Path:
    """The resolved top level of the work tree ``path`` is in (git searches parent folders, and
    says in its own words why a damaged ``.git`` cannot be read): :class:`GitError` when none."""
    return Path(GitRepo(path).run("rev-parse", "--show-toplevel").stdout.strip()).resolve()


def tracked_files(repo: Path, revision: str = "HEAD") -> tuple[str, ...] | None:
    """The paths of every file ``revision`` holds, in git's order and printable (in-process); None
    when there is no such revision (no commits yet, not a repository)."""
    entries = GitRepo(repo).tree_entries(revision)
    return None if entries is None else tuple(display_path(entry.path) for entry in entries)


def committed_bytes(repo: Path, revision: str = "HEAD") -> int | None:
    """The size in bytes of every file ``revision`` holds (what the agent's memory weighs at the end
    of a batch task), in-process; None when there is no such revision."""
    files = GitRepo(repo).tree_files(revision)
    return None if files is None else sum(len(data) for data in files.values())


def read_committed(repo: Path, path: str, revision: str = "HEAD") -> bytes | None:
    """The bytes of the file ``path`` at ``revision`` (``git show revision:path``), in-process;
    None when either is missing or ``path`` is no file."""
    with GitRepo(repo).open() as local:
        if local is None or (resolved := local.revision(revision)) is None:
            return None
        found = local.entry(resolved.tree, path)
        return None if found is None or found[1] != "blob" else local.read_blob(found[0])


def recent_commits(repo: Path, count: int) -> tuple[CommitLine, ...]:
    """The last ``count`` commits from ``HEAD``, newest first, as ``git log`` orders them; empty
    when there are none."""
    said = GitRepo(repo).run("log", f"-{count}", "--format=%H%x00%P%x00%s", check=False)
    lines = [line.split("\0") for line in said.stdout.splitlines() if line] if said.ok else []
    return tuple(CommitLine(sha, parents.split()[0] if parents else None, subject) for sha, parents, subject in lines)


def root_commit(repo: Path, head: str) -> str | None:
    """The first commit of ``head``'s history (the last root ``git rev-list --max-parents=0``
    lists), in-process; None when ``head`` names no commit."""
    with GitRepo(repo).open() as local:
        if local is None:
            return None
        try:
            history = local.commits(None, head)
        except GitError:
            return None
        roots = [commit for commit in history if local.is_root(commit)]
        return roots[0] if roots else None


def first_parents(repo: Path, revision: str, count: int) -> tuple[str, ...]:
    """``revision`` and its first-parent ancestors, newest first, at most ``count`` (in-process);
    empty when ``revision`` names no commit."""
    with GitRepo(repo).open() as local:
        return () if local is None else local.first_parents(revision, count)


def patch(repo: Path, before: str | None, after: str, *, context: int = 3, renames: bool = False) -> str | None:
    """``git diff`` from ``before`` (None: the empty tree) to ``after`` as git prints it, without
    colour or external diff drivers, renames shown as such only with ``renames``; None when git
    cannot tell (a revision is gone)."""
    said = GitRepo(repo).run("diff", "--no-color", "--no-ext-diff", "--find-renames" if renames else "--no-renames", f"--unified={context}", before or EMPTY_TREE, after, check=False)
    return said.stdout if said.ok else None


def line_counts(repo: Path, before: str, after: str) -> tuple[FileChange, ...]:
    """Per file, the lines added and removed from ``before`` to ``after`` (``git diff --numstat``,
    no renames). :class:`GitError` with git's words when it cannot tell."""
    said = GitRepo(repo).run("diff", "--numstat", "-z", "--no-renames", before, after)
    changes: list[FileChange] = []
    for item in said.out.decode("utf-8", "replace").split("\0"):
        parts = item.split("\t", 2)
        if len(parts) == 3:
            added, removed, path = parts
            changes.append(
                FileChange(path, int(added) if added.isdigit() else None, int(removed) if removed.isdigit() else None)
            )
    return tuple(changes)


def reachable_commits(repo: Path, *, branches_only: bool = False) -> frozenset[str]:
    """Every commit some ref reaches (``git rev-list --all``), or with ``branches_only`` some branch
    (``--branches``: pins and tags do not count). :class:`GitError` when git fails."""
    return frozenset(GitRepo(repo).run("rev-list", "--branches" if branches_only else "--all").stdout.split())


def commit_message(repo: Path, revision: str = "HEAD") -> tuple[str, str] | None:
    """``(commit id, its message)`` for the commit ``revision`` names (``git log -1 --format=%H%x00%B``),
    in-process; None when it names none."""
    with GitRepo(repo).open() as local:
        if local is None or (resolved := local.resolve(revision)) is None:
            return None
        found = local.read(resolved[0])
    if found is None:
        return None
    _, _, message = found[1].partition(b"\n\n")
    return resolved[0], message.decode("utf-8", "replace")


_IDENTITY_FORMAT: Final = "--format=%H%x00%an%x00%ae%x00%at%x00%B%x1e"


def _identities(text: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for record in text.split("\x1e"):
        record = record.strip("\n")
        if record:
            sha, _, rest = record.partition("\x00")
            # a resolver's reconciled copy differs only in its Reverie-Source trailer (H1)
            found[sha] = "\n".join(line for line in rest.strip().splitlines() if not line.startswith(SOURCE_KEY + ":"))
    return found


def commit_identities(repo: Path, commits: Sequence[str] | None = None) -> dict[str, str]:
    """commit -> what a rebase keeps of it (author name, e-mail and date, and the message, as one
    string), for ``commits`` (each alone, not their history; ids that are no commit are left out)
    or, when None, every commit some branch reaches. A copy made by ``git rebase`` has its
    original's identity, so a caller whose messages are unique tells a carried commit from a lost
    one without reverie's own records. :class:`GitError` when git fails."""
    if commits is None:
        return _identities(GitRepo(repo).run("log", "--branches", _IDENTITY_FORMAT).stdout)
    wanted = list(dict.fromkeys(commits))
    if not wanted:
        return {}
    said = GitRepo(repo).run("log", "--no-walk=unsorted", _IDENTITY_FORMAT, *wanted, check=False)
    if said.ok:
        return _identities(said.stdout)
    # One id is not even an object: ask one by one so only the missing ones are left out.
    found: dict[str, str] = {}
    for sha in wanted:
        one = GitRepo(repo).run("log", "--no-walk", _IDENTITY_FORMAT, sha, check=False)
        found.update(_identities(one.stdout) if one.ok else {})
    return found


def patch_ids(repo: Path, commits: Sequence[str] = ()) -> dict[str, str]:
    """commit -> ``git patch-id --stable`` (the same change has the same id whichever commit carries
    it), for ``commits`` (each alone, not their history) or, when empty, every commit some ref
    reaches; merges have none. :class:`GitError` when git fails."""
    revs = ("--no-walk", *dict.fromkeys(commits)) if commits else ("--all",)
    log = GitRepo(repo).run("log", "-p", "--no-color", "--format=commit %H", *revs)
    ids = GitRepo(repo).run("patch-id", "--stable", input=log.out)
    pairs = (line.split() for line in ids.stdout.splitlines())
    return {commit: patch for patch, commit in pairs}


# ---------------------------------------------------------------------------------------------
# History a person reads: changes with their provenance (H1, H2)
# ---------------------------------------------------------------------------------------------

_RECORD: Final = "\x1e"
_FIELD: Final = "\x1f"
_LOG_FORMAT: Final = f"--format={_RECORD}%H{_FIELD}%P{_FIELD}%ct{_FIELD}%an{_FIELD}%B{_FIELD}"


@dataclass(frozen=True)
class Change:
    """One change as ``reverie memory log`` shows it: a commit, or a reflection's merged commits
    together (``commits`` newest first), with when, who and why, and the lines per file."""

    commits: tuple[str, ...]
    time: int
    author: str
    subject: str
    provenance: Provenance
    files: tuple[FileChange, ...]
    sources: tuple[str, ...] = ()
    """Each commit's own ``Reverie-Source``, in the order of ``commits`` (a reflection's step the
    resolver reconciled says ``resolver``)."""

    @property
    def commit(self) -> str:
        """The newest commit of the change."""
        return self.commits[0]


def _log_records(repo: Path, args: Sequence[str]) -> list[tuple[str, str, int, str, str, tuple[FileChange, ...]]]:
    said = GitRepo(repo).run("-c", "core.quotepath=off", "log", "--no-renames", "--numstat", _LOG_FORMAT, *args, check=False)
    if not said.ok:
        return []
    records = []
    for record in said.stdout.split(_RECORD)[1:]:
        sha, parents, when, author, message, stat = record.split(_FIELD, 5)
        files = []
        for line in stat.strip("\n").splitlines():
            parts = line.split("\t", 2)
            if len(parts) == 3:
                added, removed, path = parts
                files.append(FileChange(path, int(added) if added.isdigit() else None, int(removed) if removed.isdigit() else None))
        records.append((sha, parents, int(when), author, message, tuple(files)))
    return records


def _sum(changes: Sequence[FileChange]) -> tuple[FileChange, ...]:
    total: dict[str, FileChange] = {}
    for item in changes:
        seen = total.get(item.path)
        if seen is None:
            total[item.path] = item
        else:
            added = None if seen.added is None or item.added is None else seen.added + item.added
            removed = None if seen.removed is None or item.removed is None else seen.removed + item.removed
            total[item.path] = FileChange(item.path, added, removed)
    return tuple(total[path] for path in sorted(total))


def changes(repo: Path, *, revision: str = "HEAD", path: str | None = None, since: str | None = None) -> tuple[Change, ...]:
    """Every change ``revision``'s history holds, newest first: one per commit, a reflection's
    commits as one (grouped by its ``Reverie-Reflection`` id). ``path`` keeps the commits that
    touch it; ``since`` those committed at or after it (anything ``git log --since`` reads).
    Empty when there are no commits."""
    args = [*(("--since", since) if since else ()), revision, *(("--", path) if path else ())]
    grouped: list[Change] = []
    by_reflection: dict[str, int] = {}
    for sha, _parents, when, author, message, files in _log_records(repo, args):
        found = parse(message)
        subject = message.split("\n", 1)[0]
        at = by_reflection.get(found.reflection) if found.reflection else None
        if at is not None:
            earlier = grouped[at]
            grouped[at] = replace(
                earlier, commits=(*earlier.commits, sha), files=_sum((*earlier.files, *files)),
                provenance=earlier.provenance if earlier.provenance.source == "reflection" else found,
                sources=(*earlier.sources, found.source),
            )
            continue
        if found.reflection:
            by_reflection[found.reflection] = len(grouped)
        grouped.append(Change((sha,), when, author, subject, found, files, (found.source,)))
    return tuple(grouped)


def provenance_of(repo: Path, revision: str) -> Provenance | None:
    """What ``revision``'s commit says of itself (``outside`` when nothing); None when it names none."""
    found = commit_message(repo, revision)
    return None if found is None else parse(found[1])


def resolve_commit(repo: Path, revision: str) -> str | None:
    """The commit id ``revision`` names (any ``git rev-parse`` spelling), or None."""
    said = GitRepo(repo).run("rev-parse", "-q", "--verify", "--end-of-options", f"{revision}^{{commit}}", check=False)
    return said.stdout.strip() if said.ok and said.stdout.strip() else None


def commit_before(repo: Path, when: str, revision: str = "HEAD") -> str | None:
    """The newest first-parent ancestor of ``revision`` committed before ``when`` (what ``git
    log --until`` reads), or None when there is none."""
    said = GitRepo(repo).run("log", "--first-parent", "-1", "--format=%H", f"--until={when}", revision, check=False)
    return said.stdout.strip() or None if said.ok else None


@dataclass(frozen=True)
class BlameLine:
    """One line of a file with the commit that wrote it and what that commit says of itself."""

    number: int
    commit: str
    provenance: Provenance
    subject: str
    text: str


def blame(repo: Path, path: str, revision: str = "HEAD") -> tuple[BlameLine, ...] | None:
    """Each line of ``path`` at ``revision`` with the change that wrote it (``git blame
    --line-porcelain``); None when the file is not there."""
    said = GitRepo(repo).run("blame", "--line-porcelain", revision, "--", path, check=False)
    if not said.ok:
        return None
    lines: list[tuple[str, str, str]] = []
    sha = subject = ""
    for raw in said.stdout.split("\n"):
        if raw.startswith("\t"):
            lines.append((sha, subject, raw[1:]))
        elif raw.startswith("summary "):
            subject = raw[len("summary "):]
        elif raw and not raw.startswith(" ") and len(raw.split(" ", 1)[0]) in (40, 64):
            head = raw.split(" ", 1)[0]
            if all(c in "0123456789abcdef" for c in head):
                sha = head
    messages = {commit: message for commit, message in _messages(repo, {sha for sha, _, _ in lines}).items()}
    return tuple(
        BlameLine(number, sha, parse(messages.get(sha, "")), subject, text)
        for number, (sha, subject, text) in enumerate(lines, 1)
    )


def _messages(repo: Path, commits: set[str]) -> dict[str, str]:
    wanted = sorted(c for c in commits if c.strip("0"))
    if not wanted:
        return {}
    said = GitRepo(repo).run("log", "--no-walk=unsorted", f"--format={_RECORD}%H{_FIELD}%B", *wanted, check=False)
    found: dict[str, str] = {}
    for record in said.stdout.split(_RECORD)[1:] if said.ok else ():
        sha, _, message = record.partition(_FIELD)
        found[sha] = message
    return found
