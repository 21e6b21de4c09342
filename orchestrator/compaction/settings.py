"""Compaction settings (COMPACTION-2.1; C3, C4, S20) as one validated value.

Validation happens once, at construction, so a bad value is reported as a one-line error naming the
field instead of surfacing later as a planner traceback.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from orchestrator.base.config import COMPACTION_MODES, Settings
from orchestrator.base.errors import ReverieError

__all__ = ["DEFAULT_CLIP_CHARS", "CompactionMode", "CompactionSettings", "CompactionSettingsError"]

CompactionMode = Literal["sliding_window", "all"]
"""``COMPACTION_MODES`` (``base/config.py``, where they are declared) as a type; a test keeps the two equal."""
DEFAULT_CLIP_CHARS = 50_000


class CompactionSettingsError(ReverieError, ValueError):
    """A bad compaction setting; the message names the field."""


_MODE_ERROR = (
    'Local backend compaction currently supports only modes "all" and "sliding_window" (received "{mode}").'
)


@dataclass(frozen=True)
class CompactionSettings:
    """Everything the planner and the ladder read.

    ``sliding_percentage`` accepts any real number; the planner normalises it exactly as letta-code
    does (<= 0 -> 0.1, > 1 -> 1.0, NaN -> 0.3), so a stored letta-code value keeps its meaning.
    ``summarizer_model`` ``None`` means the conversation's model (C3); ``summarizer_context_window``
    ``None`` means ``context_window``. ``prompt`` replaces the mode's built-in summarizer prompt;
    ``clip_chars`` ``None`` disables clipping of the summary.
    """

    mode: CompactionMode = "sliding_window"
    sliding_percentage: float = 0.3
    context_window: int = 128_000
    summary_reserve: int = 1_000
    summarizer_model: str | None = None
    fallback_summarizer_model: str | None = None
    soft_threshold_fraction: float = 0.8
    summarizer_context_window: int | None = None
    prompt: str | None = None
    clip_chars: int | None = DEFAULT_CLIP_CHARS

    def __post_init__(self) -> None:
        if self.mode not in COMPACTION_MODES.names:
            raise CompactionSettingsError(_MODE_ERROR.format(mode=self.mode))
        if isinstance(self.sliding_percentage, bool) or not isinstance(self.sliding_percentage, int | float):
            raise CompactionSettingsError(
                f"compaction setting sliding_percentage must be a number (received {self.sliding_percentage!r})"
            )
        _positive_int("context_window", self.context_window)
        if self.summarizer_context_window is not None:
            _positive_int("summarizer_context_window", self.summarizer_context_window)
        if (
            isinstance(self.summary_reserve, bool)
            or not isinstance(self.summary_reserve, int)
            or self.summary_reserve < 0
        ):
            raise CompactionSettingsError(
                f"compaction setting summary_reserve must be a whole number >= 0 (received {self.summary_reserve!r})"
            )
        fraction = self.soft_threshold_fraction
        if (
            isinstance(fraction, bool)
            or not isinstance(fraction, int | float)
            or not math.isfinite(fraction)
            or not 0 < fraction <= 1
        ):
            raise CompactionSettingsError(
                f"compaction setting soft_threshold_fraction must be a number in (0, 1] (received {fraction!r})"
            )
        for name in ("summarizer_model", "fallback_summarizer_model"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise CompactionSettingsError(
                    f"compaction setting {name} must be a non-empty model name or unset (received {value!r})"
                )
        if self.prompt is not None and not isinstance(self.prompt, str):
            raise CompactionSettingsError(
                f"compaction setting prompt must be text or unset (received {self.prompt!r})"
            )
        if self.clip_chars is not None:
            _positive_int("clip_chars", self.clip_chars)

    def summarizer_for(self, conversation_model: str) -> str:
        """The summarizer model: the setting, else the conversation's model (C3)."""
        return self.summarizer_model or conversation_model

    @property
    def summarizer_window(self) -> int:
        return self.summarizer_context_window or self.context_window

    def with_overrides(self, overrides: Mapping[str, Any]) -> CompactionSettings:
        """Request settings merged over these (a manual ``/compact all``); unknown keys are errors.

        As in letta-code, a request that changes the mode without giving a prompt drops a custom prompt
        written for the other mode.
        """
        known = {f.name for f in fields(self)}
        for key in overrides:
            if key not in known:
                raise CompactionSettingsError(f"unknown compaction setting {key!r}")
        merged = dict(overrides)
        if "mode" in merged and "prompt" not in merged and merged["mode"] != self.mode:
            merged["prompt"] = None
        return replace(self, **merged)

    @classmethod
    def from_config(cls, settings: Settings) -> CompactionSettings:
        """Build from the resolved configuration (``orchestrator.base.config.Settings``, S20)."""
        return cls(
            mode=settings.compaction_mode,  # type: ignore[arg-type]
            sliding_percentage=settings.sliding_percentage,
            context_window=settings.context_window,
            summary_reserve=settings.summary_reserve,
            summarizer_model=settings.summarizer_model,
            fallback_summarizer_model=settings.fallback_summarizer_model,
        )


def _positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise CompactionSettingsError(
            f"compaction setting {name} must be a whole number > 0 (received {value!r})"
        )
