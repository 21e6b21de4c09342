"""``read_file``, ``write_file`` and ``edit_file``, confined to the workspace and the memory directory.

Confinement works on real paths: a relative path is taken from the workspace, then every symlink and
``..`` is resolved, and the result must lie inside the real workspace or the real memory directory. So a
symlink inside the workspace that points elsewhere is refused like ``../../etc/passwd``. Anything in a
``.git`` directory (or, for a memory worktree, its git dir and the common dir) is refused too, reads
included: a model must not rewrite the validation hook or read credentials from ``.git/config``.
``edit_file`` refuses a file that is not UTF-8 rather than replacing its bytes with U+FFFD. All file
I/O runs in worker threads.

``read_file`` numbers lines like ``cat -n`` (six-wide number, a tab, the line); ``offset`` is the
1-based first line, ``limit`` the number of lines (default 2,000). Notices are COMPACTION-7.4's.

``write_file`` refuses content over ``WRITE_MAX_CHARS`` before writing anything (A8): the
call's arguments stay in the conversation, and 900 KB of them left every later request too large for
the context window. ``oversized_write`` says so for a raw call, so the turn can keep a short form of
the refused call instead of the content (``agent/turn.py``). The limit (about 50,000 tokens) leaves a
128k-token window room for the rest; a bigger file is written in parts.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

from orchestrator.base import blocking
from orchestrator.tools.context import ToolContext, ToolError, ToolResult
from orchestrator.tools.truncation import READ_MAX_CHARS_PER_LINE, READ_MAX_LINES, READ_OUTPUT_CHARS

__all__ = ["WRITE_MAX_CHARS", "edit_file", "oversized_write", "read_file", "resolve_confined", "write_file"]


def _roots(ctx: ToolContext, *, reading: bool = False) -> list[Path]:
    roots = [ctx.workspace.resolve()]
    if ctx.memory_dir is not None:
        roots.append(ctx.memory_dir.resolve())
    if reading:
        roots.extend(root.resolve() for root in ctx.read_roots)
    return roots


def resolve_confined(ctx: ToolContext, raw: str, *, reading: bool = False) -> Path:
    """The real path for ``raw``, or ``ToolError`` if it leaves the workspace and the memory directory
    (and, for ``reading``, the read-only roots: overflow files, a reflection's transcript)."""
    if not raw.strip():
        raise ToolError("path is empty")
    if "\x00" in raw:
        raise ToolError("path contains a NUL character")
    candidate = Path(raw).expanduser()
    if not candidate.is_absolute():
        candidate = ctx.workspace / candidate
    real = candidate.resolve()
    roots = _roots(ctx, reading=reading)
    if not reading and any(real.is_relative_to(root.resolve()) for root in ctx.read_roots):
        raise ToolError(f"{raw}: in a read-only directory (resolves to {real}); read_file may read it, nothing may write it")
    if not any(real == root or real.is_relative_to(root) for root in roots):
        allowed = "the workspace" if ctx.memory_dir is None else "the workspace and the memory directory"
        raise ToolError(f"{raw}: outside {allowed} (resolves to {real}); access refused")
    if _in_git_internals(ctx, real, roots):
        raise ToolError(
            f"{raw}: inside a .git directory; repository internals are off limits to file tools (use git commands)"
        )
    return real


def _in_git_internals(ctx: ToolContext, real: Path, roots: list[Path]) -> bool:
    """Whether ``real`` is in a ``.git`` directory under a root, or in the memory worktree's git dirs."""
    for root in roots:
        if real.is_relative_to(root) and ".git" in real.relative_to(root).parts:
            return True
    if ctx.memory_dir is not None:
        # deferred: the sandbox module (and its git wrapper) loads with the first tool call (P1)
        from orchestrator.tools.sandbox import git_dirs

        dirs = git_dirs(ctx.memory_dir)
        if dirs is not None:
            return any(real.is_relative_to(d.resolve()) for d in dirs)
    return False


def _shown(ctx: ToolContext, path: Path) -> str:
    """Workspace files relative to it, memory files absolute (how the agent refers to them)."""
    workspace = ctx.workspace.resolve()
    return str(path.relative_to(workspace)) if path.is_relative_to(workspace) else str(path)


def _read_text(path: Path, raw: str, *, strict: bool = False) -> str:
    if not path.exists():
        raise ToolError(f"{raw}: no such file")
    if path.is_dir():
        raise ToolError(f"{raw}: is a directory, not a file")
    data = path.read_bytes()
    if b"\x00" in data[:8192]:
        raise ToolError(f"{raw}: looks like a binary file; not shown")
    if strict:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ToolError(
                f"{raw}: not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                "edit_file would corrupt it, so it is left unchanged"
            ) from None
    return data.decode("utf-8", errors="replace")


def _read_sync(ctx: ToolContext, raw: str, offset: int | None, limit: int | None) -> str:
    path = resolve_confined(ctx, raw, reading=True)
    text = _read_text(path, raw)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    total = len(lines)
    if total == 0:
        return "(empty file)"
    start = 1 if offset is None else offset
    if start < 1:
        raise ToolError(f"offset must be 1 or more (the first line is 1), not {start}")
    if start > total:
        raise ToolError(f"offset {start} is past the end of {raw} ({total} lines)")
    count = READ_MAX_LINES if limit is None else limit
    if count < 1:
        raise ToolError(f"limit must be 1 or more, not {count}")
    out: list[str] = []
    size = 0
    long_lines = False
    hit_total = False
    end = start - 1
    for number in range(start, min(total, start + count - 1) + 1):
        line = lines[number - 1]
        if len(line) > READ_MAX_CHARS_PER_LINE:
            line = line[:READ_MAX_CHARS_PER_LINE] + "... [line truncated]"
            long_lines = True
        entry = f"{number:>6}\t{line}"
        if out and size + 1 + len(entry) > READ_OUTPUT_CHARS:
            hit_total = True
            break
        out.append(entry)
        size += len(entry) + (1 if len(out) > 1 else 0)
        end = number
    result = "\n".join(out)
    if limit is None and end < total:
        result += (
            f"\n\n[File truncated: showing lines {start}-{end} of {total} total lines. "
            "Use offset and limit parameters to read other sections.]"
        )
    if long_lines:
        result += f"\n\n[Some lines exceeded {READ_MAX_CHARS_PER_LINE:,} characters and were truncated.]"
    if hit_total:
        result += "\n\n[Use offset and limit parameters to read the file in smaller sections.]"
    return result


WRITE_MAX_CHARS = 200_000


def _too_long(size: int) -> str:
    return (
        f"the content is {size:,} characters, over write_file's limit of {WRITE_MAX_CHARS:,} per call; "
        "nothing was written. Write the file in parts: write_file the first part, then add each next part "
        "with edit_file or a bash `cat >> FILE <<'EOF'`"
    )


def oversized_write(name: str, raw_args: str) -> tuple[str, str] | None:
    """For a ``write_file`` call whose content is over the limit: (the arguments to keep in the
    conversation, with the content replaced by a note of its size; the refusal), else None."""
    if name != "write_file" or len(raw_args) <= WRITE_MAX_CHARS:
        return None
    try:
        args = json.loads(raw_args)
    except ValueError:
        return None
    content = args.get("content") if isinstance(args, dict) else None
    if not isinstance(content, str) or len(content) <= WRITE_MAX_CHARS:
        return None
    kept = {**args, "content": f"[{len(content):,} characters, refused: over the write_file limit]"}
    return json.dumps(kept, ensure_ascii=False), f"Error: {_too_long(len(content))}"


def _write_sync(ctx: ToolContext, raw: str, content: str) -> str:
    if len(content) > WRITE_MAX_CHARS:
        raise ToolError(_too_long(len(content)))
    path = resolve_confined(ctx, raw)
    if path.is_dir():
        raise ToolError(f"{raw}: is a directory, not a file")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content, encoding="utf-8")
    return f"Wrote {len(content):,} characters to {_shown(ctx, path)}"


def _edit_sync(ctx: ToolContext, raw: str, old: str, new: str) -> str:
    if old == "":
        raise ToolError("old_string is empty; use write_file to create a file")
    if old == new:
        raise ToolError("old_string and new_string are identical; nothing to change")
    path = resolve_confined(ctx, raw)
    text = _read_text(path, raw, strict=True)
    found = text.count(old)
    if found == 0:
        raise ToolError(f"old_string not found in {raw}; read the file and copy the text exactly")
    if found > 1:
        raise ToolError(
            f"old_string occurs {found} times in {raw}; include more surrounding lines so it matches exactly once"
        )
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return f"Edited {_shown(ctx, path)}: replaced 1 occurrence"


async def _in_thread(fn: partial[str]) -> ToolResult:
    try:
        return ToolResult(True, await blocking.run_sync("files", fn))
    except ToolError as exc:
        return ToolResult(False, str(exc))
    except OSError as exc:
        return ToolResult(False, f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "))


async def read_file(
    ctx: ToolContext, path: str, offset: int | None = None, limit: int | None = None
) -> ToolResult:
    return await _in_thread(partial(_read_sync, ctx, path, offset, limit))


async def write_file(ctx: ToolContext, path: str, content: str) -> ToolResult:
    return await _in_thread(partial(_write_sync, ctx, path, content))


async def edit_file(ctx: ToolContext, path: str, old_string: str, new_string: str) -> ToolResult:
    return await _in_thread(partial(_edit_sync, ctx, path, old_string, new_string))
