"""libgit2 (pygit2) loaded for the git seam: the one module that imports it (import-linter contract
``one-git-reader``), on first use, so the pre-commit hook and commands that read no repository do
not pay its ~60 ms import (``docs/architecture.md``, "The git seam")."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["libgit2", "load_pygit2", "open_top"]


def libgit2() -> ModuleType:
    """pygit2, imported on first use: the pre-commit hook imports the process runner and must not
    pay libgit2's ~60 ms import on every commit typed by hand."""
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
        libgit2()
        return
    saved = os.environ.get("SSL_CERT_FILE")
    os.environ["SSL_CERT_FILE"] = os.devnull
    try:
        libgit2()
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



def open_top(directory: Path) -> Any:
    """libgit2's handle on the repository whose top level (or git folder) is ``directory``, without
    searching parent folders."""
    pygit2 = libgit2()
    return pygit2.Repository(str(directory), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
