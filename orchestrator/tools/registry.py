"""The tool registry: the schemas the model sees and ``run_tool``, the one entry point the turn loop calls.

``run_tool`` never raises for anything the model did (unknown tool, malformed JSON, a missing, unknown
or wrong-typed argument, a failing tool): it returns an error ``ToolResult`` with a one-line reason the
model can act on. Only cancellation propagates. Every output passes the 32,000-character backstop
(COMPACTION-7.1 ``TOOL_RETURN_MAX_CHARS``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from orchestrator.base import blocking
from orchestrator.base.errors import UsageError
from orchestrator.models.types import ToolSpec
from orchestrator.tools.context import ToolContext, ToolError, ToolResult
from orchestrator.tools.files import edit_file, read_file, write_file
from orchestrator.tools.overflow import write_overflow
from orchestrator.tools.search import (
    DEFAULT_SEARCH_LIMIT,
    MAX_QUERY_CHARS,
    MAX_SEARCH_LIMIT,
    conversation_search,
)
from orchestrator.tools.truncation import TOOL_RETURN_MAX_CHARS, truncate_by_chars

__all__ = ["MAX_MODEL_TIMEOUT", "TOOL_NAMES", "parse_arguments", "run_tool", "tool_specs"]

_Handler = Callable[[ToolContext, Mapping[str, Any]], Awaitable[ToolResult]]


@dataclass(frozen=True)
class _Tool:
    """A tool's schema as the model sees it, and the handler that runs it."""

    spec: ToolSpec
    handler: _Handler


def _schema(properties: Mapping[str, Mapping[str, Any]], required: Sequence[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": dict(properties),
        "required": list(required),
        "additionalProperties": False,
    }


def _str(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def _int(description: str) -> dict[str, Any]:
    return {"type": "integer", "description": description}


MAX_MODEL_TIMEOUT = 600.0
"""A model may ask for up to this many seconds (or the configured limit, if higher)."""


async def _bash(ctx: ToolContext, args: Mapping[str, Any]) -> ToolResult:
    asked = args.get("timeout")
    if asked is not None and asked <= 0:
        return ToolResult(False, f"timeout must be a positive number of seconds, not {asked}")
    limit = None if asked is None else min(float(asked), max(ctx.bash_timeout, MAX_MODEL_TIMEOUT))
    # deferred: the sandbox and the git wrapper (with the merge lock) load with the first command (P1)
    from orchestrator.tools.bash import run_bash

    return await run_bash(args["command"], ctx, time_limit=limit)


_TOOLS: dict[str, _Tool] = {
    "bash": _Tool(
        ToolSpec(
            "bash",
            "Run a bash command in the workspace directory and return its combined stdout and stderr. "
            "The environment has MEMORY_DIR (your memory repository), AGENT_ID, AGENT_NAME and CONVERSATION_ID. "
            "Commands run in a sandbox: usually only the workspace, the memory directory and a private /tmp "
            "are writable, "
            "and background processes end with the command. "
            "Commands are killed after the timeout; long output is truncated in the middle.",
            _schema(
                {
                    "command": _str("The command line, run with bash -c."),
                    "timeout": _int(
                        "Seconds before the command is killed (default: the configured limit, 120)."
                    ),
                },
                ["command"],
            ),
        ),
        lambda ctx, a: _bash(ctx, a),
    ),
    "read_file": _Tool(
        ToolSpec(
            "read_file",
            "Read a text file from the workspace or the memory directory, with line numbers. "
            "Use offset (first line, 1-based) and limit (number of lines) for large files.",
            _schema(
                {
                    "path": _str("File path, relative to the workspace or absolute."),
                    "offset": _int("First line to read, 1-based (default 1)."),
                    "limit": _int("Number of lines to read (default 2000)."),
                },
                ["path"],
            ),
        ),
        lambda ctx, a: read_file(ctx, a["path"], a.get("offset"), a.get("limit")),
    ),
    "write_file": _Tool(
        ToolSpec(
            "write_file",
            "Create or overwrite a text file in the workspace or the memory directory (parent directories are created).",
            _schema(
                {"path": _str("File path."), "content": _str("The complete new file content.")},
                ["path", "content"],
            ),
        ),
        lambda ctx, a: write_file(ctx, a["path"], a["content"]),
    ),
    "edit_file": _Tool(
        ToolSpec(
            "edit_file",
            "Replace one exact occurrence of old_string with new_string in a file. old_string must match the "
            "file exactly once (include surrounding lines to make it unique).",
            _schema(
                {
                    "path": _str("File path."),
                    "old_string": _str("The exact text to replace; must occur exactly once."),
                    "new_string": _str("The replacement text."),
                },
                ["path", "old_string", "new_string"],
            ),
        ),
        lambda ctx, a: edit_file(ctx, a["path"], a["old_string"], a["new_string"]),
    ),
    "conversation_search": _Tool(
        ToolSpec(
            "conversation_search",
            "Search every message of your past conversations, including those no longer in your context. "
            "All words must appear (substring match, case-insensitive); put exact phrases in double quotes. "
            "Returns a JSON array of matching messages, best first.",
            _schema(
                {
                    "query": _str(f'Distinctive keywords and/or "quoted phrases" (at most {MAX_QUERY_CHARS} characters).'),
                    "limit": _int(f"Maximum results, 1 to {MAX_SEARCH_LIMIT} (default {DEFAULT_SEARCH_LIMIT})."),
                    "start_date": _str("Only messages on or after this ISO-8601 date/time (YYYY-MM-DD[THH:MM[:SS]][Z])."),
                    "end_date": _str(
                        "Only messages on or before this ISO-8601 date/time (a date covers the whole day)."
                    ),
                    "conversation_id": _str("Restrict to one of your conversations."),
                },
                ["query"],
            ),
        ),
        lambda ctx, a: conversation_search(
            ctx,
            a["query"],
            a.get("limit", DEFAULT_SEARCH_LIMIT),
            a.get("start_date"),
            a.get("end_date"),
            a.get("conversation_id"),
        ),
    ),
}

TOOL_NAMES: tuple[str, ...] = tuple(_TOOLS)


def tool_specs(names: Sequence[str] | None = None) -> tuple[ToolSpec, ...]:
    """The schemas to send to the model: all tools, or the named ones in the order given."""
    if names is None:
        return tuple(t.spec for t in _TOOLS.values())
    unknown = [n for n in names if n not in _TOOLS]
    if unknown:
        raise UsageError(f"unknown tool {unknown[0]!r}; known tools: {', '.join(TOOL_NAMES)}")
    return tuple(_TOOLS[n].spec for n in names)


def _type_ok(value: Any, expected: str) -> bool:
    if expected == "string":
        return isinstance(value, str)
    if expected == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if expected == "boolean":
        return isinstance(value, bool)
    return True


def parse_arguments(spec: ToolSpec, raw: str) -> dict[str, Any]:
    """Decode and check ``raw`` against the tool's schema; ``ToolError`` with a one-line reason.

    Whole-number floats (``5.0``) are accepted for integers: some models emit them."""
    text = raw.strip() if raw else ""
    try:
        args = json.loads(text) if text else {}
    except json.JSONDecodeError as exc:
        raise ToolError(
            f"arguments are not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    if not isinstance(args, dict):
        raise ToolError(f"arguments must be a JSON object, not {type(args).__name__}")
    properties: Mapping[str, Mapping[str, Any]] = spec.parameters.get("properties", {})
    for name in spec.parameters.get("required", []):
        if name not in args or args[name] is None:
            raise ToolError(f'missing required argument "{name}"')
    for name, value in list(args.items()):
        if name not in properties:
            raise ToolError(f'unknown argument "{name}" (expected: {", ".join(properties)})')
        if value is None:
            del args[name]
            continue
        expected = str(properties[name].get("type", ""))
        if expected == "integer" and isinstance(value, float) and value.is_integer():
            args[name] = value = int(value)
        if not _type_ok(value, expected):
            raise ToolError(f'argument "{name}" must be {expected}, not {type(value).__name__}')
    return args


async def run_tool(name: str, raw_args: str, ctx: ToolContext) -> ToolResult:
    """Run one tool call and return its result (see the module docstring for the error contract)."""
    tool = _TOOLS.get(name)
    if tool is None:
        return ToolResult(False, f"Error: unknown tool {name!r}; available tools: {', '.join(TOOL_NAMES)}")
    try:
        args = parse_arguments(tool.spec, raw_args)
    except ToolError as exc:
        return ToolResult(False, f"Error: {name}: {exc}")
    try:
        result = await tool.handler(ctx, args)
    except Exception as exc:
        return ToolResult(False, f"Error: {name} failed: {type(exc).__name__}: {exc}")
    if not result.ok and not result.output.startswith("Error"):
        result = ToolResult(False, f"Error: {result.output}")
    if len(result.output) > TOOL_RETURN_MAX_CHARS:
        overflow = None
        if ctx.overflow_dir is not None:
            overflow = await blocking.run_sync("files", partial(write_overflow, ctx.overflow_dir, name, result.output))
        result = ToolResult(
            result.ok,
            truncate_by_chars(
                result.output, TOOL_RETURN_MAX_CHARS, middle=ctx.middle_truncate, overflow_path=overflow
            ),
        )
    return result
