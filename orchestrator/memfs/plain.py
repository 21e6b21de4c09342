"""A plain repository's refs, loose objects and config, read with the standard library.

A chat that starts on a tidy memory repository asks git only small questions before its first
request: is this a repository, where do its hooks go, is there anything to recover, what is
``HEAD``, which skills does that commit hold. libgit2 answers each in microseconds but costs
~45 ms to load (pygit2's enums, the shared libraries), which is most of what reverie itself adds to
the SDK's import before a real model's first request (issue 14.4). :class:`PlainRepo` answers
those questions from the files git keeps, and only when the answer is certain: anything it does
not fully understand raises :class:`NotPlain`, and the caller (``memfs.git.LocalRepo``) asks
libgit2 instead. So what it reads is never wrong, only sometimes not known.

What counts as plain (:meth:`PlainRepo.open`): ``<top>/.git`` is a folder (not a linked
worktree's pointer file) with ``HEAD``, ``objects`` and ``refs``, no ``commondir``, and a config
this module can read completely: no ``include``/``includeIf``, no ``[extensions]`` (reftable, SHA-256),
not bare, no ``core.worktree``, no continued lines. Objects are read only when loose; a packed one
(after ``git gc``, or a batch task's copied template) is libgit2's. Refs are loose files or
``packed-refs`` lines; a symbolic ref other than ``HEAD`` is libgit2's. A config key is known only
to be *unset*: when no config file git would read mentions it (and none includes another).
"""

from __future__ import annotations

import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["NotPlain", "PlainRepo", "parse_tree"]

_SHA1_BYTES: Final = 20
_HEX40: Final = re.compile(r"[0-9a-f]{40}")
_REF_NAME: Final = re.compile(r"refs/[A-Za-z0-9._/@+-]+")
_KINDS: Final = frozenset({"commit", "tree", "blob", "tag"})
_SYMBOLIC_DEPTH: Final = 5
_TYPE_OF_MODE: Final = {"40000": "tree", "160000": "commit"}
_REJECTED_SECTIONS: Final = frozenset({"include", "includeif", "extensions"})
_FALSE: Final = frozenset({"false", "no", "off", "0"})
_COMMAND_LINE_CONFIG: Final = ("GIT_CONFIG", "GIT_CONFIG_COUNT", "GIT_CONFIG_PARAMETERS")
"""Settings given in the environment, as ``git -c`` gives them: only libgit2 or git can read those."""


class NotPlain(Exception):
    """The files alone do not settle the question: ask libgit2."""


def parse_tree(data: bytes) -> tuple[tuple[str, str, str], ...]:
    """``(name, mode, oid)`` per entry of a raw tree object, in stored order.

    Names are the stored bytes decoded as UTF-8 with ``surrogateescape`` (DECISIONS M2): no quoting,
    no trimming, and a name that is not UTF-8 round-trips to its bytes.
    """
    entries: list[tuple[str, str, str]] = []
    pos, end = 0, len(data)
    while pos < end:
        space = data.index(b" ", pos)
        nul = data.index(b"\0", space)
        mode = data[pos:space].decode("ascii")
        name = data[space + 1 : nul].decode("utf-8", "surrogateescape")
        oid_end = nul + 1 + _SHA1_BYTES
        entries.append((name, mode, data[nul + 1 : oid_end].hex()))
        pos = oid_end
    return tuple(entries)


@dataclass(frozen=True)
class PlainRepo:
    """The git folder of one plain repository (see the module docstring); blocking file reads."""

    git_dir: Path

    @classmethod
    def open(cls, top_level: Path) -> PlainRepo | None:
        """The plain view of the repository whose top level is ``top_level``; None when it is not
        plain (or not a repository): then only libgit2 can tell."""
        git_dir = top_level / ".git"
        try:
            raw = (git_dir / "config").read_bytes()
            head = (git_dir / "HEAD").read_bytes()
        except OSError:
            return None
        if not head.startswith(b"ref: refs/") and not _HEX40.fullmatch(head.strip().decode("ascii", "replace")):
            return None
        if os.path.lexists(git_dir / "commondir") or not (git_dir / "objects").is_dir() or not (git_dir / "refs").is_dir():
            return None
        if _config_keys(raw) is None:
            return None
        return cls(git_dir.resolve())

    def read(self, oid: str) -> tuple[str, bytes]:
        """(type, content) of a loose object; :class:`NotPlain` when it is not loose or not sound."""
        if not _HEX40.fullmatch(oid):
            raise NotPlain(oid)
        try:
            with open(self.git_dir / "objects" / oid[:2] / oid[2:], "rb") as f:
                raw = zlib.decompress(f.read())
        except (OSError, zlib.error) as error:
            raise NotPlain(oid) from error
        nul = raw.find(b"\0")
        header = raw[:nul].split(b" ") if nul > 0 else []
        if len(header) != 2 or not header[1].isdigit() or int(header[1]) != len(raw) - nul - 1:
            raise NotPlain(oid)
        kind = header[0].decode("ascii", "replace")
        if kind not in _KINDS:
            raise NotPlain(oid)
        return kind, raw[nul + 1 :]

    def resolve(self, revision: str) -> tuple[str, str] | None:
        """(commit, tree) for ``HEAD``, a full ref name or a full object id; None when the branch
        is unborn or the ref does not exist."""
        if _HEX40.fullmatch(revision):
            oid: str | None = revision
        elif revision == "HEAD" or _REF_NAME.fullmatch(revision):
            oid = self.ref(revision)
        else:
            raise NotPlain(revision)
        if oid is None:
            return None
        kind, content = self.read(oid)
        if kind != "commit" or not content.startswith(b"tree "):
            raise NotPlain(revision)
        tree = content[5:45].decode("ascii", "replace")
        if not _HEX40.fullmatch(tree):
            raise NotPlain(revision)
        return oid, tree

    def ref(self, name: str, depth: int = 0) -> str | None:
        """The object id ``name`` (``HEAD`` or a full ref name) holds after symbolic hops; None
        when there is no such ref (an unborn branch)."""
        if depth > _SYMBOLIC_DEPTH or (name != "HEAD" and not _valid_ref_name(name)):
            raise NotPlain(name)
        try:
            text = (self.git_dir / name).read_text(encoding="ascii").strip()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return self._packed().get(name)
        except (OSError, UnicodeDecodeError) as error:
            raise NotPlain(name) from error
        if text.startswith("ref: "):
            if name != "HEAD" and depth == 0:
                raise NotPlain(name)  # a symbolic ref of its own: libgit2 knows the rules
            return self.ref(text[5:].strip(), depth + 1)
        if not _HEX40.fullmatch(text):
            raise NotPlain(name)
        return text

    def refs(self, prefix: str) -> tuple[tuple[str, str], ...]:
        """(full name, object id) of every ref whose name starts with ``prefix``, sorted by name."""
        if not prefix.startswith("refs/") or ".." in prefix:
            raise NotPlain(prefix)
        found = {name: oid for name, oid in self._packed().items() if name.startswith(prefix)}
        folder = self.git_dir / prefix.rpartition("/")[0]
        for root, dirs, files in os.walk(folder):
            dirs.sort()
            for file in files:
                name = Path(root, file).relative_to(self.git_dir).as_posix()
                if not name.startswith(prefix) or name.endswith(".lock"):
                    continue
                try:
                    text = Path(root, file).read_text(encoding="ascii").strip()
                except (OSError, UnicodeDecodeError) as error:
                    raise NotPlain(name) from error
                if not _HEX40.fullmatch(text):
                    raise NotPlain(name)
                found[name] = text
        return tuple(sorted(found.items()))

    def entry(self, tree_oid: str, path: str) -> tuple[str, str] | None:
        """(oid, type) of ``path`` below the tree ``tree_oid``, else None."""
        oid = tree_oid
        parts = path.split("/")
        for depth, part in enumerate(parts):
            kind, content = self.read(oid)
            if kind != "tree":
                return None
            hit = next(((mode, found) for name, mode, found in parse_tree(content) if name == part), None)
            if hit is None:
                return None
            mode, oid = hit
            if depth < len(parts) - 1 and mode != "40000":
                return None
        return oid, _TYPE_OF_MODE.get(mode, "blob")

    def unset(self, key: str) -> bool:
        """True when no config file git would read sets ``key`` (``section.name``); False when one
        may (then only libgit2 knows its value). The repository's config is read again each time: a
        pooled handle outlives edits to it."""
        wanted = key.lower()
        try:
            mentions = _config_keys((self.git_dir / "config").read_bytes())
        except OSError:
            return False
        if mentions is None or wanted in mentions:
            return False
        if any(name in os.environ for name in _COMMAND_LINE_CONFIG):
            return False
        name = wanted.rpartition(".")[2]
        for path in _outer_config_files():
            try:
                text = path.read_bytes().lower()
            except FileNotFoundError:
                continue
            except OSError:
                return False
            if name.encode() in text or b"include" in text:
                return False
        return True

    def _packed(self) -> dict[str, str]:
        try:
            text = (self.git_dir / "packed-refs").read_text(encoding="utf-8", errors="surrogateescape")
        except FileNotFoundError:
            return {}
        except OSError as error:
            raise NotPlain("packed-refs") from error
        refs: dict[str, str] = {}
        for line in text.splitlines():
            if not line or line.startswith(("#", "^")):
                continue
            oid, _, name = line.partition(" ")
            if not _HEX40.fullmatch(oid) or not name:
                raise NotPlain("packed-refs")
            refs[name] = oid
        return refs


def _valid_ref_name(name: str) -> bool:
    return bool(_REF_NAME.fullmatch(name)) and ".." not in name and "//" not in name and not name.endswith((".lock", "/"))


def _outer_config_files() -> tuple[Path, ...]:
    """Every system, XDG and global config file libgit2 or the git CLI (which runs the hooks) may
    read besides the repository's own: the union, so either's view is covered."""
    home = Path(os.environ.get("HOME") or os.path.expanduser("~"))
    xdg = os.environ.get("XDG_CONFIG_HOME")
    files = [Path("/etc/gitconfig"), (Path(xdg) if xdg else home / ".config") / "git" / "config", home / ".gitconfig"]
    files.extend(Path(os.environ[name]) for name in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM") if os.environ.get(name))
    return tuple(files)


def _config_keys(raw: bytes) -> frozenset[str] | None:
    """The ``section.key`` names a repository config sets, lower-cased; None when it holds what
    this module does not read: includes, extensions, a bare or relocated work tree, continued
    lines, keys beside a section header, subsections of ``core``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    keys: set[str] = set()
    section: str | None = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.endswith("\\"):
            return None
        if line.startswith("["):
            close = line.find("]")
            rest = line[close + 1 :].strip() if close > 0 else "?"
            if rest and not rest.startswith(("#", ";")):
                return None
            header = line[1:close].strip()
            name, _, sub = header.partition(" ")
            section = name.lower()
            if section in _REJECTED_SECTIONS or (section == "core" and sub) or "." in section:
                return None
            continue
        if section is None:
            return None
        key, has_value, value = line.partition("=")
        key = key.strip().lower()
        value = value.split("#", 1)[0].split(";", 1)[0].strip().strip('"').lower()
        if section == "core" and key == "bare" and (not has_value or value not in _FALSE):
            return None
        if section == "core" and key == "worktree":
            return None
        keys.add(f"{section}.{key}")
    return frozenset(keys)
