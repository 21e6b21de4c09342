"""The git seam: every git process reverie starts goes through :func:`run` or :func:`arun`, and
every in-process read or write of a repository through the one libgit2 handle :func:`open_repo`
holds for it.

Two ways to git, one module, chosen per job:

* **libgit2 (pygit2), in-process**: objects, trees, refs, status, worktree records, ancestry,
  fast-forwards, clean rebases and checkouts. :func:`open_repo` hands out one :class:`LocalRepo`
  per repository from an LRU pool, locked to one thread at a time; the handle carries the caches
  of parsed trees, look-ups and small blobs that the compiler reads every turn. No other module
  imports pygit2 (an import-linter contract), and there is no second reader: what the hook reads
  without libgit2 it reads with git processes (``memfs.gitsnapshot``).
* **the git CLI, through GitPython's command runner** (``git.cmd.Git.execute``): what libgit2
  cannot do as git does: the agent's and the harness's commits (the pre-commit hook, the index as
  git stages it), ``rebase`` with conflicts, ``merge --ff-only`` when libgit2 cannot tell, worktree
  removal it refuses, push and pull, diffs printed for people.

What the process runner owns, for every caller:

* **timeouts**: :data:`LOCAL_TIMEOUT` for commands on local repositories, :data:`NETWORK_TIMEOUT`
  for ``push``/``pull``/``fetch``; a command that overruns is killed with its children (GitPython's
  ``kill_after_timeout``) and reported as a :class:`GitError` (``returncode`` -9), never left running;
* **environment** (:func:`clean_environment`, the hardening hook point): git never prompts
  (``GIT_TERMINAL_PROMPT=0``, editors are ``true``), messages are in English (``LC_ALL=C``: callers
  classify failures from them), and the location variables a surrounding git process may have
  exported (``GIT_DIR``, ``GIT_INDEX_FILE``, ...) are removed unless the caller runs *inside* a git
  hook and wants exactly those (``inherit_location=True``); ``harness=True`` adds reverie's own
  identity and the ``-c`` flags for unsigned commits and bypassed hooks (reverie validates
  in-process, S21);
* **encoding**: output is kept as bytes (``out``/``err``); ``stdout``/``stderr`` decode it as UTF-8
  with ``surrogateescape``, so a path that is not UTF-8 round-trips to the bytes git stored (M2);
* **errors**: one :class:`GitError` (GitPython's ``GitCommandError`` is translated here), whose
  ``str()`` is one line naming the command, the directory and git's first ``error:``/``fatal:``
  line, and which keeps all of ``stderr``; libgit2's failures become the same type.

Async callers use :func:`arun`, which runs the process in a worker thread, never on the event loop
(asyncio would spawn children on the loop thread). The thread is not abandoned on cancellation:
git always finishes or times out, so a cancelled caller never leaves a half-written index behind.

Why GitPython's runner rather than ``subprocess`` directly: the project's design names it, and it
brings the timeout that kills a command's whole process tree; it costs ~45 ms to import, so it is
imported with the first git process (:func:`_gitpython`), not with this module, which the hook and
every command import.

Longer than most modules on purpose: the seam is the one place that knows how reverie talks to git
(O1), so the process runner and the in-process handle live together, in two sections.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import shutil
import sys
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Final, Generic, TypeVar

from orchestrator.base import blocking
from orchestrator.base.errors import UsageError
from orchestrator.memfs import guard
from orchestrator.memfs.errors import MemfsError
from orchestrator.memfs.guard import outer_environment

__all__ = [
    "HARNESS_EMAIL",
    "HARNESS_NAME",
    "LOCAL_TIMEOUT",
    "MAX_TREE_BYTES",
    "MAX_TREE_DEPTH",
    "MAX_TREE_PATHS",
    "NETWORK_TIMEOUT",
    "GitError",
    "REPOS",
    "GitResult",
    "LocalRepo",
    "PathLRU",
    "RepoPool",
    "Revision",
    "TreeCount",
    "TreeEntry",
    "TreeTooLarge",
    "arun",
    "ask",
    "clean_environment",
    "common_dir",
    "display_path",
    "list_tree_entries",
    "load_pygit2",
    "load_runner",
    "open_local",
    "open_repo",
    "read_tree_files",
    "run",
    "using_repo",
]

T = TypeVar("T")
V = TypeVar("V")

HARNESS_NAME: Final = "Reverie"
HARNESS_EMAIL: Final = "noreply@reverie.invalid"
LOCAL_TIMEOUT: Final = 60.0
NETWORK_TIMEOUT: Final = 300.0

_LOCATION_VARIABLES: Final = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_COMMON_DIR",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
)
_ALWAYS: Final = {
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_EDITOR": "true",
    "GIT_SEQUENCE_EDITOR": "true",
    "LC_ALL": "C",
}
_HARNESS_IDENTITY: Final = {
    "GIT_AUTHOR_NAME": HARNESS_NAME,
    "GIT_AUTHOR_EMAIL": HARNESS_EMAIL,
    "GIT_COMMITTER_NAME": HARNESS_NAME,
    "GIT_COMMITTER_EMAIL": HARNESS_EMAIL,
}
_HARNESS_CONFIG: Final = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "commit.gpgsign=false",
    "-c",
    "tag.gpgsign=false",
    "-c",
    "core.quotePath=false",
    "-c",
    "advice.detachedHead=false",
)


class GitError(MemfsError, RuntimeError):
    """A git command (or an in-process git operation) failed.

    ``str()`` is one line: ``git <command> failed in <dir> (<code>): <git's first error line>``.
    ``git_args``, ``returncode`` and ``stderr`` (everything git said) let callers classify it.
    """

    def __init__(self, args: Sequence[str], returncode: int, stderr: str, cwd: Path | str | None = None) -> None:
        self.git_args = tuple(args)
        self.returncode = returncode
        self.stderr = stderr
        self.cwd = None if cwd is None else Path(cwd)
        where = f" in {cwd}" if cwd is not None else ""
        super().__init__(f"git {' '.join(self.git_args[:3])} failed{where} ({returncode}): {_first_error(stderr)}")


def _first_error(said: str) -> str:
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(("error:", "fatal:"))]
    if errors:
        return errors[0]
    return lines[0] if lines else "no output"


@dataclass(frozen=True)
class GitResult:
    """What one git process returned; ``out``/``err`` are the raw bytes."""

    returncode: int
    out: bytes
    err: bytes

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def stdout(self) -> str:
        return self.out.decode("utf-8", "surrogateescape")

    @property
    def stderr(self) -> str:
        return self.err.decode("utf-8", "replace")


def clean_environment(
    extra: Mapping[str, str] | None = None, *, harness: bool = False, inherit_location: bool = False
) -> dict[str, str]:
    """The environment a git process of reverie gets (see the module docstring), before the
    hardening of :mod:`orchestrator.memfs.guard`: never an API key (a program git runs would see it)."""
    env = outer_environment(os.environ)
    if not inherit_location:
        for name in _LOCATION_VARIABLES:
            env.pop(name, None)
    env.update(_ALWAYS)
    if harness:
        env.update(_HARNESS_IDENTITY)
    if extra:
        env.update(extra)
    return env


_CREATES: Final = frozenset({"init", "clone"})
_DIFFS: Final = frozenset({"diff", "log", "show", "format-patch", "whatchanged"})
_VALUED_OPTIONS: Final = frozenset({"-c", "-C", "--git-dir", "--work-tree", "--namespace", "--config-env"})


def _split_command(args: Sequence[str]) -> tuple[list[str], str | None, list[str]]:
    """(options before the subcommand, the subcommand, its arguments)."""
    i = 0
    while i < len(args):
        if args[i] in _VALUED_OPTIONS:
            i += 2
        elif args[i].startswith("-"):
            i += 1
        else:
            return list(args[:i]), args[i], list(args[i + 1 :])
    return list(args), None, []


def _hardened(
    cwd: Path | str, args: Sequence[str], env: dict[str, str], *, inherit_location: bool
) -> tuple[list[str], dict[str, str]]:
    """``args`` and ``env`` as the guard wants them (:mod:`orchestrator.memfs.guard`): the layout
    checked and pinned, every setting able to run a program overridden, diff drivers off."""
    options, command, rest = _split_command(args)
    layout = None if command in _CREATES else guard.locate(cwd)
    env.update(guard.hardening(layout, functools.partial(_listing, env)))
    if layout is not None and not (inherit_location and "GIT_DIR" in env):
        env.update(layout.environment())
    if command in _DIFFS:
        return [*options, command, "--no-ext-diff", "--no-textconv", *rest], env
    return list(args), env


def _listing(env: Mapping[str, str], layout: guard.Layout | None) -> list[tuple[str, str]]:
    """Every setting git reads for ``layout`` (``git config`` runs nothing it names)."""
    where = dict(env, **(layout.environment() if layout is not None else {}))
    for name in [n for n in where if n.startswith("GIT_CONFIG_")]:
        where.pop(name)
    cwd = layout.top if layout is not None else Path.cwd()
    returncode, out, err = _execute(
        ["git", "config", "--list", "--show-scope", "--includes", "-z"], cwd, dict(where), None, LOCAL_TIMEOUT
    )
    if returncode == _TIMED_OUT:
        raise GitError(("config", "--list"), -9, f"fatal: cannot read git's configuration: timed out\n{err!r}", cwd)
    return guard.parse_listing(out)


def run(
    cwd: Path | str,
    *args: str,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    input: bytes | str | None = None,
    git_timeout: float = LOCAL_TIMEOUT,
    harness: bool = False,
    inherit_location: bool = False,
) -> GitResult:
    """Run ``git <args>`` in ``cwd`` (blocking); raise :class:`GitError` on failure when ``check``.

    A timeout, a ``cwd`` that is not a directory or a git that cannot be started is a
    :class:`GitError` whatever ``check`` says: there is no result to look at. A repository whose
    layout the guard refuses raises :class:`~orchestrator.memfs.guard.RepositoryRefused` before any
    process starts.
    """
    if not os.path.isdir(cwd):
        raise GitError(args, -1, f"fatal: cannot run git: {cwd} is not a directory", cwd)
    base = clean_environment(env, harness=harness, inherit_location=inherit_location)
    hardened, full_env = _hardened(cwd, args, base, inherit_location=inherit_location)
    argv = ["git", *(_HARNESS_CONFIG if harness else ()), *hardened]
    data = input.encode("utf-8", "surrogateescape") if isinstance(input, str) else input
    returncode, out, err = _execute(argv, cwd, full_env, data, git_timeout)
    if returncode == _TIMED_OUT:
        raise GitError(args, -9, f"fatal: timed out after {git_timeout:g} s\n{err.decode('utf-8', 'replace')}", cwd)
    result = GitResult(returncode, out, err)
    if check and not result.ok:
        raise GitError(args, result.returncode, result.stderr or result.stdout, cwd)
    return result


_TIMED_OUT: Final = -(2**31)


def _execute(
    argv: list[str], cwd: Path | str, environment: dict[str, str], data: bytes | None, timeout: float
) -> tuple[int, bytes, bytes]:
    """The execution step: ``argv`` run by GitPython's command runner (``git.cmd.Git.execute``),
    which kills the process (and its children) when ``timeout`` passes; ``(returncode, stdout,
    stderr)``, ``returncode`` :data:`_TIMED_OUT` after a kill. :class:`GitError`, naming the OS's
    reason, when git cannot be started (GitPython's ``GitCommandNotFound``; an ``OSError`` such as
    a git that may not be executed, which GitPython lets through).

    ``Git.execute`` starts from ``os.environ`` and only adds to it, so the variables the
    environment builder and the guard removed (:func:`clean_environment`: an API key, a surrounding
    git's ``GIT_DIR``, ``GIT_CONFIG_*`` for the configuration listing) and that this process has are
    unset by ``env -u`` in front of git: one more exec (~1 ms) per git process when there are any,
    none otherwise. Empty values would not do instead: git reads an empty ``GIT_DIR`` as a path. Input is handed
    over as a file (``istream``): a pipe filled before git starts when it fits in one, else a
    temporary file. GitPython hands ``stderr`` back decoded (``surrogateescape``), without its
    last newline; it is encoded back to the bytes git wrote."""
    gitcmd = _gitpython()
    unset = [name for name in os.environ if name not in environment]
    command = ["env", *(part for name in unset for part in ("-u", name)), *argv] if unset else argv
    with _input_stream(data) as stream:
        try:
            returncode, out, said = gitcmd.Git(cwd).execute(
                command,
                istream=stream,
                env=environment,
                with_extended_output=True,
                with_exceptions=False,
                stdout_as_string=False,
                strip_newline_in_stdout=False,
                kill_after_timeout=timeout,
            )
        except (gitcmd.CommandError, OSError) as error:  # GitCommandNotFound too: no git to start
            why = error.__cause__ if isinstance(error.__cause__, OSError) else error
            raise GitError(argv[1:], -1, f"fatal: cannot run git: {why}", cwd) from None
    err = said.encode("utf-8", "surrogateescape")
    if returncode == -9 and err.startswith(b"Timeout: "):
        return _TIMED_OUT, out, err
    return returncode, out, err


_PIPE_HOLDS: Final = 16 * 1024
"""Input up to this size is written into a pipe before git starts (a pipe holds at least this)."""


@contextmanager
def _input_stream(data: bytes | None) -> Iterator[Any]:
    """``data`` as a readable file for git's standard input (None: git reads nothing)."""
    if data is None:
        yield None
        return
    if len(data) <= _PIPE_HOLDS:
        read, write = os.pipe()
        try:
            os.write(write, data)
        finally:
            os.close(write)
        with os.fdopen(read, "rb") as stream:
            yield stream
        return
    with tempfile.TemporaryFile() as stream:
        stream.write(data)
        stream.seek(0)
        yield stream


def _gitpython() -> ModuleType:
    """GitPython's ``git.cmd``, imported on the first git process: it costs ~45 ms and runs ``git
    version`` once, which a ``reverie`` command that starts no git (``--help``, ``runs``) need not
    pay. A missing git is the :class:`GitError` of the first command, not an import failure, and
    one line whichever way it is found missing: GitPython's import fails with a paragraph ("Bad git
    executable" and advice), so a git not on ``PATH`` is named as the OS would (``[Errno 2]``, as a
    command run after the import reports it) and anything else by that paragraph's first line."""
    try:
        import git.cmd
    except ImportError as error:
        if shutil.which("git") is None:
            why = f"[Errno {errno.ENOENT}] {os.strerror(errno.ENOENT)}: 'git' (not on PATH)"
        else:
            why = (str(error).strip().splitlines() or ["GitPython could not be loaded"])[0]
        raise GitError(("version",), -1, f"fatal: cannot run git: {why}") from None
    return git.cmd


def load_runner() -> None:
    """Import GitPython's command runner now rather than with the first git process (a batch run,
    before its clock and before its workers fork: its first git process builds the template every
    task waits for, so the ~60 ms import and ``git version`` held up the whole run). Without a
    usable git this does nothing: the first command says so, as it would have."""
    with contextlib.suppress(GitError):
        _gitpython()


async def arun(
    cwd: Path | str,
    *args: str,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    input: bytes | str | None = None,
    git_timeout: float = LOCAL_TIMEOUT,
    harness: bool = False,
) -> GitResult:
    """:func:`run` in a worker thread behind the ``git`` limiter (``base.blocking``), not abandoned
    on cancellation (see the module docstring)."""
    call = functools.partial(
        run, cwd, *args, check=check, env=env, input=input, git_timeout=git_timeout, harness=harness
    )
    return await blocking.run_sync("git", call)


# ---------------------------------------------------------------------------------------------
# In-process git (libgit2 through pygit2): reads, status, refs and worktree records
# ---------------------------------------------------------------------------------------------


def _pygit2() -> ModuleType:
    """pygit2, imported on first use: the pre-commit hook imports this module for :func:`run` and
    must not pay libgit2's ~60 ms import on every commit typed by hand."""
    import pygit2

    return pygit2


def load_pygit2() -> None:
    """Import libgit2 now rather than on the first in-process read (a command's start, a batch
    run's before its clock), without its certificate bundle when it can.

    pygit2's import parses the system's CA bundle twice (libgit2's OpenSSL set-up, then pygit2's
    default locations): ~100M instructions, ~25 ms, for TLS that reverie never asks of libgit2
    (push and pull are git processes). OpenSSL and pygit2 read the bundle's path from
    ``SSL_CERT_FILE``, so the import runs with it pointed at ``os.devnull`` (no file: nothing parsed;
    the certificate directory, read lazily, stays) and the variable is put back after. Changing the
    process environment is only safe while no other thread can read it, so this is done only when
    this is the process's one thread, and only for a directory pygit2 can fall back on; otherwise
    (or when pygit2 is already in) it is the plain import."""
    if "pygit2" in sys.modules:
        return
    if threading.active_count() > 1 or not os.path.isdir(_cert_dir()):
        _pygit2()
        return
    saved = os.environ.get("SSL_CERT_FILE")
    os.environ["SSL_CERT_FILE"] = os.devnull
    try:
        _pygit2()
    finally:
        if saved is None:
            del os.environ["SSL_CERT_FILE"]
        else:
            os.environ["SSL_CERT_FILE"] = saved


def _cert_dir() -> str:
    """The certificate directory pygit2 will fall back on (its ``capath``, as OpenSSL names it)."""
    # lazy: only a command's start asks, and pygit2 imports ssl right after
    import ssl

    paths = ssl.get_default_verify_paths()
    return os.environ.get(paths.openssl_capath_env, paths.openssl_capath)


_KIND_NAMES: Final = {1: "commit", 2: "tree", 3: "blob", 4: "tag"}
_TREE_MODE: Final = "40000"
_SYMLINK_MODE: Final = "120000"
_GITLINK_MODE: Final = "160000"


@dataclass(frozen=True, slots=True)
class Revision:
    """A resolved commit and its root tree (both full hex object ids)."""

    commit: str
    tree: str


@dataclass(frozen=True, slots=True)
class TreeEntry:
    """One tree entry; ``path`` is repository-relative with ``/`` separators, exactly the bytes
    stored in the tree decoded as UTF-8 (M2, S14): no quoting, no trimming; bytes that
    are not UTF-8 are kept with ``surrogateescape`` so the name round-trips (:func:`display_path`
    gives printable text)."""

    path: str
    mode: str
    oid: str

    @property
    def name(self) -> str:
        return self.path.rpartition("/")[2]

    @property
    def is_tree(self) -> bool:
        return self.mode == _TREE_MODE

    @property
    def is_symlink(self) -> bool:
        return self.mode == _SYMLINK_MODE

    @property
    def is_submodule(self) -> bool:
        return self.mode == _GITLINK_MODE

    @property
    def is_regular_file(self) -> bool:
        return self.mode.startswith("100")

    @property
    def is_blob(self) -> bool:
        """A file or a symlink (read as its target text)."""
        return self.is_regular_file or self.is_symlink


def display_path(path: str) -> str:
    """``path`` as printable text: undecodable bytes (kept as surrogates) become U+FFFD."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return path


# ---------------------------------------------------------------------------------------------
# Bounded tree reads
# ---------------------------------------------------------------------------------------------

MAX_TREE_PATHS: Final = 50_000
"""Entries (files and folders) one walk of a committed tree lists before it stops. Real memory is
tens to a few thousand files; a tree object can name the same subtree many times, so ~100 bytes of
objects can stand for 10^7 paths, and listing them all cost every turn (A11)."""
MAX_TREE_DEPTH: Final = 256
"""Path segments one entry may have. The layout's own limit (``maxDepth``) is a handful; a chain of
thousands of one-entry trees is a few hundred bytes and would nest deeper than any walk should go."""
MAX_TREE_BYTES: Final = 8 * 1024 * 1024
"""Bytes of path names (UTF-8, as stored) one walk lists: what its listing holds in memory, so long
names at the path cap cannot make it gigabytes."""


class TreeTooLarge(GitError):
    """A committed tree over one of the caps above, found while counting (nothing past the cap is
    read). ``str()`` is one line naming the cap and the path where it was reached; ``cap`` is the
    constant's name."""

    def __init__(self, cap: str, detail: str, path: str, cwd: Path | str | None = None) -> None:
        super().__init__(("ls-tree",), 128, f"fatal: {detail}", cwd)
        self.cap = cap
        self.path = path
        self.args = (f"{_shown(path)}: the committed tree {detail} ({cap}); it is not read further",)


def _shown(path: str) -> str:
    """``path`` on one short line: control characters escaped, the middle of a long one left out."""
    text = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in display_path(path))
    return text if len(text) <= 160 else f"{text[:100]}…{text[-50:]}"


class TreeCount:
    """The running count of one walk: :meth:`add` each entry as it is reached, before anything
    below it is read, and it raises :class:`TreeTooLarge` at the first cap passed."""

    def __init__(self, cwd: Path | str | None = None) -> None:
        self.paths = 0
        self.bytes = 0
        self._cwd = cwd

    def add(self, path: str, depth: int) -> None:
        """Count ``path``, ``depth`` segments deep."""
        self.paths += 1
        self.bytes += len(path.encode("utf-8", "surrogateescape")) + 1
        if depth > MAX_TREE_DEPTH:
            raise TreeTooLarge("MAX_TREE_DEPTH", f"nests deeper than {MAX_TREE_DEPTH} folders", path, self._cwd)
        if self.paths > MAX_TREE_PATHS:
            raise TreeTooLarge("MAX_TREE_PATHS", f"holds more than {MAX_TREE_PATHS} paths", path, self._cwd)
        if self.bytes > MAX_TREE_BYTES:
            raise TreeTooLarge("MAX_TREE_BYTES", f"has more than {MAX_TREE_BYTES} bytes of path names", path, self._cwd)

    def width(self, path: str, entries: int) -> None:
        """A tree at ``path`` with ``entries`` entries, checked before they are parsed."""
        if self.paths + entries > MAX_TREE_PATHS:
            raise TreeTooLarge("MAX_TREE_PATHS", f"holds more than {MAX_TREE_PATHS} paths", path or "/", self._cwd)


class LocalRepo:
    """One repository (a main checkout or a linked worktree) opened in-process: the one libgit2
    handle reverie holds for it, and the caches of what it read through that handle.

    libgit2 objects are not thread-safe: a ``LocalRepo`` is used by one thread at a time, which
    :meth:`RepoPool.open` guarantees by holding :attr:`lock`. Every libgit2 failure is re-raised
    as :class:`GitError`; a name that resolves to nothing is ``None``, not an error.

    The compiler reads every memory file on every turn, so parsed trees, ``<tree>:<name>``
    look-ups and small blobs are cached by object id (objects never change; a bounded LRU each).
    Refs and ``HEAD`` are always asked of libgit2, which re-reads them when their files change.
    """

    _TREE_CACHE_ENTRIES: Final = 20_000
    _LOOKUP_CACHE_SIZE: Final = 4_096
    _BLOB_CACHE_BYTES: Final = 2 * 1024 * 1024
    _BLOB_CACHE_MAX_BLOB: Final = 128 * 1024

    def __init__(self, handle: Any, top_level: Path) -> None:
        self._repo = handle
        self.top_level = top_level
        self.git_dir = Path(handle.path).resolve()
        self.lock = threading.Lock()
        self.evicted = False
        self._trees: OrderedDict[str, tuple[tuple[str, str, str], ...]] = OrderedDict()
        self._cached_tree_entries = 0
        self._lookups: OrderedDict[tuple[str, str], tuple[str, str] | None] = OrderedDict()
        self._verdicts: OrderedDict[str, TreeTooLarge | None] = OrderedDict()
        self._blobs: OrderedDict[str, bytes] = OrderedDict()
        self._cached_blob_bytes = 0

    @functools.cached_property
    def common_dir(self) -> Path:
        """The git directory shared by the main checkout and all linked worktrees (a git directory's
        ``commondir`` never changes: read once per handle)."""
        pointer = self.git_dir / "commondir"
        try:
            return (self.git_dir / pointer.read_text(encoding="utf-8").strip()).resolve()
        except FileNotFoundError:
            return self.git_dir

    def _fail(self, what: str, error: Exception) -> GitError:
        return GitError((what,), 128, f"fatal: {error}", self.top_level)

    def forget(self) -> None:
        """Drop the caches and libgit2's (when the pool lets the handle go): its open files and
        object cache are released now, not when the cycle collector reaches the handle."""
        self._trees.clear()
        self._lookups.clear()
        self._verdicts.clear()
        self._blobs.clear()
        self._cached_tree_entries = self._cached_blob_bytes = 0
        with contextlib.suppress(Exception):
            self._repo.free()

    def read(self, oid: str) -> tuple[str, bytes] | None:
        """(object type, raw bytes) of ``oid`` exactly as stored, or None when it is missing."""
        pygit2 = _pygit2()
        try:
            kind, data = self._repo.odb.read(oid)
        except (KeyError, ValueError):
            return None
        except pygit2.GitError as error:
            raise self._fail("cat-file", error) from error
        return _KIND_NAMES.get(int(kind), "unknown"), bytes(data)

    def staged(self, index_file: str | None = None) -> tuple[tuple[tuple[str, str, str], ...], dict[str, str]]:
        """What ``git ls-files -s`` and ``git diff --cached --name-status`` (rename detection on, as
        git's default) say of the index ``index_file`` (default the repository's own): ``(path,
        mode, oid)`` of every entry, and ``{path: status letter}`` against ``HEAD``, a rename or copy
        under its new path. The pre-commit hook's service reads a commit's index this way, with no
        git process (``memfs/hook_service.py``)."""
        pygit2 = _pygit2()
        try:
            if index_file:
                index = pygit2.Index(index_file)
            else:
                index = self._repo.index
                index.read()
            entries: dict[str, tuple[str, str, str]] = {}
            for entry in index:
                entries.setdefault(entry.path, (entry.path, f"{entry.mode:06o}", str(entry.id)))
            head = self.resolve("HEAD")
            if head is None or self.oversized(head[1]) is not None:
                # no HEAD, or one over a cap (diffing it would list all it expands to): all is new
                return tuple(entries.values()), dict.fromkeys(entries, "A")
            diff = self._repo[head[1]].diff_to_index(index)
            diff.find_similar()
        except (KeyError, ValueError, pygit2.GitError) as error:
            raise self._fail("diff --cached", error) from error
        changes: dict[str, str] = {}
        for delta in diff.deltas:
            letter = delta.status_char()
            path = delta.new_file.path if letter in ("R", "C", "A") else delta.old_file.path
            if {letter, changes.get(path)} == {"A", "D"}:
                letter = "T"  # libgit2 splits a type change (file <-> symlink) into a delete and an add
            changes[path] = letter
        return tuple(entries.values()), changes

    def resolve(self, revision: str = "HEAD") -> tuple[str, str] | None:
        """(commit, tree) that ``revision`` names, peeled to a commit; None when it names none."""
        pygit2 = _pygit2()
        try:
            commit = self._repo.revparse_single(revision).peel(pygit2.Commit)
        except (KeyError, ValueError, pygit2.GitError):
            return None
        return str(commit.id), str(commit.tree_id)

    def revision(self, revision: str = "HEAD") -> Revision | None:
        """The commit ``revision`` names (peeled) and its tree, or None (no such commit, an unborn
        branch, a name with whitespace)."""
        if not revision or any(ch.isspace() for ch in revision):
            return None
        found = self.resolve(revision)
        return None if found is None else Revision(commit=found[0], tree=found[1])

    def _tree(self, tree_oid: str, count: TreeCount | None = None, path: str = "") -> tuple[tuple[str, str, str], ...]:
        """``(name, mode, oid)`` of each entry of ``tree_oid`` in stored order, cached. ``count``
        (the walk's; default a fresh one) is told the number of entries before any is parsed, so one
        tree object of millions of entries is refused as a whole (``path``: where it is)."""
        cached = self._trees.get(tree_oid)
        if cached is not None:
            self._trees.move_to_end(tree_oid)
            return cached
        pygit2 = _pygit2()
        try:
            tree = self._repo[tree_oid]
            if not isinstance(tree, pygit2.Tree):
                raise KeyError(tree_oid)
            (count or TreeCount(self.top_level)).width(path, len(tree))
            parsed = tuple(
                (entry.raw_name.decode("utf-8", "surrogateescape"), f"{entry.filemode:o}", str(entry.id))
                for entry in tree
            )
        except (KeyError, ValueError, pygit2.GitError):
            raise GitError(("ls-tree",), 128, f"fatal: tree {tree_oid} is missing", self.top_level) from None
        if len(parsed) <= self._TREE_CACHE_ENTRIES // 4:
            self._trees[tree_oid] = parsed
            self._cached_tree_entries += len(parsed)
            while self._cached_tree_entries > self._TREE_CACHE_ENTRIES:
                _, dropped = self._trees.popitem(last=False)
                self._cached_tree_entries -= len(dropped)
        return parsed

    def tree_entries(self, tree_oid: str, prefix: str = "") -> list[TreeEntry]:
        """Entries of one tree, in stored (git) order; ``prefix`` is the tree's own path.
        :class:`TreeTooLarge` when it alone has more than :data:`MAX_TREE_PATHS` entries."""
        lead = f"{prefix}/" if prefix else ""
        return [TreeEntry(lead + name, mode, oid) for name, mode, oid in self._tree(tree_oid, path=prefix)]

    def walk(self, tree_oid: str, prefix: str = "") -> Iterator[TreeEntry]:
        """Every non-tree entry below ``tree_oid``, in ``git ls-tree -r`` order, iteratively (a
        stack of open folders, never Python recursion). Each entry is counted as it is reached, so
        a tree over :data:`MAX_TREE_PATHS`, :data:`MAX_TREE_DEPTH` or :data:`MAX_TREE_BYTES` raises
        :class:`TreeTooLarge` after at most that much work, whatever it would expand to."""
        count = TreeCount(self.top_level)
        start = len(prefix.split("/")) if prefix else 0
        stack = [(iter(self._tree(tree_oid, count, prefix)), prefix, start)]
        while stack:
            entries, lead, depth = stack[-1]
            item = next(entries, None)
            if item is None:
                stack.pop()
                continue
            name, mode, oid = item
            path = f"{lead}/{name}" if lead else name
            count.add(path, depth + 1)
            if mode == _TREE_MODE:
                stack.append((iter(self._tree(oid, count, path)), path, depth + 1))
            else:
                yield TreeEntry(path, mode, oid)

    def oversized(self, tree_oid: str) -> TreeTooLarge | None:
        """Why ``tree_oid`` is over a cap (None when every walk of it fits), cached per tree: asked
        before libgit2 itself compares the tree with something (status, the staged diff), which it
        would do for every path, with no cap."""
        if tree_oid not in self._verdicts:
            verdict: TreeTooLarge | None = None
            try:
                for _ in self.walk(tree_oid):
                    pass
            except TreeTooLarge as error:
                verdict = error
            self._verdicts[tree_oid] = verdict
            if len(self._verdicts) > self._LOOKUP_CACHE_SIZE:
                self._verdicts.popitem(last=False)
        return self._verdicts[tree_oid]

    def files(self, tree_oid: str, prefix: str = "") -> Iterator[tuple[str, str, str]]:
        """``(path, mode, oid)`` of every non-tree entry below ``tree_oid``, as ``git ls-tree -r``."""
        for entry in self.walk(tree_oid, prefix.rstrip("/")):
            yield entry.path, entry.mode, entry.oid

    def lookup(self, tree_oid: str, name: str) -> tuple[str, str] | None:
        """(oid, object type) of the entry ``name`` directly inside ``tree_oid``, without listing
        it (libgit2 searches the sorted tree: one small look-up in a folder of thousands), cached."""
        key = (tree_oid, name)
        if key in self._lookups:
            self._lookups.move_to_end(key)
            return self._lookups[key]
        result: tuple[str, str] | None = None
        if "\n" not in name and name not in ("", ".", ".."):
            result = self.entry(tree_oid, name)
        self._lookups[key] = result
        if len(self._lookups) > self._LOOKUP_CACHE_SIZE:
            self._lookups.popitem(last=False)
        return result

    def read_blob(self, oid: str) -> bytes | None:
        """The blob's bytes (a symlink's target text), or None if it is missing or not a blob.
        Small blobs are cached by object id: the same core files are read on every turn."""
        cached = self._blobs.get(oid)
        if cached is not None:
            self._blobs.move_to_end(oid)
            return cached
        found = self.read(oid)
        if found is None or found[0] != "blob":
            return None
        data = found[1]
        if len(data) <= self._BLOB_CACHE_MAX_BLOB:
            self._blobs[oid] = data
            self._cached_blob_bytes += len(data)
            while self._cached_blob_bytes > self._BLOB_CACHE_BYTES:
                _, dropped = self._blobs.popitem(last=False)
                self._cached_blob_bytes -= len(dropped)
        return data

    def ever_had(self, revision: str, path: str) -> bool:
        """Whether any commit reachable from ``revision`` has ``path`` (so ``git log -1 revision --
        path`` names one)."""
        pygit2 = _pygit2()
        try:
            start = self._repo.revparse_single(revision).peel(pygit2.Commit)
            for commit in self._repo.walk(start.id):
                if path in commit.tree:
                    return True
        except (KeyError, ValueError, pygit2.GitError):
            return False
        return False

    def head(self) -> str | None:
        """The commit ``HEAD`` points at; None while the branch is unborn."""
        found = self.resolve("HEAD")
        return None if found is None else found[0]

    def entry(self, tree_oid: str, path: str) -> tuple[str, str] | None:
        """(oid, type) of ``path`` below tree ``tree_oid`` (``<tree>:<path>``), else None."""
        pygit2 = _pygit2()
        try:
            tree = self._repo[tree_oid]
            found = tree[path]
        except (KeyError, ValueError, TypeError, UnicodeEncodeError, pygit2.GitError):
            return None
        return str(found.id), found.type_str

    def status(self, untracked: str = "normal") -> tuple[tuple[str, str], ...]:
        """``(XY, path)`` as ``git status --porcelain=v1 --untracked-files=<untracked>`` gives them
        (``normal`` collapses untracked folders, ``all`` lists their files; ignored files are left
        out; any conflict reads ``UU``; renames are not detected, so one is a deletion and an
        addition)."""
        pygit2 = _pygit2()
        head = self.resolve("HEAD")
        if head is not None and self.oversized(head[1]) is not None:
            return self._unstaged(untracked)
        try:
            found = self._repo.status(untracked_files=untracked, ignored=False)
        except pygit2.GitError as error:
            raise self._fail("status", error) from error
        return tuple(sorted(((_porcelain_code(int(flags)), path) for path, flags in found.items()), key=_by_path))

    def _unstaged(self, untracked: str) -> tuple[tuple[str, str], ...]:
        """:meth:`status` of the work tree against the index only (``" M"``, ``" D"``, ``" T"``,
        ``"??"``), for a ``HEAD`` whose tree is over a cap: comparing it with the index would list
        every path it expands to. The audit names that ``HEAD`` instead."""
        pygit2 = _pygit2()
        flags = pygit2.enums.DiffOption.NORMAL
        if untracked != "no":
            flags |= pygit2.enums.DiffOption.INCLUDE_UNTRACKED
            if untracked == "all":
                flags |= pygit2.enums.DiffOption.RECURSE_UNTRACKED_DIRS
        try:
            diff = self._repo.diff(flags=flags)
            codes = {"M": " M", "D": " D", "T": " T", "?": "??", "U": "??"}
            found = [
                (codes[delta.status_char()], delta.new_file.path if delta.status_char() != "D" else delta.old_file.path)
                for delta in diff.deltas
                if delta.status_char() in codes
            ]
        except pygit2.GitError as error:
            raise self._fail("status", error) from error
        return tuple(sorted(found, key=_by_path))

    def operation(self) -> str | None:
        """``"merge in progress"``/``"rebase in progress"`` when one was left half-done."""
        if (self.git_dir / "MERGE_HEAD").exists():
            return "merge in progress"
        if (self.git_dir / "rebase-merge").exists() or (self.git_dir / "rebase-apply").exists():
            return "rebase in progress"
        return None

    def has_remote(self, name: str = "origin") -> bool:
        try:
            return bool(self._repo.remotes[name].url)
        except (KeyError, ValueError, _pygit2().GitError):
            return False

    def config(self, key: str) -> str | None:
        try:
            value = self._repo.config[key]
        except (KeyError, ValueError, _pygit2().GitError):
            return None
        return str(value)

    def refs(self, prefix: str) -> tuple[tuple[str, str], ...]:
        """(full ref name, target oid) of every direct ref under ``prefix``, sorted by name."""
        pygit2 = _pygit2()
        out: list[tuple[str, str]] = []
        try:
            for name in self._repo.references:
                if name.startswith(prefix):
                    target = self._repo.references[name].resolve().target
                    out.append((name, str(target)))
        except pygit2.GitError as error:
            raise self._fail("for-each-ref", error) from error
        return tuple(sorted(out))

    def reflog(self, name: str) -> tuple[str, ...]:
        """``git log -g --format=%H <name>``: the commit of each reflog entry of the ref ``name``
        (full name), newest first; empty when there is no such ref or no reflog."""
        pygit2 = _pygit2()
        try:
            found = self._repo.references.get(name)
            return () if found is None else tuple(str(entry.oid_new) for entry in found.log())
        except (KeyError, ValueError, OSError, pygit2.GitError):
            return ()

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        """``git merge-base --is-ancestor``: equal commits count."""
        pygit2 = _pygit2()
        if ancestor == descendant:
            return True
        try:
            return bool(self._repo.descendant_of(descendant, ancestor))
        except (KeyError, ValueError, pygit2.GitError):
            return False

    def ahead(self, base: str, tip: str) -> int:
        """``git rev-list --count base..tip``."""
        try:
            return int(self._repo.ahead_behind(tip, base)[0])
        except (KeyError, ValueError, _pygit2().GitError):
            return 0

    def worktrees(self) -> tuple[tuple[Path, str | None], ...]:
        """``(path, branch or None when detached)`` per worktree, the main checkout first, as
        ``git worktree list`` has them (records whose folder is gone included)."""
        common = self.common_dir
        records = [(common.parent, _checked_out(common))]
        admin = common / "worktrees"
        try:
            names = sorted(os.listdir(admin))
        except FileNotFoundError:
            names = []
        for name in names:
            try:
                pointer = (admin / name / "gitdir").read_text(encoding="utf-8", errors="surrogateescape").strip()
            except OSError:
                continue
            records.append((Path(pointer).parent, _checked_out(admin / name)))
        return tuple(records)


    def dirty(self) -> bool:
        """Anything to commit or untracked (``git status --porcelain`` prints a line)."""
        return bool(self.status())

    def commits(self, base: str | None, tip: str) -> tuple[str, ...]:
        """``git rev-list --reverse --topo-order base..tip`` (all of ``tip``'s history when ``base`` is
        None): oldest first."""
        pygit2 = _pygit2()
        try:
            start = self._repo.revparse_single(tip).peel(pygit2.Commit).id
            walker = self._repo.walk(start, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)
            if base is not None:
                walker.hide(self._repo.revparse_single(base).peel(pygit2.Commit).id)
            return tuple(str(commit.id) for commit in walker)
        except (KeyError, ValueError, pygit2.GitError) as error:
            raise self._fail("rev-list", error) from error

    def first_parents(self, revision: str, count: int) -> tuple[str, ...]:
        """``git rev-list --first-parent --max-count=<count> revision``: newest first; empty when
        ``revision`` names no commit."""
        pygit2 = _pygit2()
        try:
            start = self._repo.revparse_single(revision).peel(pygit2.Commit).id
            walker = self._repo.walk(start, pygit2.enums.SortMode.TOPOLOGICAL)
            walker.simplify_first_parent()
            return tuple(str(commit.id) for _, commit in zip(range(count), walker, strict=False))
        except (KeyError, ValueError, pygit2.GitError):
            return ()

    def is_root(self, commit: str) -> bool:
        """Whether ``commit`` has no parent."""
        try:
            return not self._repo[commit].parent_ids
        except (KeyError, ValueError, _pygit2().GitError):
            return False

    def merge_base(self, one: str, other: str) -> str | None:
        pygit2 = _pygit2()
        try:
            found = self._repo.merge_base(one, other)
        except (KeyError, ValueError, pygit2.GitError):
            return None
        return None if found is None else str(found)

    def changed_paths(self, base: str, tip: str) -> tuple[str, ...]:
        """``git diff --name-only --no-renames base...tip``: paths that differ between the merge base
        and ``tip``, in git's (byte) order."""
        start = self.merge_base(base, tip)
        old = {} if start is None else self._file_map(start)
        new = self._file_map(tip)
        changed = {path for path in old.keys() | new.keys() if old.get(path) != new.get(path)}
        return tuple(sorted(changed, key=_path_bytes))

    def _file_map(self, revision: str) -> dict[str, tuple[str, str]]:
        resolved = self.resolve(revision)
        if resolved is None:
            return {}
        return {path: (mode, oid) for path, mode, oid in self.files(resolved[1])}

    def file_map(self, revision: str) -> dict[str, tuple[str, str]]:
        """``{path: (mode, oid)}`` of every file at ``revision`` (empty when it names no commit)."""
        return self._file_map(revision)

    def overlay_commit(self, revision: str, entries: Mapping[str, tuple[str, str] | None], message: str) -> str:
        """A commit (on no branch) whose parent is ``revision`` and whose tree is ``revision``'s with
        each path of ``entries`` set to ``(mode, oid)`` or removed (None). Its author, committer and
        time are fixed, so the same overlay is the same commit (and rendered once by the compiler)."""
        pygit2 = _pygit2()
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
        pygit2 = _pygit2()
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
        pygit2 = _pygit2()
        try:
            found = self._repo.references.get(name)
            if found is None or (expected is not None and str(found.target) != expected):
                return False
            found.delete()
        except (KeyError, ValueError, pygit2.GitError):
            return False
        return True

    def ref(self, name: str) -> str | None:
        """The commit the ref ``name`` (full name) points at, or None when there is no such ref."""
        try:
            return self._ref_target(name)
        except (KeyError, ValueError, _pygit2().GitError):
            return None

    def _ref_target(self, name: str) -> str | None:
        found = self._repo.references.get(name)
        return None if found is None else str(found.resolve().target)

    def add_worktree(self, path: Path, branch: str, commit: str) -> None:
        """``git worktree add -b branch path commit`` in-process: the branch at ``commit``, checked out
        in a new linked worktree whose record is named after ``path`` as git names it."""
        pygit2 = _pygit2()
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
        pygit2 = _pygit2()
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
        pygit2 = _pygit2()
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
        pygit2 = _pygit2()
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
        pygit2 = _pygit2()
        try:
            self._repo.checkout_head(strategy=pygit2.enums.CheckoutStrategy.FORCE)
        except (KeyError, ValueError, pygit2.GitError) as error:
            raise self._fail("reset", error) from error

    def _replay(self, onto: str) -> list[Any] | None:
        pygit2 = _pygit2()
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


def _checked_out(git_dir: Path) -> str | None:
    """The branch a checkout has: its ``HEAD``'s, or, mid-rebase (``HEAD`` detached), the branch
    being rebased, which git counts as checked out there too (``worktree add`` refuses it)."""
    branch = _head_branch(git_dir / "HEAD")
    if branch is not None:
        return branch
    for state in ("rebase-merge", "rebase-apply"):
        try:
            name = (git_dir / state / "head-name").read_text(encoding="utf-8", errors="surrogateescape").strip()
        except OSError:
            continue
        if name.startswith("refs/heads/"):
            return name[len("refs/heads/") :]
    return None


def _head_branch(head_file: Path) -> str | None:
    try:
        text = head_file.read_text(encoding="utf-8", errors="surrogateescape").strip()
    except OSError:
        return None
    return text[len("ref: refs/heads/") :] if text.startswith("ref: refs/heads/") else None


_INDEX_CODES: Final = ((1 << 0, "A"), (1 << 1, "M"), (1 << 2, "D"), (1 << 3, "R"), (1 << 4, "T"))
_WORKTREE_CODES: Final = ((1 << 8, "M"), (1 << 9, "D"), (1 << 10, "T"), (1 << 11, "R"))
_WT_NEW: Final = 1 << 7
_CONFLICTED: Final = 1 << 15


def _porcelain_code(flags: int) -> str:
    if flags & _CONFLICTED:
        return "UU"
    if flags & _WT_NEW and not flags & 0x1F:
        return "??"
    x = next((code for bit, code in _INDEX_CODES if flags & bit), " ")
    y = next((code for bit, code in _WORKTREE_CODES if flags & bit), " ")
    return x + y


def _identity(directory: Path) -> tuple[int, int, int] | None:
    try:
        st = (directory / ".git").stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_mode


class PathLRU(Generic[V]):
    """Handles keyed by a directory's real path, least recently used first, each held with the
    identity of the ``.git`` it was opened on, so a repository deleted and re-created at the same
    path is opened afresh. ``realpath`` lstats every component (the largest cost of a pooled open),
    so a spelling seen before is trusted while its identity still matches the held handle's."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise UsageError("size must be at least 1")
        self.size = size
        self._lock = threading.Lock()
        self._held: OrderedDict[str, tuple[Hashable, V]] = OrderedDict()
        self._real: dict[str, str] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    def find(self, directory: Path, identity: Hashable) -> tuple[str, V | None]:
        """The real path of ``directory`` and the handle held for it, if still of ``identity``."""
        spelled = os.fspath(directory)
        with self._lock:
            key = self._real.get(spelled)
            found = self._fresh(key, identity) if key is not None else None
            if key is not None and found is not None:
                return key, found
        key = os.path.realpath(directory)
        with self._lock:
            if len(self._real) >= 4 * self.size:
                self._real.clear()
            self._real[spelled] = key
            return key, self._fresh(key, identity)

    def _fresh(self, key: str, identity: Hashable) -> V | None:
        held = self._held.get(key)
        if held is None or held[0] != identity:
            return None
        self._held.move_to_end(key)
        return held[1]

    def put(self, key: str, identity: Hashable, handle: V) -> list[V]:
        """Hold ``handle``; returns those it displaced (the one it replaces, the oldest beyond ``size``)."""
        dropped: list[V] = []
        with self._lock:
            previous = self._held.pop(key, None)
            if previous is not None:
                dropped.append(previous[1])
            self._held[key] = (identity, handle)
            while len(self._held) > self.size:
                dropped.append(self._held.popitem(last=False)[1][1])
        return dropped

    def pop(self, directory: Path) -> V | None:
        """Stop holding the handle of ``directory`` (any spelling of it); returns it, if one was held."""
        spelled = os.fspath(directory)
        with self._lock:
            key = self._real.pop(spelled, None)
        key = key or os.path.realpath(directory)
        with self._lock:
            held = self._held.pop(key, None)
            for stale in [s for s, k in self._real.items() if k == key]:
                del self._real[stale]
        return None if held is None else held[1]

    def clear(self) -> list[V]:
        """Forget everything; returns the handles that were held."""
        with self._lock:
            handles = [held[1] for held in self._held.values()]
            self._held.clear()
            self._real.clear()
        return handles


class RepoPool:
    """At most ``size`` open repositories, least recently used closed first (S26).

    Keyed by the directory's real path (:class:`PathLRU`). Only a repository's top level opens: a
    plain folder inside another repository is "no repository" (M6).
    """

    def __init__(self, size: int = 256) -> None:
        self._handles: PathLRU[LocalRepo] = PathLRU(size)
        self.size = size

    def __len__(self) -> int:
        return len(self._handles)

    def _get(self, directory: Path) -> LocalRepo | None:
        identity = _identity(directory)
        if identity is None:
            return None
        key, held = self._handles.find(directory, identity)
        if held is not None:
            return held
        opened = open_local(Path(key))
        if opened is None:
            return None
        for old in self._handles.put(key, identity, opened):
            _retire(old)
        return opened

    @contextmanager
    def open(self, directory: str | os.PathLike[str]) -> Iterator[LocalRepo | None]:
        """The repository whose top level is ``directory``, locked for this thread; else None."""
        repo = self._get(Path(directory))
        if repo is None:
            yield None
            return
        with repo.lock:
            try:
                yield repo
            finally:
                if repo.evicted:
                    repo.forget()

    def discard(self, directory: str | os.PathLike[str]) -> None:
        """Let go of ``directory``'s handle now, before the folder is deleted: a removed worktree's
        handle would otherwise stay among the ``size`` held until pushed out, with libgit2's memory
        (compaction and reflection make a worktree on most turns of a long session: +16 MB of heap per
        500 turns of bench/soak.py, 470 ``pygit2.Repository`` objects)."""
        held = self._handles.pop(Path(directory))
        if held is not None:
            _retire(held)

    def close_all(self) -> None:
        """Forget every handle and its caches (libgit2 closes files when the last reference goes):
        at shutdown, in tests, before a cold bench."""
        for repo in self._handles.clear():
            _retire(repo)


def _retire(repo: LocalRepo) -> None:
    """Mark ``repo`` let go; its caches are dropped now, or by its user when it is in use."""
    repo.evicted = True
    if repo.lock.acquire(blocking=False):
        try:
            repo.forget()
        finally:
            repo.lock.release()


def open_local(directory: Path) -> LocalRepo | None:
    """A new handle on the repository whose top level is ``directory`` (resolved), else None; the
    caller owns it (pooled callers use :func:`open_repo`). The guard checks the layout first, as for
    a git process (libgit2 would follow a planted ``commondir`` too); a refused one raises
    :class:`~orchestrator.memfs.guard.RepositoryRefused`."""
    guard.locate(directory)
    pygit2 = _pygit2()
    try:
        handle = _open_top(pygit2, directory)
    except (pygit2.GitError, KeyError, ValueError, OSError):
        return None
    workdir = handle.workdir
    if workdir is None or Path(workdir).resolve() != directory:
        return None
    return LocalRepo(handle, directory)


REPOS: Final = RepoPool()


def open_repo(directory: str | os.PathLike[str]) -> AbstractContextManager[LocalRepo | None]:
    """``REPOS.open(directory)``: the in-process handle of a repository top level, or None."""
    return REPOS.open(directory)


def list_tree_entries(memory_dir: str | os.PathLike[str], revision: str = "HEAD") -> list[TreeEntry] | None:
    """Every file entry (blobs, symlinks, submodules) at ``revision``, as ``git ls-tree -r -z``.

    None when there is no revision ("no revision", MEMFS-3.2 step A / M6: a missing
    directory, not a repository, not its top level, no commits, a name that is no commit).
    Blocking. :class:`GitError` if libgit2 fails mid-walk."""
    with open_repo(memory_dir) as repo:
        if repo is None:
            return None
        resolved = repo.revision(revision)
        return None if resolved is None else list(repo.walk(resolved.tree))


def read_tree_files(
    memory_dir: str | os.PathLike[str], revision: str = "HEAD", *, markdown_only: bool = False
) -> dict[str, bytes] | None:
    """Path to content of every blob at ``revision`` (symlinks give their target text); submodule
    entries are skipped (their commits are not in this repository). None when there is no
    revision (as :func:`list_tree_entries`). Blocking. :class:`GitError` if libgit2 fails."""
    with open_repo(memory_dir) as repo:
        if repo is None:
            return None
        resolved = repo.revision(revision)
        if resolved is None:
            return None
        files: dict[str, bytes] = {}
        for entry in repo.walk(resolved.tree):
            if not entry.is_blob or (markdown_only and not entry.path.endswith(".md")):
                continue
            data = repo.read_blob(entry.oid)
            if data is not None:
                files[entry.path] = data
        return files


def _by_path(entry: tuple[str, str]) -> tuple[bool, bytes]:
    """git's porcelain order: changes to tracked paths, then untracked ones, each by path."""
    return entry[0] == "??", _path_bytes(entry[1])


def _path_bytes(path: str) -> bytes:
    return path.encode("utf-8", "surrogateescape")


def common_dir(directory: Path) -> Path:
    """The resolved git common directory of ``directory`` (in-process for a repository's top level,
    else asked of git, which also searches parent folders); :class:`GitError` when there is none."""
    with open_repo(directory) as local:
        if local is not None:
            return local.common_dir
    out = run(directory, "rev-parse", "--path-format=absolute", "--git-common-dir")
    return Path(out.stdout.strip()).resolve()


def using_repo(directory: Path | str, question: Callable[[LocalRepo], T]) -> T:
    """``question(repo)`` on the in-process handle of ``directory`` (blocking); :class:`GitError` when
    ``directory`` is not a repository's top level."""
    with open_repo(directory) as local:
        if local is None:
            raise GitError(("rev-parse",), 128, "fatal: not the top level of a git repository", directory)
        return question(local)


async def ask(directory: Path | str, question: Callable[[LocalRepo], T]) -> T:
    """:func:`using_repo` in a worker thread behind the ``git`` limiter, for async callers, e.g.
    ``await ask(worktree, lambda repo: repo.commits(head, tip))``."""
    return await blocking.run_sync("git", functools.partial(using_repo, directory, question))


def _open_top(pygit2: ModuleType, directory: Path) -> Any:
    """libgit2's handle on the repository whose top level (or git folder) is ``directory``, without
    searching parent folders."""
    return pygit2.Repository(str(directory), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
