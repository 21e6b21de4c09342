"""The counting sweep of ``reverie stress``: what git says after the run, apart from reverie's records.

Three checks, each from git alone so that a bug in merge-back's bookkeeping cannot hide itself:

* **lost** (:func:`count_lost`): every commit id a writer reported must be reachable from
  ``main`` or a named branch (``refs/heads/*``). A rebase replaces commits by copies, so an id
  that is not reachable is *carried* when a reachable commit has the same author, author date and
  message: git's rebase (and the resolver's ``rebase --continue``) keeps all three, and every stress
  commit's message is unique in its run. No ``rewritten`` map of reverie's is consulted.
* **unmerged** (:func:`unmerged_branches`): the ``reverie/*`` branches an interrupt or a crash
  left (not kept, not pending), each with ``git rev-list --count main..<branch>``.
* **invalid** (:func:`count_invalid_heads`): every ``HEAD`` the run produced, validated as a
  whole tree against the repository's constraints (in-process, objects read through the git
  seam, trees and blobs cached across commits).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from functools import partial
from pathlib import Path
from types import MappingProxyType

from orchestrator.base import blocking
from orchestrator.memfs.errors import GitError
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.history import commit_identities, reachable_commits
from orchestrator.memfs.localrepo import LocalRepo
from orchestrator.memfs.policy import ROOT_MARKER
from orchestrator.memfs.snapshot import Entry, Snapshot, diff_status, path_order_key
from orchestrator.memfs.validator import audit_snapshot

__all__ = ["count_invalid_heads", "count_lost", "unmerged_branches"]

_BRANCHES = "refs/heads/"


async def count_lost(repo: Path, reported: Iterable[str]) -> tuple[int, tuple[str, ...]]:
    """``(how many reported commits no branch carries, those ids)``, by git alone (see above)."""
    wanted = list(dict.fromkeys(reported))
    if not wanted:
        return 0, ()
    reachable = await blocking.run_sync("git", partial(reachable_commits, repo, branches_only=True))
    unreached = [sha for sha in wanted if sha not in reachable]
    if not unreached:
        return 0, ()
    carried = set((await blocking.run_sync("git", partial(commit_identities, repo))).values())
    identities = await blocking.run_sync("git", partial(commit_identities, repo, unreached))
    lost = tuple(sha for sha in unreached if identities.get(sha) not in carried)
    return len(lost), lost


async def unmerged_branches(repo: Path, exclude: Collection[str]) -> dict[str, int]:
    """``reverie/*`` branches other than ``exclude`` with commits ``main`` lacks, and how many."""

    def ahead_of_main(local: LocalRepo) -> dict[str, int]:
        main = local.ref(_BRANCHES + "main")
        found: dict[str, int] = {}
        for name, tip in local.refs(_BRANCHES + "reverie/"):
            branch = name.removeprefix(_BRANCHES)
            if branch in exclude:
                continue
            count = local.ahead(main, tip) if main is not None else len(local.commits(None, tip))
            if count:
                found[branch] = count
        return found

    return await GitRepo(repo).ask(ahead_of_main)


def count_invalid_heads(repo: Path, heads: Iterable[str]) -> tuple[str, ...]:
    """The ``heads`` whose whole tree fails the audit (blocking: run it in a worker thread)."""
    with GitRepo(repo).open() as local:
        if local is None:
            raise GitError(("cat-file",), 128, "fatal: not the top level of a git repository", repo)
        return _Sweep(local).invalid(dict.fromkeys(heads))


class _Sweep:
    """Reads commits, trees and blobs once each for a whole sweep."""

    def __init__(self, local: LocalRepo) -> None:
        self.local = local
        self.trees: dict[str, dict[str, Entry]] = {}
        self.blobs: dict[str, bytes] = {}

    def read(self, oid: str) -> bytes:
        found = self.local.read(oid)
        if found is None:
            raise GitError(("cat-file",), 128, f"fatal: object {oid} is missing", self.local.top_level)
        return found[1]

    def tree(self, oid: str, prefix: str = "") -> dict[str, Entry]:
        key = prefix + "\0" + oid
        if key not in self.trees:
            data, entries, pos = self.read(oid), {}, 0
            while pos < len(data):
                space = data.index(b" ", pos)
                nul = data.index(b"\0", space)
                mode, name = data[pos:space].decode(), data[space + 1 : nul].decode("utf-8", "surrogateescape")
                sha, pos = data[nul + 1 : nul + 21].hex(), nul + 21
                if mode == "40000":
                    entries.update(self.tree(sha, f"{prefix}{name}/"))
                else:
                    entries[prefix + name] = Entry(mode.zfill(6), sha)
            self.trees[key] = entries
        return self.trees[key]

    def commit_tree(self, oid: str) -> tuple[dict[str, Entry], list[str]]:
        lines = self.read(oid).split(b"\n\n", 1)[0].decode().splitlines()
        parents = [line.split()[1] for line in lines if line.startswith("parent ")]
        return self.tree(lines[0].split()[1]), parents

    def invalid(self, heads: Iterable[str]) -> tuple[str, ...]:
        failing: list[str] = []
        for sha in heads:
            index, parents = self.commit_tree(sha)
            head = self.commit_tree(parents[0])[0] if parents else {}
            for entry in [*index.values(), *head.values()]:
                if entry.oid not in self.blobs and entry.mode.startswith("100"):
                    self.blobs[entry.oid] = self.read(entry.oid)
            ordered = {p: index[p] for p in sorted(index, key=path_order_key)}
            snapshot = Snapshot(
                index=MappingProxyType(ordered),
                head=MappingProxyType(head),
                blobs=MappingProxyType(self.blobs),
                changes=MappingProxyType(diff_status(ordered, head)),
            )
            if not audit_snapshot(snapshot, ROOT_MARKER).ok:
                failing.append(sha)
        return tuple(failing)
