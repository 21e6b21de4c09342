"""The agent's tools (bash, read_file, write_file, edit_file, conversation_search), their schemas and
``run_tool``. Tools run as subprocesses or in worker threads, never on the event loop; file tools are
confined to the workspace and the memory directory; outputs are truncated as compaction.md section 7
says."""

from orchestrator.tools.bash import run_bash
from orchestrator.tools.context import DEFAULT_BASH_TIMEOUT, ToolContext, ToolError, ToolResult
from orchestrator.tools.files import edit_file, read_file, resolve_confined, write_file
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

__all__ = [
    "BASH_OUTPUT_CHARS",
    "DEFAULT_BASH_TIMEOUT",
    "TOOL_NAMES",
    "TOOL_RETURN_MAX_CHARS",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "cleanup_overflow_files",
    "clip_tool_result",
    "conversation_search",
    "edit_file",
    "overflow_dir_for",
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
