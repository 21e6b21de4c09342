"""The one libgit2 handle reverie holds per repository: :class:`LocalRepo`, the reads of
:class:`~orchestrator.memfs.gitread.RepoReader` and the writes libgit2 does as git does (refs by
compare-and-swap, overlay commits, worktree records, a fast-forward under ``index.lock``, a clean
rebase in memory, a forced checkout). What it cannot do as git does (a rebase that stops on a
conflict, the agent's commits) goes to the process runner (``docs/architecture.md``, "The git seam").

Handles come from the pool (:mod:`orchestrator.memfs.repopool`), usually through the repository
object of :mod:`orchestrator.memfs.git`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import threading
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from orchestrator.memfs.errors import GitError
from orchestrator.memfs.gitprocess import HARNESS_EMAIL, HARNESS_NAME
from orchestrator.memfs.gitread import RepoReader
from orchestrator.memfs.libgit import libgit2

__all__ = ["LocalRepo"]


class LocalRepo(RepoReader):
    """One repository opened in-process: its reads (:class:`RepoReader`) and libgit2's writes.

    Used by one thread at a time (the pool holds :attr:`lock`); every libgit2 failure is re-raised
    as :class:`GitError`.
    """

    def overlay_commit(self, revision: str, entries: Mapping[str, tuple[str, str] | None], message: str) -> str:
        """A commit (on no branch) whose parent is ``revision`` and whose tree is ``revision``'s with
        each path of ``entries`` set to ``(mode, oid)`` or removed (None). Its author, committer and
        time are fixed, so the same overlay is the same commit (and rendered once by the compiler)."""
        pygit2 = libgit2()
        try:
            commit = self._repo.revparse_single(revision).peel(pygit2.Commit)
            index = pygit2.Index()
            index.read_tree(commit.tree)
            for path, entry in entries.items():
                if entry is None:
                    if path in index:
                        index.remove(path)
                else:
                    index.add(pygit2.IndexEntry(path, pygit2.Oid(hex=entry[1]), int(entry[0], 8)))
            tree = index.write_tree(self._repo)
            signature = pygit2.Signature("reverie", "reverie@localhost", 0, 0)
            return str(self._repo.create_commit(None, signature, signature, message, tree, [commit.id]))
        except (KeyError, ValueError, pygit2.GitError) as error:
            raise self._fail("commit-tree", error) from error

    def set_ref(self, name: str, new: str, *, expected: str | None = None) -> bool:
        """``git update-ref name new [expected]``: ``expected`` ``""`` creates only, an oid must
        match the current value; False when that condition does not hold. The condition is checked
        atomically, under the ref's lock, by libgit2 (create without force; a swap against the
        value read), so a git writing the ref at the same moment makes this False, never lost."""
        pygit2 = libgit2()
        try:
            if expected is None:
                self._repo.references.create(name, new, force=True)
                return True
            if expected == "":
                self._repo.references.create(name, new, force=False)
                return True
            found = self._repo.references.get(name)
            if found is None or str(found.target) != expected:
                return False
            found.set_target(new)
        except pygit2.AlreadyExistsError:
            return False
        except pygit2.GitError as error:
            if "does not match" in str(error):
                return False
            raise self._fail("update-ref", error) from error
        except (ValueError, OSError) as error:
            raise self._fail("update-ref", error) from error
        return True

    def delete_ref(self, name: str, *, expected: str | None = None) -> bool:
        """``git update-ref -d name [expected]``; False when it is missing or holds something else."""
        pygit2 = libgit2()
        try:
            found = self._repo.references.get(name)
            if found is None or (expected is not None and str(found.target) != expected):
                return False
            found.delete()
        except (KeyError, ValueError, pygit2.GitError):
            return False
        return True


    def add_worktree(self, path: Path, branch: str, commit: str) -> None:
        """``git worktree add -b branch path commit`` in-process: the branch at ``commit``, checked out
        in a new linked worktree whose record is named after ``path`` as git names it."""
        pygit2 = libgit2()
        try:
            ref = self._repo.branches.local.create(branch, self._repo[commit])
        except (KeyError, ValueError, OSError, pygit2.GitError) as error:
            raise GitError(("worktree", "add"), 128, f"fatal: cannot create branch {branch!r}: {error}", self.top_level) from error
        try:
            self._repo.add_worktree(path.name, str(path), ref)
        except (KeyError, ValueError, OSError, pygit2.GitError) as error:
            # A half-made worktree (a full disk mid-checkout) holds the branch: drop its record first.
            # If the disk refuses even that, start-up recovery removes the leftovers later.
            with contextlib.suppress(KeyError, ValueError, OSError, pygit2.GitError):
                self._repo.lookup_worktree(path.name).prune(True)
            with contextlib.suppress(pygit2.GitError):
                ref.delete()
            raise GitError(("worktree", "add"), 128, f"fatal: {error}", self.top_level) from error

    def fast_forward(self, tip: str, *, expected: str | None = None) -> str | None:
        """``git merge --ff-only tip`` on this checkout, in-process, as one compare-and-swap.

        ``"done"``; ``"dirty"`` when an uncommitted, staged or untracked file would be overwritten;
        ``"moved"`` when the branch is not ``expected`` (default: whatever it holds) or ``tip`` does
        not contain it; ``"busy"`` when another git holds ``index.lock``; None when libgit2 could
        not tell before touching a file, so the caller asks git. Every outcome but ``"done"``
        leaves the checkout, the index and the branch as they were. Writing the files can fail
        part-way (a full disk): they are put back as ``HEAD`` has them and :class:`GitError` is
        raised, not None: git's own fast-forward would fail there the same way, and a checkout left
        half-written holds the branch's changes as uncommitted edits that the next ``commit -a``
        would take into someone else's commit.

        Why ``index.lock`` is held throughout: git's own fast-forward checks out, releases the index
        and only then moves the branch, and a ``git commit -a`` that slips in between (a git that
        skipped reverie's wrapper, so not under the repository lock) commits the new files on the
        old ``HEAD``: content of the merged branch swept into someone else's commit. Every git that
        commits from the index takes ``index.lock`` first, so while it is held here none can. The
        files are checked out safely (index untouched), the new index is written into the lock, the
        branch moves by libgit2's compare-and-swap on its old value (as ``git update-ref ref new
        old``), and only then is the lock renamed over the index. A lost swap puts the files back.
        """
        pygit2 = libgit2()
        lock = self.git_dir / "index.lock"
        try:
            os.close(os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except FileExistsError:
            return "busy"
        except OSError:
            return None
        try:
            return self._fast_forward_locked(pygit2, tip, expected, lock)
        except (KeyError, ValueError, OSError, UnicodeError, pygit2.GitError) as error:
            if _no_space(error):
                # git's own fast-forward would write part of the files and fail the same way.
                raise self._fail("merge", error) from error
            return None
        finally:
            with contextlib.suppress(FileNotFoundError):
                lock.unlink()

    def _fast_forward_locked(self, pygit2: ModuleType, tip: str, expected: str | None, lock: Path) -> str:
        repo = self._repo
        branch = repo.references["HEAD"].resolve()
        start = str(branch.target)
        if expected is not None and start != expected:
            return "moved"
        if start == tip:
            return "done"
        if not repo.descendant_of(tip, start):
            return "moved"
        old, new = self._file_map(start), self._file_map(tip)
        changed = sorted(path for path in old.keys() | new.keys() if old.get(path) != new.get(path))
        staged = self.git_dir / f"index.reverie-{os.getpid()}-{threading.get_ident()}"
        self._check_room(changed, new)
        try:
            if not self._stage_fast_forward(pygit2, staged, changed, old, new):
                return "dirty"
            target = repo.revparse_single(tip).peel(pygit2.Commit)
            strategy = pygit2.enums.CheckoutStrategy
            try:
                repo.checkout_tree(target.tree, strategy=strategy.SAFE | strategy.DONT_UPDATE_INDEX, paths=changed)
                os.replace(staged, lock)
            except (pygit2.GitError, OSError) as error:
                if isinstance(error, pygit2.GitError) and "conflict" in str(error).lower():
                    return "dirty"
                raise self._undo_checkout(pygit2, start, changed, old, error) from error
        finally:
            with contextlib.suppress(FileNotFoundError):
                staged.unlink()
        try:
            branch.set_target(target.id, f"merge {tip}: Fast-forward")
        except (pygit2.GitError, OSError) as error:
            failed = self._undo_checkout(pygit2, start, changed, old, error)
            if self._ref_unwritable(branch.name, start):
                raise failed from error
            return "moved"
        os.replace(lock, self.git_dir / "index")
        return "done"

    def _stage_fast_forward(
        self,
        pygit2: ModuleType,
        staged: Path,
        changed: list[str],
        old: dict[str, tuple[str, str]],
        new: dict[str, tuple[str, str]],
    ) -> bool:
        """Write to ``staged`` the index git's two-way merge makes: the current index with each
        changed path taken from ``tip``; False (nothing to use) when one of them is staged
        differently from ``HEAD``, which the fast-forward must not overwrite."""
        current = self.git_dir / "index"
        if current.exists():
            shutil.copyfile(current, staged)
        index = pygit2.Index(str(staged))
        for path in changed:
            entry = index[path] if path in index else None
            held = None if entry is None else (f"{entry.mode:o}", str(entry.id))
            if held != old.get(path):
                return False
            if path in new:
                mode, oid = new[path]
                index.add(pygit2.IndexEntry(path, pygit2.Oid(hex=oid), int(mode, 8)))
            else:
                index.remove(path)
        index.write()
        return True

    def _check_room(self, changed: list[str], new: dict[str, tuple[str, str]]) -> None:
        """``OSError(ENOSPC)`` before any file is written when the disk has clearly too little room
        for the files ``tip`` brings (each rounded up to a block, plus the index and a margin): a
        checkout that fails part-way must be undone, and undoing needs room too."""
        block = 4096
        need = 64 * 1024 + sum(
            -(-self._repo[new[path][1]].size // block) * block + block for path in changed if path in new
        )
        try:
            fs = os.statvfs(self.top_level)
        except OSError:
            return
        free = fs.f_bavail * fs.f_frsize
        if free < need:
            raise OSError(errno.ENOSPC, f"No space left on device: the fast-forward needs {need} bytes, {free} free")

    def _ref_unwritable(self, name: str, start: str) -> bool:
        """After a failed swap of ``name`` from ``start``: whether git could not write it (a full
        disk) rather than lost it to another writer, which moved it or holds its lock right now."""
        if str(self._repo.references[name].target) != start:
            return False
        return not any((self.common_dir / lock).exists() for lock in (f"{name}.lock", "packed-refs.lock"))

    def _restore_files(self, pygit2: ModuleType, start: str, changed: list[str], old: dict[str, tuple[str, str]]) -> None:
        """Put the working files of a lost fast-forward back as ``start`` has them (index untouched).
        Files ``start`` lacks go first, so a disk the checkout filled has room for the rest."""
        strategy = pygit2.enums.CheckoutStrategy
        for path in changed:
            if path not in old:
                with contextlib.suppress(FileNotFoundError):
                    (self.top_level / path).unlink()
        kept = [path for path in changed if path in old]
        if kept:
            commit = self._repo.revparse_single(start).peel(pygit2.Commit)
            self._repo.checkout_tree(commit.tree, strategy=strategy.FORCE | strategy.DONT_UPDATE_INDEX, paths=kept)

    def _undo_checkout(
        self, pygit2: ModuleType, start: str, changed: list[str], old: dict[str, tuple[str, str]], error: Exception
    ) -> GitError:
        """The error to raise for a fast-forward whose files were written part-way, once they are
        back as ``start`` has them (or, if even that fails, saying which files to check)."""
        try:
            self._restore_files(pygit2, start, changed, old)
        except (OSError, pygit2.GitError) as again:
            paths = ", ".join(changed[:5]) + (" …" if len(changed) > 5 else "")
            return self._fail("merge", OSError(f"{error}; putting back {paths} failed too: {again}"))
        return self._fail("merge", error)

    def restore_files(self, start: str, tip: str) -> None:
        """Put back as ``start`` has them the working files that differ between ``start`` and
        ``tip`` (index untouched): what git's own fast-forward from ``start`` may have written
        before it failed part-way. Only for paths that were clean, which git checked before
        writing any; :class:`GitError` when that fails too."""
        pygit2 = libgit2()
        try:
            old, new = self._file_map(start), self._file_map(tip)
            changed = sorted(path for path in old.keys() | new.keys() if old.get(path) != new.get(path))
            self._restore_files(pygit2, start, changed, old)
        except (KeyError, ValueError, OSError, pygit2.GitError) as error:
            raise self._fail("checkout", error) from error

    def rebase_onto(self, onto: str, *, checkout: bool = True) -> tuple[str, ...] | None:
        """``git rebase --empty=keep onto`` of this checkout's branch, in memory, when it is clean.

        Each commit of ``onto..HEAD`` (oldest first) is cherry-picked with a three-way tree merge,
        keeping its author and message, committed by the harness; then the checkout (a clean one,
        the caller made sure) is moved to the new tip and the branch ref last, so a crash leaves the
        branch where it was. Returns the new commits, or None without touching anything when git's
        own rebase must decide: a conflict, a merge commit, or a commit that is or becomes empty
        (git drops one whose change is already upstream). ``checkout=False`` moves only the branch
        (for a worktree deleted straight after; its files and index then lag ``HEAD`` until
        :meth:`checkout_head`).
        """
        pygit2 = libgit2()
        try:
            replayed = self._replay(onto)
            if replayed is None:
                return None
            tip = self._repo[replayed[-1]]
            if checkout:
                try:
                    self._repo.checkout_tree(tip.tree, strategy=pygit2.enums.CheckoutStrategy.FORCE)
                except (OSError, pygit2.GitError):
                    # Written part-way (a full disk): the branch has not moved, so its files go back.
                    with contextlib.suppress(OSError, pygit2.GitError):
                        self._repo.checkout_head(strategy=pygit2.enums.CheckoutStrategy.FORCE)
                    raise
            branch = self._repo.references["HEAD"].resolve().name
            self._repo.references.create(branch, tip.id, force=True)
        except (KeyError, ValueError, pygit2.GitError) as error:
            raise self._fail("rebase", error) from error
        return tuple(str(oid) for oid in replayed)

    def checkout_head(self) -> None:
        """``git reset --hard`` to ``HEAD`` in-process: index and files match ``HEAD`` again."""
        pygit2 = libgit2()
        try:
            self._repo.checkout_head(strategy=pygit2.enums.CheckoutStrategy.FORCE)
        except (KeyError, ValueError, pygit2.GitError) as error:
            raise self._fail("reset", error) from error

    def _replay(self, onto: str) -> list[Any] | None:
        pygit2 = libgit2()
        repo = self._repo
        base = repo.revparse_single(onto).peel(pygit2.Commit)
        picks = [repo[oid] for oid in self.commits(onto, "HEAD")]
        if not picks or any(len(commit.parent_ids) != 1 for commit in picks):
            return None
        committer = pygit2.Signature(HARNESS_NAME, HARNESS_EMAIL)
        replayed: list[Any] = []
        for commit in picks:
            parent = repo[commit.parent_ids[0]]
            if commit.tree_id == parent.tree_id:
                return None
            merged = repo.merge_trees(parent.tree, base.tree, commit.tree)
            if merged.conflicts is not None:
                return None
            tree = merged.write_tree(repo)
            if tree == base.tree_id:
                return None
            encoding = commit.message_encoding
            details = (None, commit.author, committer, commit.raw_message, tree, [base.id])
            oid = repo.create_commit(*details, encoding) if encoding else repo.create_commit(*details)
            replayed.append(oid)
            base = repo[oid]
        return replayed

    def prune_worktrees(self) -> tuple[str, ...]:
        """``git worktree prune``: forget linked worktrees whose folder is gone (unless locked);
        returns the administrative names removed."""
        admin = self.common_dir / "worktrees"
        pruned: list[str] = []
        try:
            names = sorted(os.listdir(admin))
        except FileNotFoundError:
            return ()
        for name in names:
            record = admin / name
            if (record / "locked").exists():
                continue
            try:
                pointer = Path((record / "gitdir").read_text(encoding="utf-8", errors="surrogateescape").strip())
            except FileNotFoundError:
                pointer = None
            except OSError:
                continue
            if pointer is None or not pointer.exists():
                shutil.rmtree(record, ignore_errors=True)
                pruned.append(name)
        with contextlib.suppress(OSError):
            admin.rmdir()
        return tuple(pruned)



def _no_space(error: BaseException) -> bool:
    """Whether ``error`` says the disk (or quota) is full; libgit2 says so in its message only."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return "No space left on device" in str(error) or "Disk quota exceeded" in str(error)

