"""The pre-commit hook's validation, answered by the reverie process that runs the agent's tools.

A hook that validates by itself pays an interpreter, the validator and git reads at every commit,
most of an edit-and-commit step (P6); the process that ran the tool has all of that loaded, so the
hook (``memfs/hook.py``) asks here first over ``REVERIE_HOOK_SOCKET`` and validates by itself when
nothing answers or the service declines. It answers only for a memory directory reverie handed to a
tool, and approvals never count here (an agent never approves a change of its own constraints).
Trust, threads, the socket's place and closing (P8) are in docs/architecture.md, "The hook service"."""

from __future__ import annotations

import json
import os
import selectors
import shutil
import socketserver
import stat
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any, Final

from orchestrator.memfs import gitsnapshot
from orchestrator.memfs.errors import GitError
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.hook import UNREADABLE
from orchestrator.memfs.policy import AGENT_APPROVAL, APPROVAL_ENV, APPROVAL_ENV_ALIAS, NEEDS_APPROVAL

__all__ = ["HookService", "hook_socket"]

_APPROVALS: Final = (APPROVAL_ENV, APPROVAL_ENV_ALIAS)
_REQUEST_LIMIT: Final = 1 << 16


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        try:
            reply = self.server.service.answer(self.rfile.readline(_REQUEST_LIMIT))
            self.wfile.write(_wire(reply))
        except OSError:
            pass  # the hook went away (killed with its commit); it has nothing left to hear


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    service: HookService


class HookService:
    """One listening socket and the memory directories it answers for."""

    def __init__(self, parent: str | None = None) -> None:
        folder = Path(tempfile.mkdtemp(prefix="rvh-", dir=parent))
        self.address = folder / "s"
        self._allowed: set[Path] = set()
        self._spelled: set[str] = set()
        self._lock = threading.Lock()
        self.answered = 0
        try:
            self._server = _Server(str(self.address), _Handler)
        except OSError:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        self._server.service = self
        wake, waker = os.pipe()
        thread = threading.Thread(target=_serve, args=(self._server, wake), name="reverie-hook-service", daemon=True)
        thread.start()
        self._finalizer = weakref.finalize(self, _close, self._server, thread, waker, folder)

    def allow(self, memory_dir: Path) -> None:
        """Answer for ``memory_dir`` (a repository's top level) from now on. Asked before every bash
        command: a spelling allowed before is not resolved again (``realpath`` is an ``lstat`` per
        component). Should it lead elsewhere since, the new place is not allowed and its hook
        validates by itself: never more is allowed than was resolved."""
        spelled = os.fspath(memory_dir)
        with self._lock:
            if spelled in self._spelled:
                return
        real = Path(os.path.realpath(spelled))
        with self._lock:
            self._allowed.add(real)
            self._spelled.add(spelled)

    def close(self) -> None:
        self._finalizer()

    def answer(self, raw: bytes) -> dict[str, Any]:
        """The reply to one request: ``{"code", "report"}``, or ``{"fallback": true}`` to decline."""
        try:
            request = json.loads(raw)
            top = Path(os.path.realpath(request["cwd"]))
            index = str(request.get("index") or "")
            approvals = {k: str(v) for k, v in dict(request.get("approvals") or {}).items() if k in _APPROVALS}
        except (ValueError, KeyError, TypeError, AttributeError):
            return {"fallback": True}
        with self._lock:
            allowed = top in self._allowed
        if not allowed or (index and not _inside_git_dir(top, Path(index))):
            return {"fallback": True}
        # deferred: the validator is loaded by the first commit, not by the bash tool's first call
        from orchestrator.memfs.validator import format_report, validate_snapshot

        try:
            with GitRepo(top).open() as local:
                if local is None:
                    return {"fallback": True}
                policy = gitsnapshot.policy_in(local.common_dir)
                snapshot = gitsnapshot.read_staged_snapshot_local(local, index or None)
        except (GitError, OSError):
            return {"code": 1, "report": UNREADABLE}
        # every request comes from a command of the agent's bash tool: its approvals do not count
        result = validate_snapshot(snapshot, policy, {})
        with self._lock:
            self.answered += 1
        report = format_report(result)
        if approvals and NEEDS_APPROVAL in result.errors:
            report += f"{AGENT_APPROVAL}\n"
        return {"code": 0 if result.ok else 1, "report": report}


def _wire(reply: dict[str, Any]) -> bytes:
    """The reply as the hook reads it with no ``json`` import: the exit code (or ``fallback``) on the
    first line, the report after it as it goes to stderr."""
    if reply.get("fallback"):
        return b"fallback\n"
    return f"{reply['code']}\n".encode() + str(reply.get("report") or "").encode("utf-8", "surrogateescape")


def _inside_git_dir(top: Path, index: Path) -> bool:
    """Whether ``index`` is a file directly in ``top``'s own git directory (where git keeps
    ``index``, ``index.lock`` and a pathspec commit's ``next-index-*.lock``)."""
    dotgit = top / ".git"
    try:
        mode = os.lstat(dotgit).st_mode
    except OSError:
        mode = 0
    if stat.S_ISDIR(mode):
        # ``top`` is resolved and ``.git`` a folder, not a link: already its real path
        return Path(os.path.realpath(index)).parent == dotgit
    if dotgit.is_dir():
        gitdir = dotgit
    else:
        try:
            text = dotgit.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            return False
        if not text.startswith("gitdir:"):
            return False
        gitdir = Path(text.removeprefix("gitdir:").strip())
        gitdir = gitdir if gitdir.is_absolute() else top / gitdir
    return Path(os.path.realpath(index)).parent == Path(os.path.realpath(gitdir))


def _serve(server: _Server, wake: int) -> None:
    """Accept connections until a byte arrives on ``wake``, with no timeout in between."""
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(server, selectors.EVENT_READ)
            selector.register(wake, selectors.EVENT_READ)
            while True:
                ready = [key.fileobj for key, _ in selector.select()]
                if wake in ready:
                    return
                server.handle_request()
    finally:
        os.close(wake)


def _close(server: _Server, thread: threading.Thread, wake: int, folder: Path) -> None:
    os.write(wake, b"x")
    thread.join()
    os.close(wake)
    server.server_close()
    shutil.rmtree(folder, ignore_errors=True)


_service: HookService | None = None
_service_lock = threading.Lock()


def hook_socket(memory_dir: Path) -> str | None:
    """The socket the hook of ``memory_dir``'s commits may ask, the service started on first use
    (blocking: binds a socket and starts its thread); None when no socket can be made here, and
    the hook then validates by itself as it does outside reverie.

    The temporary directory is tried first, then ``/tmp``: a socket's path must fit in 107 bytes,
    which a long ``TMPDIR`` (a Ray node's, a CI job's) does not leave room for."""
    global _service
    with _service_lock:
        if _service is None:
            for parent in (None, "/tmp"):
                try:
                    _service = HookService(parent)
                    break
                except OSError:
                    continue
            else:
                return None
        service = _service
    service.allow(memory_dir)
    return str(service.address)
