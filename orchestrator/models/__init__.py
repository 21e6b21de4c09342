"""The model seam: value types, the OpenAI-compatible client and the offline scripted model."""

from .openai_client import OpenAIModel, is_context_overflow_text, model_from_settings, resolve_model_client
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
