"""The ``git`` wrapper the bash tool puts first on ``PATH`` (DECISIONS D1).

An agent's own ``git commit`` in its memory repository must take the same per-repository lock
as reverie's merge-back and post-turn sync, or a merge could be starved by a busy agent (or
refuse it). The wrapper is a small stdlib-only Python script: for a command that may write the
index or refs (anything not in its read-only list) in a repository whose git common directory
holds reverie's lock file, it takes that ``flock`` (bounded wait), runs the real git (the next
``git`` on ``PATH``) with ``REVERIE_GIT_LOCK_HELD`` set so nested git calls (hooks, aliases) do
not wait for themselves, and exits with git's status. Read-only commands run with
``GIT_OPTIONAL_LOCKS=0`` so a ``git status`` never takes ``index.lock`` from under a merge.
A commit (``commit``, ``merge``, ``rebase``, ...) that fails leaves a record beside the lock
(``reverie-commit-failed.json``: the command, its exit status and git's first error line), which
the post-turn check turns into a warning and a reminder (issue 23 item 2); one that succeeds
removes it.

Where it lives: ``<git common dir>/reverie/bin/git``, written on first use with the running
interpreter as its ``#!`` line, started isolated and without ``site`` (``-IS``): the script needs
the standard library only, and processing the environment's ``site-packages`` (``.pth`` files, the
editable install's finder) was three quarters of its start, about 35 ms of every agent ``git``
call (``bench/commit.py``). A read-only command imports nothing beyond ``os`` and ``sys`` before it
becomes git. Inside a bubblewrap sandbox it therefore needs nothing but the
memory repository (mounted for the agent anyway) and the interpreter (the venv, mounted
read-only): no reverie package, no ``$REVERIE_HOME``.
"""

from __future__ import annotations

import os
import stat
import sys
import threading
from pathlib import Path

from orchestrator.memfs.locks import LOCK_FILE_NAME, common_dir_sync
from orchestrator.memfs.names import COMMIT_FAILED_FILE_NAME

__all__ = ["LOCK_HELD_ENV", "WRAPPER_SOURCE", "ensure_wrapper", "lock_held_value", "wrapped_path"]

LOCK_HELD_ENV = "REVERIE_GIT_LOCK_HELD"


def lock_held_value(common_dir: Path) -> str:
    """The ``REVERIE_GIT_LOCK_HELD`` value saying "the lock of ``common_dir`` is already held".

    Not a bare path, so the sandbox does not mount it read-only as it does path-valued variables.
    """
    return f"held:{common_dir}"


WRAPPER_SOURCE = r'''#!{python} -IS
"""reverie's git wrapper (DECISIONS D1); written by orchestrator.memfs.gitwrap, do not edit."""
import os
import sys

HERE = os.path.dirname(os.path.realpath(__file__))
HELD = "{held}"
LOCK = "{lock}"
FAILED = "{failed}"
COMMITS = frozenset(("commit", "merge", "cherry-pick", "revert", "am", "rebase"))
WAIT = float(os.environ.get("REVERIE_GIT_LOCK_WAIT", "300"))
READS = frozenset((
    "status log show diff rev-parse rev-list ls-files ls-tree cat-file blame grep describe shortlog "
    "show-ref for-each-ref merge-base name-rev whatchanged help version var check-ignore check-attr "
    "count-objects cherry diff-tree diff-files diff-index range-diff show-branch ls-remote config "
    "verify-commit verify-tag archive bugreport"
).split())
VALUED = frozenset(("-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env", "--super-prefix"))


def real_git():
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not folder:
            continue
        candidate = os.path.join(folder, "git")
        try:
            if os.path.realpath(folder) == HERE or os.path.dirname(os.path.realpath(candidate)) == HERE:
                continue
        except OSError:
            continue
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    for candidate in ("/usr/bin/git", "/usr/local/bin/git", "/bin/git"):
        if os.access(candidate, os.X_OK):
            return candidate
    sys.stderr.write("reverie git wrapper: no git found on PATH\n")
    sys.exit(127)


def split(argv):
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in VALUED:
            i += 2
        elif arg.startswith("-"):
            i += 1
        else:
            return argv[:i], arg
    return argv, None


def run(git, argv, env):
    import signal
    import subprocess

    child = subprocess.Popen([git] + argv, env=env, stderr=subprocess.PIPE)

    def forward(signum, _frame):
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, forward)
    said = b""
    out = getattr(sys.stderr, "buffer", None)
    while True:
        chunk = child.stderr.read1(65536)
        if not chunk:
            break
        said = (said + chunk)[-8192:]
        if out is not None:
            out.write(chunk)
            out.flush()
    code = child.wait()
    return (128 - code if code < 0 else code), said.decode("utf-8", "replace")


def record(common, command, code, said):
    """What reverie's post-turn check reads: the last commit of the agent failed (or none did)."""
    import json

    path = os.path.join(common, FAILED)
    if code == 0:
        try:
            os.unlink(path)
        except OSError:
            pass
        return
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(("fatal:", "error:"))]
    line = (errors or lines or ["exit %d" % code])[0]
    try:
        tmp = "%s.%d.tmp" % (path, os.getpid())
        with open(tmp, "w", encoding="utf-8") as out:
            json.dump({"command": command, "code": code, "error": line[:300]}, out)
        os.replace(tmp, path)
    except OSError:
        pass


def main():
    argv = sys.argv[1:]
    git = real_git()
    options, command = split(argv)
    env = dict(os.environ)
    if command is None or command in READS:
        env.setdefault("GIT_OPTIONAL_LOCKS", "0")
        os.execve(git, [git] + argv, env)
    import fcntl
    import subprocess
    import time

    probe = subprocess.run(
        [git] + options + ["rev-parse", "--path-format=absolute", "--git-common-dir"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    common = os.path.realpath(probe.stdout.strip()) if probe.returncode == 0 and probe.stdout.strip() else ""
    lock_path = os.path.join(common, LOCK) if common else ""
    if not common or os.environ.get(HELD) == "held:" + common or not os.path.exists(lock_path):
        os.execve(git, [git] + argv, env)
    fd = os.open(lock_path, os.O_RDONLY | os.O_CLOEXEC)
    deadline = time.monotonic() + WAIT
    delay = 0.005
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                sys.stderr.write(
                    "reverie: the memory repository stayed locked for %g s (a merge is running); try again\n" % WAIT
                )
                sys.exit(75)
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
    env[HELD] = "held:" + common
    code, said = run(git, argv, env)
    if command in COMMITS:
        record(common, command, code, said)
    sys.exit(code)


main()
'''

_cache: dict[str, Path] = {}
_cache_lock = threading.Lock()


def _source() -> str:
    return (
        WRAPPER_SOURCE.replace("{python}", sys.executable)
        .replace("{held}", LOCK_HELD_ENV)
        .replace("{lock}", LOCK_FILE_NAME)
        .replace("{failed}", COMMIT_FAILED_FILE_NAME)
    )


def ensure_wrapper(common_dir: Path) -> Path:
    """Write the wrapper (and the lock file it looks for) into ``common_dir``; its directory (blocking)."""
    folder = common_dir / "reverie" / "bin"
    target = folder / "git"
    text = _source()
    try:
        current = target.read_text(encoding="utf-8")
    except (FileNotFoundError, UnicodeDecodeError):
        current = None
    if current != text:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".git.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.write_text(text, encoding="utf-8")
        tmp.chmod(stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
        os.replace(tmp, target)
    lock = common_dir / LOCK_FILE_NAME
    if not lock.exists():
        lock.touch()
    return folder


def wrapped_path(memory_dir: Path, path: str) -> str:
    """``path`` with the wrapper directory of ``memory_dir``'s repository first (blocking, cached).

    A memory directory that is not (yet) a git repository gets ``path`` unchanged.
    """
    key = str(memory_dir)
    with _cache_lock:
        folder = _cache.get(key)
    if folder is None or not (folder / "git").exists():
        try:
            folder = ensure_wrapper(common_dir_sync(memory_dir))
        except (RuntimeError, OSError):
            return path
        with _cache_lock:
            _cache[key] = folder
    parts = [p for p in path.split(os.pathsep) if p and p != str(folder)]
    return os.pathsep.join([str(folder), *parts])
