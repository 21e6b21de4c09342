"""Commits whose tree is a few hundred bytes of real git objects standing for far more paths than
memory ever has: each level is one tree naming the level below ``fanout`` times (fanout 10, 7
levels: 10^7 paths; fanout 1, 5,000 levels: a file 5,000 folders deep).

The trees and the leaf are written as one pack in git's own format and indexed by ``git
index-pack`` (5,000 ``git mktree`` processes, or ``hash-object`` checking 5,000 trees, take most of
a minute); git then reads them as any other (``mktree`` lists the new root, ``commit-tree`` and ``update-ref`` commit it through the
seam's runner, and the tests check what git's ``ls-tree`` says of the small ones).
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from pathlib import Path

from orchestrator.memfs.git import GitRepo

LEAF = b"---\ndescription: a leaf\n---\nleaf\n"
_TREE, _BLOB = 2, 3


def _oid(kind: bytes, data: bytes) -> bytes:
    return hashlib.sha1(kind + b" %d\0" % len(data) + data, usedforsecurity=False).digest()


def _write_pack(repo: Path, objects: list[tuple[int, bytes]]) -> None:
    """``objects`` (pack type, data) in one pack, indexed by ``git index-pack``: one file and one git
    process whatever their number (a loose file each was ~1 ms per object on a busy machine)."""
    body = [b"PACK", struct.pack(">II", 2, len(objects))]
    for kind, data in objects:
        size = len(data)
        header = bytearray([(kind << 4) | (size & 0x0F)])
        size >>= 4
        while size:
            header[-1] |= 0x80
            header.append(size & 0x7F)
            size >>= 7
        body += [bytes(header), zlib.compress(data)]
    pack = b"".join(body)
    target = repo / ".git" / "objects" / "pack" / "bomb.pack"
    target.write_bytes(pack + hashlib.sha1(pack, usedforsecurity=False).digest())
    GitRepo(repo).run("index-pack", str(target))


def plant(repo: Path, *, fanout: int, levels: int, name: str = "d", under: str = "bomb") -> str:
    """Commit ``HEAD``'s tree plus a folder ``under`` holding the bomb, on top of ``HEAD`` (hooks are
    not asked, as with ``commit-tree`` and ``update-ref`` typed by hand); the new commit's id."""
    blob = _oid(b"blob", LEAF)
    trees = [b"100644 f.md\0" + blob]
    for _ in range(levels):
        below = _oid(b"tree", trees[-1])
        names = sorted(f"{name}{i}" if fanout > 1 else name for i in range(fanout))
        trees.append(b"".join(b"40000 " + n.encode() + b"\0" + below for n in names))
    _write_pack(repo, [(_BLOB, LEAF), *((_TREE, tree) for tree in trees)])
    top = _oid(b"tree", trees[-1]).hex()
    listing = GitRepo(repo).run("ls-tree", "HEAD").stdout
    root = GitRepo(repo).run("mktree", input=f"{listing}040000 tree {top}\t{under}\n").stdout.strip()
    commit = GitRepo(repo).run("commit-tree", "-p", "HEAD", "-m", "plant a tree of shared subtrees", root, harness=True).stdout.strip()
    GitRepo(repo).run("update-ref", "HEAD", commit)
    return commit
