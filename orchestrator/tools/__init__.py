"""The agent's tools (bash, read_file, write_file, edit_file, conversation_search), their schemas and
``run_tool``. Tools run as subprocesses or in worker threads, never on the event loop; file tools are
confined to the workspace and the memory directory; outputs are truncated as COMPACTION-7
says.

``run_bash`` loads on first use (PEP 562): its sandbox and git wrapper are not needed before a
chat's first request (P1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.base.lazy import lazy_attributes
from orchestrator.tools.context import DEFAULT_BASH_TIMEOUT, ToolContext, ToolError, ToolResult
from orchestrator.tools.files import (
    WRITE_MAX_CHARS,
    edit_file,
    oversized_write,
    read_file,
    resolve_confined,
    write_file,
)
from orchestrator.tools.overflow import cleanup_overflow_files, overflow_dir_for
from orchestrator.tools.registry import TOOL_NAMES, parse_arguments, run_tool, tool_specs
from orchestrator.tools.search import conversation_search
from orchestrator.tools.truncation import (
    BASH_OUTPUT_CHARS,
    TOOL_RETURN_MAX_CHARS,
    clip_tool_result,
    truncate_array,
    truncate_by_chars,
    truncate_by_lines,
)

if TYPE_CHECKING:
    from orchestrator.tools.bash import run_bash

__all__ = [
    "BASH_OUTPUT_CHARS",
    "DEFAULT_BASH_TIMEOUT",
    "TOOL_NAMES",
    "TOOL_RETURN_MAX_CHARS",
    "WRITE_MAX_CHARS",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "cleanup_overflow_files",
    "clip_tool_result",
    "conversation_search",
    "edit_file",
    "overflow_dir_for",
    "oversized_write",
    "parse_arguments",
    "read_file",
    "resolve_confined",
    "run_bash",
    "run_tool",
    "tool_specs",
    "truncate_array",
    "truncate_by_chars",
    "truncate_by_lines",
    "write_file",
]

__getattr__ = lazy_attributes(__name__, globals(), {"run_bash": "bash"})
