"""The model seam: value types, the OpenAI-compatible client and the offline scripted model.

Names load lazily (PEP 562, through ``orchestrator.base.lazy`` as every package does): the openai SDK
takes about a second to import, and commands that never call a model (``reverie memory``, ``reverie
prompt``, the pre-commit hook) should not pay for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.base.lazy import lazy_attributes

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

_CLIENTS = {
    "OpenAIModel": "openai_client",
    "model_from_settings": "openai_client",
    "resolve_model_client": "openai_client",
    "ScriptedModel": "scripted",
}
_HOME = {**dict.fromkeys(__all__, "types"), **_CLIENTS}

__getattr__ = lazy_attributes(__name__, globals(), _HOME)
