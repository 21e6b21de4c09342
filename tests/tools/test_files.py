"""File tools: confinement (traversal, symlink escapes), read notices, write, edit_file semantics."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest
from anyio import Path as AsyncPath

from orchestrator.tools import ToolContext, run_tool

pytestmark = pytest.mark.anyio


def _ctx(tmp_path: Path) -> ToolContext:
    ws = tmp_path / "ws"
    mem = tmp_path / "mem"
    ws.mkdir(exist_ok=True)
    mem.mkdir(exist_ok=True)
    return ToolContext(workspace=ws, memory_dir=mem, agent_id="a", conversation_id="c")


def _args(**kw: object) -> str:
    import json

    return json.dumps(kw)


async def test_write_read_edit_roundtrip(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    w = await run_tool("write_file", _args(path="sub/a.txt", content="one\ntwo\nthree\n"), ctx)
    assert w.ok and w.output == "Wrote 14 characters to sub/a.txt"
    r = await run_tool("read_file", _args(path="sub/a.txt"), ctx)
    assert r.ok and r.output == "     1\tone\n     2\ttwo\n     3\tthree"
    e = await run_tool("edit_file", _args(path="sub/a.txt", old_string="two", new_string="2"), ctx)
    assert e.ok and e.output == "Edited sub/a.txt: replaced 1 occurrence"
    assert await AsyncPath(ctx.workspace / "sub/a.txt").read_text() == "one\n2\nthree\n"
    r2 = await run_tool("read_file", _args(path="sub/a.txt", offset=2, limit=1), ctx)
    assert r2.output == "     2\t2"


async def test_memory_dir_is_allowed(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    target = str(tmp_path / "mem" / "system" / "persona.md")
    assert (await run_tool("write_file", _args(path=target, content="x"), ctx)).ok
    assert (await run_tool("read_file", _args(path=target), ctx)).output == "     1\tx"


@pytest.mark.parametrize("path", ["../outside.txt", "sub/../../outside.txt", "/etc/passwd", "~/x"])
async def test_traversal_is_refused(tmp_path: Path, path: str) -> None:
    ctx = _ctx(tmp_path)
    for tool, args in (
        ("read_file", _args(path=path)),
        ("write_file", _args(path=path, content="pwned")),
        ("edit_file", _args(path=path, old_string="a", new_string="b")),
    ):
        result = await run_tool(tool, args, ctx)
        assert not result.ok and "access refused" in result.output and "\n" not in result.output
    assert not await AsyncPath(tmp_path / "outside.txt").exists()


async def test_symlink_escape_is_refused(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    secret = tmp_path / "secret.txt"
    await AsyncPath(secret).write_text("secret")
    await anyio.to_thread.run_sync(os.symlink, secret, ctx.workspace / "link.txt")
    await anyio.to_thread.run_sync(os.symlink, tmp_path, ctx.workspace / "dirlink")
    for args in (_args(path="link.txt"), _args(path="dirlink/secret.txt")):
        result = await run_tool("read_file", args, ctx)
        assert not result.ok and "access refused" in result.output
    w = await run_tool("write_file", _args(path="dirlink/new.txt", content="x"), ctx)
    assert not w.ok and not await AsyncPath(tmp_path / "new.txt").exists()
    # a symlink that stays inside is fine
    await AsyncPath(ctx.workspace / "real.txt").write_text("inside")
    await anyio.to_thread.run_sync(os.symlink, ctx.workspace / "real.txt", ctx.workspace / "ok.txt")
    assert (await run_tool("read_file", _args(path="ok.txt"), ctx)).output == "     1\tinside"


async def test_edit_file_match_rules(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    await AsyncPath(ctx.workspace / "f.txt").write_text("aa bb aa")
    missing = await run_tool("edit_file", _args(path="f.txt", old_string="zz", new_string="y"), ctx)
    assert not missing.ok and "old_string not found in f.txt" in missing.output
    many = await run_tool("edit_file", _args(path="f.txt", old_string="aa", new_string="y"), ctx)
    assert not many.ok and "occurs 2 times in f.txt" in many.output
    same = await run_tool("edit_file", _args(path="f.txt", old_string="bb", new_string="bb"), ctx)
    assert not same.ok and "identical" in same.output
    assert await AsyncPath(ctx.workspace / "f.txt").read_text() == "aa bb aa"
    nofile = await run_tool("edit_file", _args(path="nope.txt", old_string="a", new_string="b"), ctx)
    assert not nofile.ok and "nope.txt: no such file" in nofile.output


async def test_read_notices(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    await AsyncPath(ctx.workspace / "big.txt").write_text("".join(f"l{i}\n" for i in range(1, 2501)))
    out = (await run_tool("read_file", _args(path="big.txt"), ctx)).output
    assert out.endswith(
        "\n\n[File truncated: showing lines 1-2000 of 2500 total lines. "
        "Use offset and limit parameters to read other sections.]"
    )
    limited = (await run_tool("read_file", _args(path="big.txt", limit=10), ctx)).output
    assert "[File truncated" not in limited and limited.count("\n") == 9
    await AsyncPath(ctx.workspace / "wide.txt").write_text("a" * 2500 + "\n")
    wide = (await run_tool("read_file", _args(path="wide.txt"), ctx)).output
    assert (
        wide
        == "     1\t"
        + "a" * 2000
        + "... [line truncated]\n\n[Some lines exceeded 2,000 characters and were truncated.]"
    )
    await AsyncPath(ctx.workspace / "heavy.txt").write_text("".join("b" * 1000 + "\n" for _ in range(100)))
    heavy = (await run_tool("read_file", _args(path="heavy.txt", limit=100), ctx)).output
    assert heavy.endswith("\n\n[Use offset and limit parameters to read the file in smaller sections.]")
    assert len(heavy) < 31_000
    past = await run_tool("read_file", _args(path="big.txt", offset=3000), ctx)
    assert not past.ok and "past the end" in past.output
    await AsyncPath(ctx.workspace / "bin").write_bytes(b"\x00\x01\x02")
    assert "binary" in (await run_tool("read_file", _args(path="bin"), ctx)).output
    assert "is a directory" in (await run_tool("read_file", _args(path="."), ctx)).output


async def _memory_repo(tmp_path: Path) -> Path:
    from orchestrator.memfs.repo import init_memory_repo

    repo = tmp_path / "memory"
    await anyio.to_thread.run_sync(init_memory_repo, repo)
    return repo


async def test_git_internals_are_refused_reads_included(tmp_path: Path) -> None:
    repo = await _memory_repo(tmp_path)
    ws = tmp_path / "ws"
    ws.mkdir()
    ctx = ToolContext(workspace=ws, memory_dir=repo, agent_id="a", conversation_id="c")
    hook = repo / ".git" / "hooks" / "pre-commit"
    before = await AsyncPath(hook).read_bytes()
    await AsyncPath(ws / "link-to-git").symlink_to(repo / ".git")
    calls = [
        ("write_file", _args(path=str(hook), content="#!/bin/sh\nexit 0\n")),
        ("write_file", _args(path=str(repo / ".git" / "hooks" / "post-commit"), content="x")),
        ("edit_file", _args(path=str(hook), old_string="exec", new_string="exit 0 #")),
        ("read_file", _args(path=str(repo / ".git" / "config"))),
        ("read_file", _args(path="link-to-git/config")),
        ("read_file", _args(path=f"{repo}/sub/../.git/HEAD")),
    ]
    for name, args in calls:
        result = await run_tool(name, args, ctx)
        assert not result.ok, (name, args)
        assert "inside a .git directory" in result.output and "\n" not in result.output
    assert await AsyncPath(hook).read_bytes() == before
    assert not await AsyncPath(repo / ".git" / "hooks" / "post-commit").exists()
    assert (await run_tool("read_file", _args(path=str(repo / "persona.md")), ctx)).ok


async def test_worktree_git_dirs_are_refused(tmp_path: Path) -> None:
    from orchestrator.memfs.worktrees import create_worktree

    repo = await _memory_repo(tmp_path)
    worktree = await create_worktree(repo, agent_id="a", root=tmp_path / "wts")
    ctx = ToolContext(workspace=worktree.path, memory_dir=worktree.path, agent_id="a", conversation_id="c")
    for path in (".git", str(repo / ".git" / "hooks" / "pre-commit"), str(repo / ".git" / "worktrees")):
        result = await run_tool("read_file", _args(path=path), ctx)
        assert not result.ok and "\n" not in result.output


async def test_edit_file_refuses_invalid_utf8_and_leaves_it(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    data = b"caf\xe9 latin-1\nsecond line\n"
    await AsyncPath(ctx.workspace / "latin.txt").write_bytes(data)
    result = await run_tool("edit_file", _args(path="latin.txt", old_string="second", new_string="2nd"), ctx)
    assert not result.ok and "\n" not in result.output
    assert "not valid UTF-8 (byte 0xe9 at offset 3)" in result.output
    assert await AsyncPath(ctx.workspace / "latin.txt").read_bytes() == data


async def test_an_oversized_write_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    from orchestrator.tools import WRITE_MAX_CHARS, oversized_write

    ctx = _ctx(tmp_path)
    raw = _args(path="big.txt", content="y" * (WRITE_MAX_CHARS + 1))
    result = await run_tool("write_file", raw, ctx)
    assert not result.ok and f"over write_file's limit of {WRITE_MAX_CHARS:,} per call; nothing was written" in result.output
    assert not await AsyncPath(ctx.workspace / "big.txt").exists()
    found = oversized_write("write_file", raw)
    assert found is not None and found[1] == result.output and len(found[0]) < 200 and '"path": "big.txt"' in found[0]
    assert oversized_write("write_file", _args(path="ok.txt", content="y" * WRITE_MAX_CHARS)) is None
    assert oversized_write("bash", _args(command="y" * (WRITE_MAX_CHARS + 1))) is None
