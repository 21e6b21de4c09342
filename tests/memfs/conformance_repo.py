"""Materialise the repositories described by the MemFS conformance cases (``tests/conformance``,
vendored from ../shared/conformance; see its README and PROVENANCE).

Git runs with no global or system configuration, hooks disabled for the case's own commits.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

CONFORMANCE = Path(__file__).resolve().parents[1] / "conformance"
"""The vendored cases: present in every clone."""
UPSTREAM = Path(__file__).resolve().parents[3] / "shared" / "conformance"
"""The shared folder next to the repository, when there is one: read too, for cases newer than the copy."""


def case_files(kind: str, *, folders: Iterable[Path] = (CONFORMANCE, UPSTREAM)) -> list[Path]:
    """Every case file of ``kind`` (``compile`` or ``validate``), sorted by case id; a later folder's
    case replaces an earlier one's of the same id, an absent folder adds nothing."""
    found: dict[str, Path] = {}
    for root in folders:
        folder = root / kind
        if folder.is_dir():
            found.update((path.name, path) for path in folder.glob("*.json"))
    return [found[name] for name in sorted(found)]


def load_case(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        {
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_AUTHOR_NAME": "conformance",
            "GIT_AUTHOR_EMAIL": "conformance@reverie.invalid",
            "GIT_COMMITTER_NAME": "conformance",
            "GIT_COMMITTER_EMAIL": "conformance@reverie.invalid",
        }
    )
    if extra:
        env.update(extra)
    return env


def git(repo: Path, *args: str, env: Mapping[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", *args], cwd=repo, env=git_env(env), capture_output=True, check=check)


def apply_entry(root: Path, entry: Mapping[str, Any]) -> None:
    target = root / entry["path"]
    if entry.get("delete"):
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.is_dir():
            shutil.rmtree(target)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_symlink() or target.is_file():
        target.unlink()
    if "symlink" in entry:
        os.symlink(entry["symlink"], target)
        return
    data = base64.b64decode(entry["base64"]) if "base64" in entry else entry["utf8"].encode("utf-8")
    target.write_bytes(data)
    if entry.get("executable"):
        target.chmod(0o755)


def materialize(repo_spec: Mapping[str, Any], directory: Path) -> None:
    """Build the case's repository at ``directory`` (``kind`` missing, plain or git)."""
    kind = repo_spec.get("kind", "git")
    if kind == "missing":
        return
    directory.mkdir(parents=True, exist_ok=True)
    if kind == "git":
        git(directory, "init", "-q")
        for commit in repo_spec.get("commits", []):
            for entry in commit.get("changes", []):
                apply_entry(directory, entry)
            git(directory, "add", "-A")
            git(directory, "-c", "core.hooksPath=/dev/null", "commit", "-q", "--allow-empty", "--no-verify", "-m", commit["message"])
    stage_entries(directory, repo_spec.get("uncommitted", []), stage_marked_only=True, use_git=kind == "git")


def stage_entries(directory: Path, entries: Iterable[Mapping[str, Any]], *, stage_marked_only: bool, use_git: bool = True) -> None:
    for entry in entries:
        apply_entry(directory, entry)
        if use_git and (entry.get("stage") or not stage_marked_only):
            git(directory, "add", "-A", "--", entry["path"])
