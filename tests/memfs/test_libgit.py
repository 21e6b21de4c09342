"""libgit2's import: without the CA bundle only while the process has one thread."""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from tests.memfs.reflection_helpers import git, make_repo

_LOAD = """
import json, os, sys, threading
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.libgit import load_pygit2
from pathlib import Path
if sys.argv[1] == "threaded":
    stop = threading.Event()
    threading.Thread(target=stop.wait).start()
load_pygit2()
import pygit2
with GitRepo(Path(sys.argv[2])).open() as local:
    head = local.head()
if sys.argv[1] == "threaded":
    stop.set()
print(json.dumps({"file": pygit2.settings.ssl_cert_file, "dir": pygit2.settings.ssl_cert_dir,
                  "env": os.environ.get("SSL_CERT_FILE"), "head": head}))
"""


@pytest.mark.parametrize("threads", ["alone", "threaded"])
@pytest.mark.parametrize("users_bundle", [False, True])
def test_libgit2_is_loaded_without_the_ca_bundle_only_while_it_is_the_only_thread(
    tmp_path: Path, threads: str, users_bundle: bool
) -> None:
    """reverie never asks libgit2 for TLS (push and pull are git processes), so a command's start
    skips pygit2's parse of the system CA bundle; the environment it borrows for that is put back,
    and a process with other threads (which could read the environment) gets the plain import."""
    repo = make_repo(tmp_path / "r")
    env = {k: v for k, v in os.environ.items() if k != "SSL_CERT_FILE"}
    system = ssl.get_default_verify_paths().openssl_cafile
    expected: str | None = system if os.path.isfile(system) else None
    if users_bundle:
        expected = str(tmp_path / "my-ca.pem")
        shutil.copyfile(system, expected)
        env["SSL_CERT_FILE"] = expected
    done = subprocess.run([sys.executable, "-c", _LOAD, threads, str(repo)], env=env, capture_output=True, text=True, check=True)
    seen = json.loads(done.stdout)
    assert seen["env"] == (expected if users_bundle else None), "the environment is put back as it was"
    assert seen["head"] == git(repo, "rev-parse", "HEAD").strip()
    if threads == "alone":
        assert seen["file"] is None and seen["dir"], "no CA file parsed; the lazy directory stays"
    else:
        assert seen["file"] == expected, "another thread: the plain import, with the bundle"


# A tree of shared subtrees: bounded walks (A11; docs/architecture.md, "Bounded trees")
