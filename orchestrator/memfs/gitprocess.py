"""The git process runner: every git process reverie starts goes through :func:`run`, with the
hardened environment and one error type (the git seam, ``docs/architecture.md``).

Processes are for what libgit2 cannot do as git does (the agent's commits with their hook,
conflicted rebases, push and pull, ...). The runner owns, for every caller: timeouts that kill the
whole process tree, a clean environment checked by :mod:`orchestrator.memfs.guard`, bytes output
decoded with ``surrogateescape`` (M2), and one :class:`~orchestrator.memfs.errors.GitError` whose
``str()`` is one line. :func:`run` blocks; async callers go through :mod:`orchestrator.memfs.git`.
GitPython is imported with the first git process, not with this module. The details are in
docs/architecture.md, "The git process runner"."""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Final

from orchestrator.memfs import guard
from orchestrator.memfs.errors import GitError
from orchestrator.memfs.guard import outer_environment

__all__ = [
    "HARNESS_EMAIL",
    "HARNESS_NAME",
    "LOCAL_TIMEOUT",
    "NETWORK_TIMEOUT",
    "GitResult",
    "clean_environment",
    "load_runner",
    "run",
]

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
