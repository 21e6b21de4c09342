"""The git seam: every git process reverie starts goes through :func:`run` or :func:`arun`.

One place owns what used to differ between six callers:

* **timeouts**: :data:`LOCAL_TIMEOUT` for commands on local repositories, :data:`NETWORK_TIMEOUT`
  for ``push``/``pull``/``fetch``; a command that overruns is killed and reported as a
  :class:`GitError` (``returncode`` -9), never left running;
* **environment**: git never prompts (``GIT_TERMINAL_PROMPT=0``, editors are ``true``), messages
  are in English (``LC_ALL=C``: callers classify failures from them), and the location variables
  a surrounding git process may have exported (``GIT_DIR``, ``GIT_INDEX_FILE``, ...) are removed
  unless the caller runs *inside* a git hook and wants exactly those (``inherit_location=True``);
  ``harness=True`` adds reverie's own identity, unsigned commits and bypassed hooks (reverie
  validates in-process, DECISIONS S21);
* **encoding**: output is kept as bytes (``out``/``err``); ``stdout``/``stderr`` decode it as UTF-8
  with ``surrogateescape``, so a path that is not UTF-8 round-trips to the bytes git stored (M2);
* **errors**: one :class:`GitError`, whose ``str()`` is one line naming the command, the
  directory and git's first ``error:``/``fatal:`` line, and which keeps all of ``stderr``.

Async callers use :func:`arun`, which runs the process in a worker thread, never on the event loop
(asyncio would spawn children on the loop thread). The thread is not abandoned on cancellation:
git always finishes or times out, so a cancelled caller never leaves a half-written index behind.
Reads that need no process (refs, trees, blobs, status) go through :mod:`orchestrator.memfs.gitlib`.
"""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import anyio.to_thread

from orchestrator.memfs.errors import MemfsError

__all__ = [
    "HARNESS_EMAIL",
    "HARNESS_NAME",
    "LOCAL_TIMEOUT",
    "NETWORK_TIMEOUT",
    "GitError",
    "GitResult",
    "arun",
    "clean_environment",
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
    """The environment a git process of reverie gets (see the module docstring)."""
    env = dict(os.environ)
    if not inherit_location:
        for name in _LOCATION_VARIABLES:
            env.pop(name, None)
    env.update(_ALWAYS)
    if harness:
        env.update(_HARNESS_IDENTITY)
    if extra:
        env.update(extra)
    return env


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

    A timeout or a git that cannot be started is a :class:`GitError` whatever ``check`` says:
    there is no result to look at.
    """
    argv = ["git", *(_HARNESS_CONFIG if harness else ()), *args]
    data = input.encode("utf-8", "surrogateescape") if isinstance(input, str) else input
    try:
        proc = subprocess.run(
            argv,
            cwd=cwd,
            env=clean_environment(env, harness=harness, inherit_location=inherit_location),
            input=data,
            capture_output=True,
            timeout=git_timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        said = (exc.stderr or b"").decode("utf-8", "replace")
        raise GitError(args, -9, f"fatal: timed out after {git_timeout:g} s\n{said}", cwd) from None
    except OSError as exc:
        raise GitError(args, -1, f"fatal: cannot run git: {exc}", cwd) from None
    result = GitResult(proc.returncode, proc.stdout, proc.stderr)
    if check and not result.ok:
        raise GitError(args, result.returncode, result.stderr or result.stdout, cwd)
    return result


async def arun(
    cwd: Path | str,
    *args: str,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    input: bytes | str | None = None,
    git_timeout: float = LOCAL_TIMEOUT,
    harness: bool = False,
) -> GitResult:
    """:func:`run` in a worker thread (not abandoned on cancellation, see the module docstring)."""
    call = functools.partial(
        run, cwd, *args, check=check, env=env, input=input, git_timeout=git_timeout, harness=harness
    )
    return await anyio.to_thread.run_sync(call)
