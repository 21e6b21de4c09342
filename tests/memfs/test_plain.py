"""``memfs.plain``: every answer read from a repository's files equals libgit2's, or is refused
(``NotPlain``) so that libgit2 answers; and on the repositories a chat starts on (loose objects,
loose or packed refs) it does answer, without loading libgit2."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pygit2
import pytest

from orchestrator.memfs.plain import NotPlain, PlainRepo, parse_tree


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def _repo(tmp_path: Path, name: str = "memory") -> Path:
    repo = tmp_path / name
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "system").mkdir()
    (repo / "system" / "persona.md").write_text("---\ndescription: who\n---\nhello\n")
    (repo / "skills" / "deploy").mkdir(parents=True)
    (repo / "skills" / "deploy" / "SKILL.md").write_text("---\nname: deploy\n---\nsteps\n")
    (repo / "link").symlink_to("system/persona.md")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "first")
    (repo / "notes.md").write_text("second\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "second")
    _git(repo, "branch", "reverie/reflection-1", "HEAD~1")
    _git(repo, "tag", "light")
    _git(repo, "tag", "-a", "annotated", "-m", "a tag")
    _git(repo, "update-ref", "refs/reverie/pre-rebase/x", "HEAD~1")
    return repo


def _shapes() -> dict[str, Callable[[Path], None]]:
    def loose(repo: Path) -> None:
        pass

    def packed_refs(repo: Path) -> None:
        _git(repo, "pack-refs", "--all")

    def half_packed(repo: Path) -> None:
        _git(repo, "pack-refs", "--all")
        (repo / "more.md").write_text("third\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", "third")

    def gc(repo: Path) -> None:
        _git(repo, "gc", "-q")

    def detached(repo: Path) -> None:
        _git(repo, "checkout", "-q", "--detach", "HEAD~1")

    def symbolic(repo: Path) -> None:
        _git(repo, "symbolic-ref", "refs/heads/alias", "refs/heads/main")

    return {f.__name__: f for f in (loose, packed_refs, half_packed, gc, detached, symbolic)}


def _questions(repo: Path) -> list[str]:
    heads = _git(repo, "for-each-ref", "--format=%(refname)").splitlines()
    objects = _git(repo, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)").splitlines()
    return ["HEAD", *heads, *objects, "refs/heads/nope", "0" * 40, "HEAD~1", "main"]


def _libgit2_resolve(handle: pygit2.Repository, revision: str) -> tuple[str, str] | None:
    try:
        commit = handle.revparse_single(revision).peel(pygit2.Commit)
    except (KeyError, ValueError, pygit2.GitError):
        return None
    return str(commit.id), str(commit.tree_id)


def _same_or_refused(plain_answer: Callable[[], Any], expected: Any) -> bool:
    """True when the plain reading answered (and equals ``expected``), False when it refused."""
    try:
        answer = plain_answer()
    except NotPlain:
        return False
    assert answer == expected
    return True


@pytest.mark.parametrize("shape", sorted(_shapes()))
def test_every_answer_is_libgit2s_or_refused(tmp_path: Path, shape: str) -> None:
    repo = _repo(tmp_path)
    _shapes()[shape](repo)
    plain = PlainRepo.open(repo)
    assert plain is not None
    handle = pygit2.Repository(str(repo))
    answered = 0
    for revision in _questions(repo):
        answered += _same_or_refused(partial(plain.resolve, revision), _libgit2_resolve(handle, revision))
    for oid in _git(repo, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)").splitlines():
        kind, data = handle.odb.read(oid)
        names = {1: "commit", 2: "tree", 3: "blob", 4: "tag"}
        answered += _same_or_refused(partial(plain.read, oid), (names[int(kind)], bytes(data)))
    for prefix in ("refs/heads/", "refs/heads/reverie/", "refs/reverie/pre-rebase/", "refs/tags/", "refs/nothing/"):
        expected = tuple(
            sorted((name, str(handle.references[name].resolve().target)) for name in handle.references if name.startswith(prefix))
        )
        answered += _same_or_refused(partial(plain.refs, prefix), expected)
    tree = str(handle.revparse_single("HEAD").peel(pygit2.Commit).tree_id)
    for path in ("system", "system/persona.md", "skills/deploy/SKILL.md", "link", "nope", "system/nope", "notes.md/x"):
        try:
            found = handle[tree][path]
            expected_entry: tuple[str, str] | None = (str(found.id), found.type_str)
        except KeyError:
            expected_entry = None
        answered += _same_or_refused(partial(plain.entry, tree, path), expected_entry)
    if shape in {"loose", "packed_refs", "half_packed", "detached"}:
        with pytest.raises(NotPlain):
            plain.resolve("HEAD~1")
        assert plain.resolve("HEAD") == _libgit2_resolve(handle, "HEAD")
        assert plain.entry(tree, "skills/deploy/SKILL.md") is not None
        assert answered >= 20
    if shape == "gc":
        with pytest.raises(NotPlain):
            plain.resolve("HEAD")  # packed: libgit2's


def test_an_unborn_branch_resolves_to_nothing(tmp_path: Path) -> None:
    repo = tmp_path / "empty"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    plain = PlainRepo.open(repo)
    assert plain is not None
    assert plain.resolve("HEAD") is None
    assert plain.refs("refs/heads/") == ()


@pytest.mark.parametrize(
    "config",
    [
        "[core]\n\tbare = true\n",
        "[core]\n\tbare\n",
        "[core]\n\tworktree = /elsewhere\n",
        "[include]\n\tpath = other\n",
        '[includeIf "gitdir:/x/"]\n\tpath = other\n',
        "[extensions]\n\trefStorage = reftable\n",
        "[core] bare = true\n",
        "[core]\n\tbare = false \\\n\t\ttrue\n",
        "bare = true\n",
    ],
)
def test_a_config_it_cannot_read_completely_is_not_plain(tmp_path: Path, config: str) -> None:
    repo = _repo(tmp_path)
    (repo / ".git" / "config").write_text(config)
    assert PlainRepo.open(repo) is None


def test_linked_worktrees_and_folders_are_not_plain(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    _git(repo, "worktree", "add", "-q", str(tmp_path / "linked"), "-b", "side")
    assert PlainRepo.open(tmp_path / "linked") is None
    assert PlainRepo.open(repo / "system") is None
    assert PlainRepo.open(tmp_path / "missing") is None
    assert PlainRepo.open(repo) is not None


def test_hooks_path_is_unset_only_when_no_config_file_mentions_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = _repo(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    plain = PlainRepo.open(repo)
    assert plain is not None and plain.unset("core.hooksPath")
    (home / ".gitconfig").write_text("[core]\n\thooksPath = ~/hooks\n")
    assert not plain.unset("core.hooksPath")
    (home / ".gitconfig").write_text("[include]\n\tpath = ~/more\n")
    assert not plain.unset("core.hooksPath")
    (home / ".gitconfig").write_text("[user]\n\tname = me\n")
    assert plain.unset("core.hooksPath")
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    assert not plain.unset("core.hooksPath")
    monkeypatch.delenv("GIT_CONFIG_COUNT")
    _git(repo, "config", "core.hooksPath", "elsewhere")
    assert not plain.unset("core.hooksPath")  # the same (pooled) view sees the new setting


def test_parse_tree_keeps_names_that_are_not_utf8() -> None:
    raw = b"100644 caf\xe9.md\0" + bytes(20) + b"40000 dir\0" + bytes(range(20))
    assert parse_tree(raw) == (("caf\udce9.md", "100644", "00" * 20), ("dir", "40000", bytes(range(20)).hex()))


_NO_LIBGIT2 = """
import json, sys
from pathlib import Path
from orchestrator.memfs.git import open_repo
repo = Path(sys.argv[1])
with open_repo(repo) as local:
    answers = [local.head(), local.refs("refs/heads/"), local.config("core.hooksPath"), local.resolve("HEAD")]
    before = "pygit2" in sys.modules
    status = local.status()
print(json.dumps({"before": before, "after": "pygit2" in sys.modules, "head": answers[0], "status": status}))
"""


def test_a_plain_repository_is_read_without_libgit2_until_a_question_needs_it(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    (repo / "untracked.md").write_text("new\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run([sys.executable, "-c", _NO_LIBGIT2, str(repo)], capture_output=True, text=True, env=env, check=True)
    seen = json.loads(proc.stdout)
    assert seen["before"] is False and seen["after"] is True
    assert seen["head"] == _git(repo, "rev-parse", "HEAD")
    assert seen["status"] == [["??", "untracked.md"]]
