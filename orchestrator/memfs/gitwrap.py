"""The ``git`` wrapper the bash tool puts first on ``PATH`` (D1).

An agent's own ``git commit`` must take the same per-repository lock as reverie's merge-back and
post-turn sync, or a busy agent could starve a merge. So a command that may write the index or refs
takes the lock (bounded wait) and runs the real git with ``REVERIE_GIT_LOCK_HELD`` set; read-only
commands run with ``GIT_OPTIONAL_LOCKS=0``. A failed commit leaves a record the post-turn check turns
into a warning (A2), and a ``git commit`` gets the provenance trailers (H1). It is a ``/bin/sh``
script (:data:`SHELL_SOURCE`) for the common cases and a stdlib-only Python wrapper
(:data:`WRAPPER_SOURCE`) for the rest, a busy lock included: it says on stderr, as the wait starts,
who holds it (V7, ``memfs/lockowner.py``). Details in docs/architecture.md, "The git wrapper"."""

from __future__ import annotations

import os
import shlex
import stat
import sys
import threading
from pathlib import Path

from orchestrator.memfs.lockowner import PROCESS_ENV, WAIT_LINE_PREFIX, WRAPPER_HOLDER
from orchestrator.memfs.locks import LOCK_FILE_NAME, common_dir_sync
from orchestrator.memfs.names import COMMIT_FAILED_FILE_NAME, OWNER_FILE_NAME, REVERIE_FOLDER
from orchestrator.memfs.provenance import TRAILERS_ENV

__all__ = ["LOCK_HELD_ENV", "SHELL_SOURCE", "WRAPPER_SOURCE", "ensure_wrapper", "lock_held_value", "wrapped_path"]

LOCK_HELD_ENV = "REVERIE_GIT_LOCK_HELD"


def lock_held_value(common_dir: Path) -> str:
    """The ``REVERIE_GIT_LOCK_HELD`` value saying "the lock of ``common_dir`` is already held".

    Not a bare path, so the sandbox does not mount it read-only as it does path-valued variables.
    """
    return f"held:{common_dir}"


WRAPPER_SOURCE = r'''"""reverie's git wrapper, the slow path (D1); written by orchestrator.memfs.gitwrap, do not edit."""
import os
import sys

HERE = os.path.dirname(os.path.realpath(__file__))
HELD = "{held}"
LOCK = "{lock}"
FAILED = "{failed}"
RECORD = "--reverie-record-failure"
TRAILERS = "{trailers}"
COMMITS = frozenset({commits})
OWNER = "{owner}"
HOLDER = "{holder}"
PROCESS = "{process}"
WAITING = "{waiting}"
WAIT = float(os.environ.get("REVERIE_GIT_LOCK_WAIT", "300"))
READS = frozenset({reads})
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


def alive(pid):
    """Whether ``pid`` runs; True when that cannot be told (a PID namespace, the sandbox, where no
    host pid is seen: not even that of the process that ran the command)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        ran = os.environ.get(PROCESS, "")
        if not ran.isdigit():
            return False
        try:
            os.kill(int(ran), 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False
        return False
    except OSError:
        pass
    return True


def holder(common):
    """(pid, source, whether reverie itself holds it) as memfs/lockowner.holder_of finds them, or
    None; pid 0 when a committing wrapper does not know the process that ran it."""
    import json

    try:
        with open(os.path.join(common, OWNER), encoding="utf-8") as saved:
            found = json.load(saved)
        pid = int(found["pid"])
        source = found.get("source")
        if pid > 0 and alive(pid):
            return pid, source if isinstance(source, str) else "", True
    except FileNotFoundError:
        pass
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    head, _, tail = HOLDER.partition("{pid}")
    try:
        names = [name for name in os.listdir(common) if name.startswith(head) and name.endswith(tail)]
    except OSError:
        return None
    for name in names:
        try:
            with open(os.path.join(common, name), encoding="utf-8") as saved:
                number, _, source = saved.read().strip().partition(" ")
        except (OSError, UnicodeDecodeError):
            continue
        if number.isdigit() and (number == "0" or alive(int(number))):
            return int(number), source, False
    return None


def holding(common, command):
    """This wrapper's name for itself while its commit runs (memfs/lockowner.WRAPPER_HOLDER): the
    reverie process that ran it and the conversation, since its own pid means nothing outside a
    sandbox's PID namespace."""
    if command not in COMMITS:
        return None
    path = os.path.join(common, HOLDER.replace("{pid}", str(os.getpid())))
    conversation = os.environ.get("CONVERSATION_ID", "")
    ran = os.environ.get(PROCESS, "")
    try:
        with open(path, "w", encoding="utf-8") as out:
            out.write("%s agent commit%s\n" % (ran if ran.isdigit() else "0",
                                                " in conversation " + conversation if conversation else ""))
    except OSError:
        return None
    return path


def say_waiting(common):
    """V7: the line the command's output carries as the wait starts; none behind the process that
    ran the command (its own work), as memfs/lockowner.waiting_line words it."""
    found = holder(common)
    if found is None:
        about = ""
    elif os.environ.get(PROCESS) == str(found[0]) and found[2]:
        return
    else:
        about = " (%s)" % ", ".join(([] if found[0] == 0 else ["pid %d" % found[0]]) + ([found[1]] if found[1] else []))
    sys.stderr.write(WAITING + about + "; waiting\n")
    sys.stderr.flush()


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


def record_failure(common, command, code, path):
    """The shell wrapper's commit failed: record it from git's stderr saved in ``path``."""
    try:
        os.unlink(os.path.join(common, HOLDER.replace("{pid}", str(os.getpid()))))
    except OSError:
        pass
    try:
        with open(path, "rb") as saved:
            said = saved.read()[-8192:].decode("utf-8", "replace")
        os.unlink(path)
    except OSError:
        said = ""
    record(common, command, int(code), said)
    sys.exit(int(code))


def main():
    argv = sys.argv[1:]
    if argv[:1] == [RECORD]:
        record_failure(*argv[1:5])
    git = real_git()
    options, command = split(argv)
    env = dict(os.environ)
    trailers = env.pop(TRAILERS, "")
    if command == "commit" and trailers:
        extra = [arg for line in trailers.splitlines() if line.strip() for arg in ("--trailer", line)]
        argv = argv[: len(options) + 1] + extra + argv[len(options) + 1 :]
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
    said = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if not said:
                say_waiting(common)
                said = True
            if time.monotonic() > deadline:
                sys.stderr.write(
                    "reverie: the memory repository stayed locked for %g s (a merge is running); try again\n" % WAIT
                )
                sys.exit(75)
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
    env[HELD] = "held:" + common
    named = holding(common, command)
    try:
        code, said = run(git, argv, env)
    finally:
        if named is not None:
            try:
                os.unlink(named)
            except OSError:
                pass
    if command in COMMITS:
        record(common, command, code, said)
    sys.exit(code)


main()
'''

SHELL_SOURCE = r"""#!/bin/sh
# reverie's git wrapper (D1); written by orchestrator.memfs.gitwrap, do not edit.
# The fast path: what it cannot settle exactly goes to the Python wrapper beside it.
set -f
PY={python}
SLOW=${0%/*}/{slow}
git=
IFS=:
for dir in ${PATH-}; do
    [ -n "$dir" ] || continue
    [ "$dir/git" -ef "$0" ] && continue
    if [ -f "$dir/git" ] && [ -x "$dir/git" ]; then git=$dir/git; break; fi
done
unset IFS
if [ -z "$git" ]; then
    for dir in /usr/bin /usr/local/bin /bin; do
        if [ -x "$dir/git" ]; then git=$dir/git; break; fi
    done
    [ -n "$git" ] || { echo "reverie git wrapper: no git found on PATH" >&2; exit 127; }
fi
command=
skip=
at=0
for arg do
    at=$((at + 1))
    if [ -n "$skip" ]; then skip=; continue; fi
    case $arg in
        -C|-c|--git-dir|--work-tree|--namespace|--config-env|--super-prefix) skip=1 ;;
        -*) ;;
        *) command=$arg; break ;;
    esac
done
if [ "$command" = commit ] && [ -n "${{trailers}-}" ]; then
    added=${trailers}
    unset {trailers}
    i=0
    for arg do
        [ "$i" = 0 ] && set --
        i=$((i + 1))
        set -- "$@" "$arg"
        if [ "$i" = "$at" ]; then
            IFS='
'
            for line in $added; do set -- "$@" --trailer "$line"; done
            unset IFS
        fi
    done
fi
case $command in
    ''|{reads})
        GIT_OPTIONAL_LOCKS=${GIT_OPTIONAL_LOCKS-0}
        export GIT_OPTIONAL_LOCKS
        exec "$git" "$@" ;;
esac
common=
own=
if [ "$1" = "$command" ] && [ -z "${GIT_DIR+x}${GIT_COMMON_DIR+x}${GIT_WORK_TREE+x}" ]; then
    if [ -d .git ]; then
        [ -f .git/HEAD ] && [ ! -e .git/commondir ] && common=.git && own=.git
    elif [ -f .git ]; then
        line=
        read -r line < .git || :
        case $line in
            "gitdir: "*)
                gitdir=${line#gitdir: }
                if [ -f "$gitdir/HEAD" ]; then
                    own=$gitdir
                    if [ -f "$gitdir/commondir" ]; then
                        read -r shared < "$gitdir/commondir" || :
                        case $shared in
                            /*) common=$shared ;;
                            ?*) common=$gitdir/$shared ;;
                        esac
                    else
                        common=$gitdir
                    fi
                fi ;;
        esac
    fi
fi
[ -n "$common" ] && common=$(cd -P -- "$common" 2>/dev/null && pwd)
[ -n "$common" ] && command -v flock >/dev/null 2>&1 || exec "$PY" -I -S "$SLOW" "$@"
[ "${{held}-}" = "held:$common" ] && exec "$git" "$@"
[ -e "$common/{lock}" ] || exec "$git" "$@"
[ -r "$common/{lock}" ] && command exec 9<"$common/{lock}" || exec "$PY" -I -S "$SLOW" "$@"
flock -n 9 || { exec 9<&-; exec "$PY" -I -S "$SLOW" "$@"; }
{held}=held:$common
export {held}
case $command in
    {commits}) ;;
    *) exec "$git" "$@" ;;
esac
said=$own/reverie-git.$$.stderr
holder=$common/{holder_sh}
{ printf '%s agent commit%s\n' "${{process}:-0}" "${CONVERSATION_ID:+ in conversation $CONVERSATION_ID}" >"$holder"; } 2>/dev/null || :
"$git" "$@" 2>"$said"
code=$?
[ -s "$said" ] && cat -- "$said" >&2
[ "$code" = 0 ] || exec "$PY" -I -S "$SLOW" --reverie-record-failure "$common" "$command" "$code" "$said"
rm -f -- "$said" "$holder" "$common/{failed}" 2>/dev/null
exit 0
"""
"""The wrapper itself: ``/bin/sh`` starts in about a millisecond where the interpreter took ~12 ms
of CPU and importing ``subprocess`` twice that, at every agent ``git`` call (``bench/commit.py``).
It settles what is common exactly as the Python wrapper does: a read-only command (found past
git's global options) becomes git at once; a write run in a repository's top level (``.git``
there, no ``-C``/``--git-dir``/``GIT_DIR``-like variables) finds the common directory as git
would, from ``.git`` itself (no ``rev-parse`` process), takes a free lock with ``flock -n`` (a busy
one goes to the Python wrapper, which says so and waits) and becomes git, which inherits the locked descriptor: the lock is held for as long as git runs,
whatever happens to the wrapper (and by what git leaves running in the background, such as a
detached ``git maintenance``, until it ends). A commit's stderr is kept in a file in the checkout's own git folder
(a subagent's sandbox cannot write the common one; shown when git ends) for the failure record, which the Python wrapper writes. Anything else (global options
before a write, a repository found by searching up, no ``flock``) runs the Python wrapper."""

_SLOW_NAME = "git-wrapper.py"
_COMMITS = ("commit", "merge", "cherry-pick", "revert", "am", "rebase")
_READS = (
    "status log show diff rev-parse rev-list ls-files ls-tree cat-file blame grep describe shortlog "
    "show-ref for-each-ref merge-base name-rev whatchanged help version var check-ignore check-attr "
    "count-objects cherry diff-tree diff-files diff-index range-diff show-branch ls-remote config "
    "verify-commit verify-tag archive bugreport"
).split()

_cache: dict[str, Path] = {}
_cache_lock = threading.Lock()


def _source() -> str:
    return (
        WRAPPER_SOURCE.replace("{commits}", repr(_COMMITS))
        .replace("{reads}", repr(_READS))
        .replace("{held}", LOCK_HELD_ENV)
        .replace("{lock}", LOCK_FILE_NAME)
        .replace("{failed}", COMMIT_FAILED_FILE_NAME)
        .replace("{trailers}", TRAILERS_ENV)
        .replace("{owner}", OWNER_FILE_NAME)
        .replace("{holder}", WRAPPER_HOLDER)
        .replace("{process}", PROCESS_ENV)
        .replace("{waiting}", WAIT_LINE_PREFIX)
    )


def _shell_source() -> str:
    return (
        SHELL_SOURCE.replace("{python}", shlex.quote(sys.executable))
        .replace("{slow}", _SLOW_NAME)
        .replace("{reads}", "|".join(_READS))
        .replace("{commits}", "|".join(_COMMITS))
        .replace("{held}", LOCK_HELD_ENV)
        .replace("{lock}", LOCK_FILE_NAME)
        .replace("{failed}", COMMIT_FAILED_FILE_NAME)
        .replace("{trailers}", TRAILERS_ENV)
        .replace("{holder_sh}", WRAPPER_HOLDER.replace("{pid}", "$$"))
        .replace("{process}", PROCESS_ENV)
    )


def _write(target: Path, text: str, mode: int) -> None:
    """Replace ``target`` atomically unless it already holds ``text``."""
    try:
        if target.read_text(encoding="utf-8") == text:
            return
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.chmod(mode)
    os.replace(tmp, target)


def ensure_wrapper(common_dir: Path) -> Path:
    """Write the wrapper (the shell script ``git`` and the Python wrapper it hands the rest to) and
    the lock file it looks for into ``common_dir``; the wrapper's directory (blocking)."""
    folder = common_dir / REVERIE_FOLDER / "bin"
    folder.mkdir(parents=True, exist_ok=True)
    readable = stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH
    _write(folder / _SLOW_NAME, _source(), readable)
    _write(folder / "git", _shell_source(), readable | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
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
