"""MemFS: the agent's memory repository (layout, frontmatter, prompt compiler, validation).

Names load lazily (PEP 562): the pre-commit hook runs ``python -m orchestrator.memfs.hook`` on every
commit typed by hand, and importing the compiler (gitpython, ICU) eagerly would triple its start-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.base.lazy import lazy_attributes

if TYPE_CHECKING:
    from orchestrator.memfs.compiler import CompiledPrompt, compile_system_prompt
    from orchestrator.memfs.validator import (
        ValidationResult,
        audit_head,
        format_report,
        validate_head,
        validate_snapshot,
        validate_staged,
    )

__all__ = [
    "CompiledPrompt",
    "ValidationResult",
    "audit_head",
    "compile_system_prompt",
    "format_report",
    "validate_head",
    "validate_snapshot",
    "validate_staged",
]

_HOME = {
    "CompiledPrompt": "compiler",
    "compile_system_prompt": "compiler",
    "ValidationResult": "validator",
    "audit_head": "validator",
    "format_report": "validator",
    "validate_head": "validator",
    "validate_snapshot": "validator",
    "validate_staged": "validator",
}

__getattr__ = lazy_attributes(__name__, globals(), _HOME)
