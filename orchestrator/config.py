"""Settings and where they come from (DECISIONS S20).

Precedence, highest first: CLI flag > environment > per-agent settings > ``$REVERIE_HOME/config.toml``
> defaults. Every source is flattened to dotted keys (``model.base_url``) so one validation pass
names the offending key and source in a one-line error.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from orchestrator.paths import config_path

__all__ = ["ConfigError", "Settings", "load_settings", "read_config_file"]


class ConfigError(ValueError):
    """A bad setting; the message names the source and the key."""


@dataclass(frozen=True)
class Settings:
    base_url: str | None = None
    api_key: str | None = None
    model: str = "scripted"
    max_steps: int = 50
    bash_timeout: float = 120.0
    stream_idle_timeout: float = 60.0
    context_window: int = 128_000
    summary_reserve: int = 1_000
    compaction_mode: str = "sliding_window"
    sliding_percentage: float = 0.3
    summarizer_model: str | None = None
    fallback_summarizer_model: str | None = None
    reflection_trigger: str = "compaction-event"
    reflection_step_count: int = 25

    @property
    def uses_endpoint(self) -> bool:
        """True when a real OpenAI-compatible endpoint is configured (else the scripted model)."""
        return bool(self.base_url)


_KEYS: Mapping[str, str] = {
    "model.base_url": "base_url",
    "model.api_key": "api_key",
    "model.name": "model",
    "turn.max_steps": "max_steps",
    "turn.bash_timeout": "bash_timeout",
    "model.stream_idle_timeout": "stream_idle_timeout",
    "compaction.context_window": "context_window",
    "compaction.summary_reserve": "summary_reserve",
    "compaction.mode": "compaction_mode",
    "compaction.sliding_percentage": "sliding_percentage",
    "compaction.summarizer_model": "summarizer_model",
    "compaction.fallback_summarizer_model": "fallback_summarizer_model",
    "reflection.trigger": "reflection_trigger",
    "reflection.step_count": "reflection_step_count",
}
_ENV: Mapping[str, str] = {
    "REVERIE_BASE_URL": "base_url",
    "OPENAI_API_KEY": "api_key",
    "REVERIE_MODEL": "model",
    "REVERIE_CONTEXT_WINDOW": "context_window",
    "REVERIE_MAX_STEPS": "max_steps",
}
_TYPES = {f.name: f.type for f in fields(Settings)}


def read_config_file(path: Path | None = None) -> dict[str, Any]:
    """The config file flattened to dotted keys; missing file is empty, a bad one a ConfigError."""
    path = path or config_path()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    flat: dict[str, Any] = {}
    for section, values in data.items():
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: top-level key {section!r} must be a [section]")
        for key, value in values.items():
            dotted = f"{section}.{key}"
            if dotted not in _KEYS:
                raise ConfigError(f"{path}: unknown setting {dotted!r} (known: {', '.join(sorted(_KEYS))})")
            flat[_KEYS[dotted]] = value
    return flat


def _coerce(name: str, value: Any, source: str) -> Any:
    kind = str(_TYPES[name])
    try:
        if value is None:
            if "None" in kind:
                return None
            raise ValueError("must not be empty")
        if kind.startswith("int"):
            if isinstance(value, bool):
                raise ValueError("expected an integer")
            number = int(value)
            if number <= 0:
                raise ValueError("must be positive")
            return number
        if kind.startswith("float"):
            real = float(value)
            if real <= 0:
                raise ValueError("must be positive")
            return real
        return str(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: setting {name!r} = {value!r}: {exc}") from None


def load_settings(
    *,
    cli: Mapping[str, Any] | None = None,
    agent: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    path: Path | None = None,
) -> Settings:
    """Resolve the settings; ``None`` values in ``cli`` mean "flag not given"."""
    environ = os.environ if environ is None else environ
    settings = Settings()
    layers: list[tuple[str, Mapping[str, Any]]] = [
        (str(path or config_path()), read_config_file(path)),
        ("agent settings", dict(agent or {})),
        ("environment", {attr: environ[var] for var, attr in _ENV.items() if environ.get(var)}),
        ("command line", {k: v for k, v in (cli or {}).items() if v is not None}),
    ]
    for source, values in layers:
        updates = {}
        for name, value in values.items():
            if name not in _TYPES:
                raise ConfigError(f"{source}: unknown setting {name!r}")
            updates[name] = _coerce(name, value, source)
        settings = replace(settings, **updates)
    if settings.compaction_mode not in {"sliding_window", "all"}:
        raise ConfigError(f"compaction mode {settings.compaction_mode!r}: use 'sliding_window' or 'all'")
    if not 0 < settings.sliding_percentage <= 1:
        raise ConfigError(f"sliding percentage {settings.sliding_percentage}: must be in (0, 1]")
    if settings.reflection_trigger not in {"off", "compaction-event", "step-count"}:
        raise ConfigError(
            f"reflection trigger {settings.reflection_trigger!r}: use off, compaction-event or step-count"
        )
    return settings
