"""The model seam: value types, the OpenAI-compatible client and the offline scripted model.

Names load lazily (PEP 562): the openai SDK takes about a second to import, and commands that never
call a model (``reverie memory``, ``reverie prompt``, the pre-commit hook) should not pay for it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .openai_client import (
        OpenAIModel,
        model_from_settings,
        resolve_model_client,
    )
    from .scripted import ScriptedModel
    from .types import (
        Message,
        MessageKind,
        ModelClient,
        ModelError,
        ModelRequest,
        ModelResponse,
        Purpose,
        Role,
        TextSink,
        ToolCall,
        ToolSpec,
        Usage,
        is_context_overflow_text,
    )

__all__ = [
    "Message",
    "MessageKind",
    "ModelClient",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "OpenAIModel",
    "Purpose",
    "Role",
    "ScriptedModel",
    "TextSink",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "is_context_overflow_text",
    "model_from_settings",
    "resolve_model_client",
]

_HOME = {
    "OpenAIModel": "openai_client",
    "model_from_settings": "openai_client",
    "resolve_model_client": "openai_client",
    "ScriptedModel": "scripted",
}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOME.get(name, 'types')}"), name)
    globals()[name] = value
    return value
