"""MemFS: the agent's memory repository (layout, frontmatter, prompt compiler, validation)."""

from orchestrator.memfs.compiler import CompiledPrompt, compile_system_prompt
from orchestrator.memfs.validator import (
    ValidationResult,
    audit_head,
    format_report,
    validate_head,
    validate_snapshot,
    validate_staged,
)

__all__: list[str] = [
    "CompiledPrompt",
    "compile_system_prompt",
    "ValidationResult",
    "audit_head",
    "format_report",
    "validate_head",
    "validate_snapshot",
    "validate_staged",
]
