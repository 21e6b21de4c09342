"""What a bash tool call may touch (D11): its environment and, with bubblewrap, its file system.

The environment is an allowlist always, so a model that runs ``env`` never sees an API key. Under
bubblewrap the file system is read-only but for the workspace, the memory directory and a private
``/tmp``; what git reads as configuration or as a path stays read-only, so a command cannot disable
the validation hook or move another branch. The command holds no privilege whoever runs reverie
(A10), its writes are bounded (``[tools] write_limit_mb``), and ``auto`` refuses in one line rather
than run unconfined silently (A6). Each of these choices, and what is not bounded, is in
docs/architecture.md, "The bash sandbox".

Blocking (``stat``, one probe process, once per process); call from a worker thread."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, cast

from orchestrator.base.paths import config_path
from orchestrator.memfs.errors import MemfsError
from orchestrator.memfs.gitwrap import wrapped_path
from orchestrator.memfs.guard import RepositoryRefused, locate
from orchestrator.memfs.hook import SOCKET_ENV
from orchestrator.memfs.hook_service import hook_socket
from orchestrator.memfs.indexlock import clear_stale_git_locks, git_lock_files
from orchestrator.memfs.lockowner import PROCESS_ENV
from orchestrator.memfs.locks import LockBusy, merge_lock_sync
from orchestrator.memfs.names import (
    BRANCH_PREFIX,
    LOCK_FILE_NAME,
    OWNER_FILE_NAME,
    REVERIE_FOLDER,
    WORKTREE_LOCK_FILE_NAME,
)
from orchestrator.memfs.operations import STATE_NAMES, present, settle
from orchestrator.memfs.parent import witness
from orchestrator.memfs.repo import index_corrupt, repair_index
from orchestrator.memfs.worktrees import id_from_worktree_dir
from orchestrator.tools.context import ToolContext, ToolError

__all__ = [
    "BASE_ENV_NAMES",
    "SandboxUnavailable",
    "UNPROTECTED",
    "after_command",
    "bwrap_argv",
    "bwrap_problem",
    "git_dirs",
    "older_bubblewrap",
    "plan_command",
    "sandbox_refusal",
    "tool_environment",
    "write_limit_bytes",
]

BASE_ENV_NAMES: tuple[str, ...] = (
    "PATH",
    "HOME",
    "LANG",
    "TERM",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "USER",
    "LOGNAME",
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_NOSYSTEM",
)
"""Passed through from reverie's own environment when set."""

_KEY_VARIABLES = ("OPENAI_API_KEY",)
_POLICY_FILE = "letta-memory-layout-policy"
_TMP = "/tmp"
_PROBE_TIMEOUT = 15.0
_PROBE_TMP_BYTES = 1024 * 1024

_probe_lock = threading.Lock()
_probe_result: list[str | None] = []
_warned: list[bool] = []


class SandboxUnavailable(ToolError):
    """``sandbox = auto | bwrap`` and bubblewrap cannot run; the message is the one line the model sees."""


def tool_environment(ctx: ToolContext, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child's whole environment (see the module docstring)."""
    source = os.environ if environ is None else environ
    env = {name: source[name] for name in (*BASE_ENV_NAMES, *ctx.env_names) if name in source}
    env.setdefault("PATH", os.defpath)
    env["AGENT_ID"] = ctx.agent_id
    env["AGENT_NAME"] = ctx.agent_name
    env["CONVERSATION_ID"] = ctx.conversation_id
    if ctx.memory_dir is not None:
        env["MEMORY_DIR"] = str(ctx.memory_dir)
        # D1: the agent's own git commands take the memory repository's lock (memfs.gitwrap).
        env["PATH"] = wrapped_path(ctx.memory_dir, env["PATH"])
        # V7: its wait for the lock is said, unless this process holds it (memfs.lockowner).
        env[PROCESS_ENV] = str(os.getpid())
        # The pre-commit hook asks this process to validate (memfs.hook_service).
        socket = hook_socket(ctx.memory_dir)
        if socket is not None:
            env[SOCKET_ENV] = socket
    env.update(ctx.extra_env)
    secrets = {source[name] for name in _KEY_VARIABLES if source.get(name)} | {v for v in ctx.secrets if v}
    return {name: value for name, value in env.items() if value not in secrets}


def bwrap_problem() -> str | None:
    """Why bubblewrap cannot run here (one line), or None when it can; probed once per process."""
    with _probe_lock:
        if not _probe_result:
            _probe_result.append(_probe())
        return _probe_result[0]


def _probe() -> str | None:
    binary = shutil.which("bwrap")
    if binary is None:
        return "bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    for _ in range(2):
        argv = [binary, *_base_args(_PROBE_TMP_BYTES), "--unshare-pid", "--die-with-parent", "--", "true"]
        try:
            done = subprocess.run(argv, capture_output=True, timeout=_PROBE_TIMEOUT, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bwrap could not start: {exc}"
        if not _refuses_0_8_options(done.returncode, done.stderr.decode("utf-8", "replace")):
            break
        _note_before_0_8()  # the caller holds _probe_lock
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"bwrap fails here: {detail[-1] if detail else f'exit status {done.returncode}'}"
    return None


UNPROTECTED = (
    "commands can write anywhere you can (the memory repository's hooks and config included), "
    "read reverie's config.toml, and leave background processes running after reverie exits"
)
"""What ``sandbox = off`` gives up, named in its one-time warning and in the README."""


def _warn_unconfined() -> None:
    with _probe_lock:
        if _warned:
            return
        _warned.append(True)
    sys.stderr.write(f"reverie: warning: [tools] sandbox = off: bash commands run unconfined: {UNPROTECTED}\n")
    sys.stderr.flush()


@dataclass(frozen=True)
class _Mounts:
    """The paths the sandbox binds writable, binds read-only, and hides; ``reopened`` are writable
    again inside a read-only one (a worktree's own record), ``sealed`` read-only inside those. All
    resolved (``realpath``) and existing."""

    writable: tuple[str, ...]
    readonly: tuple[str, ...]
    hidden: tuple[str, ...]
    reopened: tuple[str, ...] = ()
    sealed: tuple[str, ...] = ()


_NO_PRIVILEGE = ("--unshare-user", "--cap-drop", "ALL")
"""No capability in the sandbox, for root too: bubblewrap run by root keeps nearly every
capability unless told otherwise, and with them a command could unmount the mask over
``config.toml``, unmount ``/proc`` or remount ``/`` writable. A user namespace of its own empties
the bounding set as well."""
_NO_NESTED_USERNS = "--disable-userns"
"""No user namespace inside the sandbox either. Without it a nested namespace still cannot touch
the sandbox's mounts (the kernel locks them); it only widens what of the kernel a command reaches."""
_SINCE_0_8 = ("bwrap: Unknown option --size", "bwrap: Unknown option --disable-userns", "bwrap: The --size option")
"""How a bubblewrap before 0.8 (Ubuntu 22.04 ships 0.6) or a setuid one refuses ``--size`` and
``--disable-userns``."""
_before_0_8: list[bool] = []


def older_bubblewrap(returncode: int, output: str) -> bool:
    """Whether bubblewrap refused to start over an option it has only since 0.8: then this process
    leaves them out from now on, with one warning naming what that costs, and True says to plan the
    command again. The privilege drop (``_NO_PRIVILEGE``) stays: older versions have it."""
    if not _refuses_0_8_options(returncode, output):
        return False
    with _probe_lock:
        _note_before_0_8()
    return True


def _refuses_0_8_options(returncode: int, output: str) -> bool:
    return returncode == 1 and output.startswith(_SINCE_0_8)


def _note_before_0_8() -> None:
    """Called holding ``_probe_lock``."""
    if _before_0_8:
        return
    _before_0_8.append(True)
    sys.stderr.write(
        "reverie: warning: bubblewrap is older than 0.8 (or setuid): the bash sandbox's private /tmp and "
        "/dev/shm have no size limit ([tools] write_limit_mb still bounds each file) and commands may make "
        "nested user namespaces; install bubblewrap 0.8 or later\n"
    )
    sys.stderr.flush()


def _base_args(tmp_bytes: int) -> list[str]:
    """The root of every sandbox: the host read-only, a fresh ``/dev`` read-only but for its
    ``shm``, and a private ``/tmp``; both RAM-backed tmpfs hold ``tmp_bytes`` at most."""
    if _before_0_8:
        return [
            "--ro-bind", "/", "/", "--dev", "/dev", "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
            "--proc", "/proc", "--tmpfs", "/tmp", *_NO_PRIVILEGE,
        ]  # fmt: skip
    size = str(tmp_bytes)
    return [
        "--ro-bind", "/", "/", "--dev", "/dev", "--size", size, "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
        "--proc", "/proc", "--size", size, "--tmpfs", "/tmp", *_NO_PRIVILEGE, _NO_NESTED_USERNS,
    ]  # fmt: skip


def write_limit_bytes(ctx: ToolContext) -> int:
    """``[tools] write_limit_mb`` in bytes: the most one command may write into one file, and into
    the private ``/tmp`` (and ``/dev/shm``) of its sandbox."""
    return ctx.write_limit_mb * 1024 * 1024


def _limited(ctx: ToolContext, command: Sequence[str]) -> list[str]:
    """``command`` under ``RLIMIT_FSIZE`` (bash's ``ulimit -f`` sets soft and hard limits, in KiB;
    without ``CAP_SYS_RESOURCE`` nothing inside raises it again): one ``exec`` more, and ``$0``,
    error prefixes and inherited descriptors stay what the command would have had."""
    return ["bash", "-c", f'ulimit -f {write_limit_bytes(ctx) // 1024} && exec "$@"', "bash", *command]


class _Resolver:
    """``realpath`` for the paths of one plan, which share most of their folders (some thirty under
    the memory repository, the workspace, ``PATH``): each folder is resolved once, and a name in a
    resolved folder costs one ``lstat``. ``os.path.realpath`` ``lstat``s every component of every
    path again, some 250 system calls per command (~1 ms here). Nothing is kept beyond the plan."""

    def __init__(self) -> None:
        self._known: dict[str, str | None] = {"/": "/"}

    def real(self, path: Path | str) -> str | None:
        """``os.path.realpath(path)`` when that exists, else None."""
        raw = os.fspath(path)
        if not raw.startswith("/"):
            raw = os.path.join(os.getcwd(), raw)
        if raw.startswith("//") or "/.." in raw:
            # ".." after a symbolic link is not lexical; POSIX leaves a leading "//" to the system
            return _real(raw)
        try:
            return self._resolve(os.path.normpath(raw))
        except (OSError, ValueError):
            return None

    def _resolve(self, path: str, links: int = 0) -> str | None:
        known = self._known.get(path, _UNSEEN)
        if known is not _UNSEEN:
            return cast("str | None", known)
        parent, name = os.path.split(path)
        folder = self._resolve(parent, links)
        found: str | None = None
        if folder is not None:
            candidate = os.path.join(folder, name)
            try:
                mode = os.lstat(candidate).st_mode
            except OSError:
                mode = None
            if mode is not None:
                found = self._follow(folder, candidate, links) if stat.S_ISLNK(mode) else candidate
        self._known[path] = found
        return found

    def _follow(self, folder: str, link: str, links: int) -> str | None:
        """Where the symbolic link ``link`` (in the resolved ``folder``) leads, resolved. A target
        whose ".." could follow another link, or a long chain (a loop), goes to ``realpath``."""
        target = os.readlink(link)
        if links >= 8 or target.startswith("//") or _up_after_a_name(target):
            return _real(link)
        return self._resolve(os.path.normpath(os.path.join(folder, target)), links + 1)


def _up_after_a_name(target: str) -> bool:
    """True when a ``..`` in ``target`` follows a name, which may be a link: only the leading
    ``.``/``..`` steps are lexical (the folder they start from is already resolved)."""
    named = False
    for part in target.split("/"):
        if part == "..":
            if named:
                return True
        elif part not in ("", "."):
            named = True
    return False


_UNSEEN: Final = object()


def _real(path: str) -> str | None:
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError):
        return None
    return real if os.path.exists(real) else None


def git_dirs(repo: Path) -> tuple[Path, Path] | None:
    """(git dir, common dir) of ``repo``, read from ``.git`` itself (no git process)."""
    dotgit = repo / ".git"
    if dotgit.is_dir():
        return dotgit, dotgit
    try:
        text = dotgit.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not text.startswith("gitdir:"):
        return None
    gitdir = Path(text.removeprefix("gitdir:").strip())
    gitdir = gitdir if gitdir.is_absolute() else repo / gitdir
    try:
        common = (gitdir / "commondir").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return gitdir, gitdir
    common_path = Path(common)
    return gitdir, common_path if common_path.is_absolute() else gitdir / common_path


_COMMON_READ_ONLY = (
    "hooks", "config", "config.worktree", "info", "objects/info", REVERIE_FOLDER, "worktrees", "modules",
    _POLICY_FILE, LOCK_FILE_NAME, OWNER_FILE_NAME, WORKTREE_LOCK_FILE_NAME,
)
"""What git reads in the common directory as configuration or as a path, and reverie's own files
(the wrapper's folder, which also holds the audit's accepted revision and the user's config
approvals, ``memfs.protection``; the lock it flocks): read-only, and, being mount points, not movable. What a
commit writes (objects, refs, logs, the index, ``HEAD``, the lock files git makes beside them) stays
writable; a ``commondir`` the command creates is followed by no git outside (``memfs.guard``)."""
_RECORD_READ_ONLY = ("commondir", "gitdir", "config.worktree")
_OPERATION_STATE = STATE_NAMES
"""What git reads to go on with a rebase, cherry-pick or merge it stopped (``memfs.operations``):
read-only to a subagent's command once it exists, since reverie continues it outside the sandbox."""


def _mounts(ctx: ToolContext, env: Mapping[str, str], real: Callable[[Path | str], str | None]) -> _Mounts:
    writable: list[str | None] = [real(ctx.workspace)]
    readonly: list[str | None] = []
    reopened: list[str | None] = []
    sealed: list[str | None] = []
    if ctx.memory_dir is not None:
        writable.append(real(ctx.memory_dir))
        dirs = git_dirs(ctx.memory_dir)
        if dirs is not None:
            gitdir, common = dirs
            if real(gitdir) == real(common):
                writable.append(real(common))
                readonly.extend(real(common / protected) for protected in _COMMON_READ_ONLY)
            else:
                _subagent_git(ctx.memory_dir, gitdir, common, real, writable, readonly, reopened, sealed)
    if ctx.overflow_dir is not None:
        readonly.append(real(ctx.overflow_dir))
    for value in ctx.extra_env.values():
        if value.startswith("/"):
            readonly.append(real(value))
    if env.get(SOCKET_ENV):
        readonly.append(real(env[SOCKET_ENV]))
    for entry in env.get("PATH", "").split(":"):
        if entry.startswith("/"):
            readonly.append(real(entry))
    hidden = real(config_path())
    roots = tuple(dict.fromkeys(p for p in writable if p is not None))
    return _Mounts(
        writable=roots,
        readonly=tuple(dict.fromkeys(p for p in readonly if p is not None and _needs_bind(p, roots))),
        hidden=(hidden,) if hidden is not None and os.path.isfile(hidden) else (),
        reopened=tuple(dict.fromkeys(p for p in reopened if p is not None)),
        sealed=tuple(dict.fromkeys(p for p in sealed if p is not None)),
    )


def _subagent_git(
    checkout: Path, gitdir: Path, common: Path, real: Callable[[Path | str], str | None],
    writable: list[str | None], readonly: list[str | None], reopened: list[str | None], sealed: list[str | None],
) -> None:
    """A linked worktree is a subagent's: the common directory stays read-only but for ``objects``,
    the worktree's own record (its index, ``HEAD`` and logs, not its pointers nor an operation
    git stopped, :data:`_OPERATION_STATE`) and the folders of its own branch's ref and reflog, in
    which every other entry is sealed. So it commits on its branch and moves nothing else: not the
    parent's branches, ``packed-refs``, index or reflogs (docs/architecture.md, "Invariants")."""
    writable.append(real(common / "objects"))
    readonly.append(real(common / "objects" / "info"))
    reopened.append(real(gitdir))
    sealed.extend(real(gitdir / name) for name in _RECORD_READ_ONLY)
    sealed.extend(real(gitdir / name) for name in _OPERATION_STATE if os.path.lexists(gitdir / name))
    sealed.append(real(checkout / ".git"))
    wid = id_from_worktree_dir(Path(real(checkout) or checkout))
    if wid is None:
        return
    for top in ("refs/heads", "logs/refs/heads"):
        kinds = common / top / BRANCH_PREFIX.rstrip("/")
        try:
            folders = [kinds / kind for kind in sorted(os.listdir(kinds))]
        except OSError:
            continue
        for folder in folders:
            try:
                names = sorted(os.listdir(folder))
            except OSError:
                continue
            if wid in names:
                reopened.append(real(folder))
                sealed.extend(real(folder / name) for name in names if name != wid)


def _inside(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or below it (both resolved: compared as strings)."""
    return path == root or path.startswith(root if root.endswith("/") else root + "/")


def _needs_bind(path: str, roots: Sequence[str]) -> bool:
    """A read-only path needs its own mount only where the base mounts would not show it read-only:
    inside a writable root, or under the private /tmp."""
    return _inside(path, _TMP) or any(_inside(path, root) for root in roots)


def _tmp_tops(paths: Sequence[str]) -> list[str]:
    """The top-level ``/tmp`` entries holding ``paths``, so they stay visible over the private /tmp."""
    tops: dict[str, None] = {}
    for path in paths:
        if path != _TMP and _inside(path, _TMP):
            tops[f"{_TMP}/{path[len(_TMP) + 1 :].split('/', 1)[0]}"] = None
    return list(tops)


def _interpreter_paths(real: Callable[[Path | str], str | None]) -> list[str]:
    """Where the hook's interpreter and reverie's own code live, unresolved and resolved: a venv's
    ``bin/python`` is a symlink out of the venv, so a checkout under ``/tmp`` would vanish behind the
    private ``/tmp`` if only the resolved interpreter were kept visible."""
    here = real(__file__) or str(Path(__file__).resolve())
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    candidates = (os.path.abspath(sys.executable), os.path.normpath(sys.prefix), real(sys.executable), package_root)
    return [path for path in candidates if path is not None]


def bwrap_argv(ctx: ToolContext, env: Mapping[str, str], command: Sequence[str]) -> list[str]:
    """The bubblewrap command line that runs ``command`` confined (see the module docstring)."""
    real = _Resolver().real
    mounts = _mounts(ctx, env, real)
    argv = ["bwrap", *_base_args(write_limit_bytes(ctx))]
    visible = [*_interpreter_paths(real), real(env["HOME"]) if env.get("HOME") else None]
    for top in _tmp_tops([*mounts.writable, *mounts.readonly, *(p for p in visible if p is not None)]):
        argv += ["--ro-bind", top, top]
    for path in sorted(mounts.writable, key=lambda p: p.count("/") if p != "/" else 0):
        argv += ["--bind", path, path]
    # "-try": a protected path that went away after it was looked up (git prunes an empty
    # .git/worktrees while a background job ends) is skipped, not a failed command.
    for path in mounts.readonly:
        argv += ["--ro-bind-try", path, path]
    for path in mounts.reopened:
        argv += ["--bind-try", path, path]
    for path in mounts.sealed:
        argv += ["--ro-bind-try", path, path]
    for path in mounts.hidden:
        argv += ["--ro-bind", os.devnull, path]
    argv += ["--unshare-pid", "--unshare-ipc", "--die-with-parent"]
    if not ctx.network:
        argv.append("--unshare-net")
    workspace = real(ctx.workspace)
    if workspace is not None:
        argv += ["--chdir", workspace]
    return [*argv, "--", *command]


def plan_command(ctx: ToolContext, command: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The argv and environment for one call under ``ctx.sandbox``; ``SandboxUnavailable`` when the
    sandbox is required and is known not to run.

    Not probed first when bubblewrap is installed: the probe was a second bubblewrap start (its
    namespaces, 10-70 ms on a loaded machine) before the first command of every process, a one-shot
    chat's edit-and-commit step included. A command bubblewrap could not start is told apart
    afterwards (:func:`sandbox_refusal`), which probes then."""
    env = tool_environment(ctx)
    command = _limited(ctx, command)
    if ctx.sandbox == "off":
        _warn_unconfined()
        return command, env
    with _probe_lock:
        known = _probe_result[0] if _probe_result else None
        probed = bool(_probe_result)
    if not probed and shutil.which("bwrap") is None:
        known = bwrap_problem()
    if known is None:
        return bwrap_argv(ctx, env, command), env
    raise _refusal(ctx, known)


def _refusal(ctx: ToolContext, problem: str) -> SandboxUnavailable:
    if ctx.sandbox == "bwrap":
        return SandboxUnavailable(
            f"the bash sandbox is required ([tools] sandbox = bwrap) but {problem}; command not run"
        )
    return SandboxUnavailable(
        f"bash is refused: the sandbox cannot run ({problem}); install bubblewrap, or set [tools] sandbox = "
        '"off" (REVERIE_SANDBOX=off) to run commands unconfined; command not run'
    )


def sandbox_refusal(ctx: ToolContext, returncode: int, output: str) -> SandboxUnavailable | None:
    """The one-line refusal when a command planned by :func:`plan_command` ended as bubblewrap does
    when it cannot set up here (exit 1, ``bwrap: ...``) and the probe confirms bubblewrap cannot
    run; None otherwise (the command's own outcome, or a transient set-up failure). Blocking."""
    if ctx.sandbox == "off" or returncode != 1 or not output.startswith("bwrap: "):
        return None
    problem = bwrap_problem()
    return None if problem is None else _refusal(ctx, problem)


def after_command(ctx: ToolContext) -> None:
    """Settle the memory repository once the command is over (blocking): what it planted in
    ``.git`` (a ``commondir``) is removed now, before the user's own ``git status`` in that folder
    could follow it (``memfs.guard``), so is an operation in progress in the main checkout that
    reverie did not start (``memfs.operations``: nothing may advise continuing it), and lock files a git killed with the call left behind (its
    timeout, a cancelled turn) are removed when nothing holds them (``memfs.indexlock``) and a
    corrupt index is rebuilt from ``HEAD`` (``memfs.repo``), so the next commit works. Each repair
    is one warning line; a busy repository lock leaves them to the post-turn check."""
    if ctx.memory_dir is None:
        return
    try:
        layout = locate(ctx.memory_dir)
    except RepositoryRefused:
        return  # reported by the guard; every later git call there is refused the same way
    if layout is None:
        return
    if not layout.linked:
        witness(layout.top)  # the main agent's own commits are legitimate moves of its branch
    locks = git_lock_files(layout.common_dir)
    operation = not layout.linked and bool(present(layout.git_dir))
    if not locks and not operation and not index_corrupt(layout.git_dir / "index"):
        return
    try:
        with merge_lock_sync(layout.top, timeout=0, common_dir=layout.common_dir):
            if operation:
                settle(layout)
            if locks:
                clear_stale_git_locks(layout.common_dir, layout.top)
            repair_index(layout.top)
    except (LockBusy, MemfsError, OSError):
        pass  # the post-turn check tries again under the lock, and says what it found
