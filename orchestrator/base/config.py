"""Settings and where they come from (S20).

Precedence, highest first: CLI flag > environment > per-agent settings > ``$REVERIE_HOME/config.toml``
> defaults. Every value remembers where it came from, so a bad one is reported in the words the user
wrote it in: ``config.toml: turn.max_steps``, ``REVERIE_MAX_STEPS``, ``--context-window``.

A value is checked by one parser, ``parse_setting``, whichever way it came in (the config file,
the environment, flags, an agent's settings, a suite's ``settings``, a sweep's ``--trigger``, the
library's parameters); a setting that takes one of a few names declares them once here as
``Choices`` (``CHOICES``), and its refusal lists them. Values given to the library are named as
its parameters (``context_window``); the command line passes ``Flags``, named as its flags.

Choices made here (the specs leave them open): integers must be whole (``1.5`` is refused rather
than truncated), the context window has a 256-token floor everywhere, and ``reflection.trigger``
also takes ``step-count:N`` (which sets ``reflection.step_count``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from orchestrator.base.choices import BadValue, Choice, Choices
from orchestrator.base.errors import ReverieError
from orchestrator.base.paths import config_path

__all__ = [
    "CHOICES",
    "COMPACTION_MODES",
    "MERGE_POLICIES",
    "REFLECTION_TRIGGERS",
    "SANDBOX_MODES",
    "SETTING_NAMES",
    "SUBAGENT_SECONDS_FLOOR",
    "SUBAGENT_TOKENS_PER_WINDOW",
    "ConfigError",
    "Flags",
    "Settings",
    "load_settings",
    "parameter_value",
    "parse_setting",
    "read_config_file",
]


class ConfigError(ReverieError, ValueError):
    """A bad setting; the message names the source and the key."""


class Flags(dict[str, Any]):
    """Settings given on the command line: a refusal names them as flags (``--context-window``),
    where a plain mapping's (the library's) are named as parameters (``context_window``)."""


REFLECTION_TRIGGERS = Choices((
    Choice("off"),
    Choice("compaction-event"),
    Choice("step-count", "N", "reflection_step_count"),
    Choice("idle", "SECONDS", "reflection_idle_seconds"),
))
"""``reflection.trigger``: when reflection starts by itself (the policy: ``subagents/triggers.py``)."""
COMPACTION_MODES = Choices.of("sliding_window", "all")
"""``compaction.mode``: what a compaction summarises (COMPACTION-2.2)."""
MERGE_POLICIES = Choices.of("resolve", "keep", "review")
"""``reflection.merge``: what a conflicting reflection branch gets (D3); ``review`` holds every one for a person (V1)."""
SANDBOX_MODES = Choices.of("auto", "bwrap", "off")
"""``tools.sandbox``: how the bash tool confines its commands (``tools/sandbox.py``)."""


@dataclass(frozen=True)
class Settings:
    """The effective configuration after every layer was applied (see the module doc for their order)."""

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
    reflection_idle_seconds: float = 300.0
    """``idle:SECONDS``: how long a session waits without input before it reflects."""
    request_timeout: float = 600.0
    model_attempts: int = 4
    max_response_chars: int = 1_000_000
    sandbox: str = "auto"
    network: bool = True
    tool_env: tuple[str, ...] = ()
    overflow_to_file: bool = True
    middle_truncate: bool = True
    write_limit_mb: int = 1024
    """MiB one bash command may write into one file, and into its sandbox's private ``/tmp`` (and
    ``/dev/shm``, each); see ``orchestrator.tools.sandbox``."""
    reflection_merge: str = "resolve"
    reflection_merge_instructions: str | None = None
    price_in: float | None = None
    """USD per million prompt tokens; with ``price_out`` it makes chat show cost (``/cost``, json's ``cost``)."""
    price_out: float | None = None
    """USD per million completion tokens."""
    limit_turn_tokens: int | None = None
    """``[limits]`` (B1, ``docs/design.md``): caps named ``limit_<scope>_<measure>``; ``None`` is no
    cap, except a subagent's tokens and seconds, which default to a share of the window (B2)."""
    limit_turn_seconds: float | None = None
    limit_session_tokens: int | None = None
    limit_session_cost: float | None = None
    limit_reflection_tokens: int | None = None
    limit_reflection_calls: int | None = None
    limit_reflection_seconds: float | None = None
    limit_reflection_cost: float | None = None
    limit_compaction_tokens: int | None = None
    limit_compaction_calls: int | None = None
    limit_compaction_seconds: float | None = None
    limit_compaction_cost: float | None = None
    limit_resolver_tokens: int | None = None
    limit_resolver_calls: int | None = None
    limit_resolver_seconds: float | None = None
    limit_resolver_cost: float | None = None
    limit_task_tokens: int | None = None
    limit_task_cost: float | None = None
    limit_task_seconds: float | None = None
    max_subagents: int = 4
    """Background subagents one agent's session runs at once (the supervisor's capacity)."""
    max_process_subagents: int = 16
    """Background subagents one process runs at once, over all its sessions (a batch run's tasks)."""
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    """Where each value that is not the default came from, as the user wrote it (``--model``,
    ``REVERIE_MODEL``, ``config.toml: model.name``, ``agent setting model``); not a setting itself."""

    @property
    def uses_endpoint(self) -> bool:
        """True when a real OpenAI-compatible endpoint is configured (else the scripted model)."""
        return bool(self.base_url)

    def explain(self, *, typed: bool = False) -> tuple[tuple[str, Any, str], ...]:
        """``(key, value, source)`` for every setting, in declaration order: the config file's key
        (``model.name``), the value as text (``typed``: as its type, for JSON; secrets masked either
        way) and where it came from (``default`` when nothing set it). What ``reverie config`` prints."""
        rows: list[tuple[str, Any, str]] = []
        for name in SETTING_NAMES:
            value = self.effective(name)
            if name == "api_key" and value:
                shown: Any = "***"
            elif typed:
                shown = list(value) if isinstance(value, tuple) else value
            else:
                shown = "(not set)" if value is None else ", ".join(value) if isinstance(value, tuple) else str(value)
            source = self.sources.get(name) or (f"default: {_DERIVED[name][1]}" if name in _DERIVED else "default")
            rows.append((_FILE_KEY.get(name, name), shown, source))
        return tuple(rows)

    def effective(self, name: str) -> Any:
        """The value in force: the setting, or for a subagent's unset token and time caps the
        default derived from the context window (B2)."""
        value = getattr(self, name)
        if value is None and name in _DERIVED:
            return _DERIVED[name][0](self)
        return value

    def with_value(self, name: str, value: Any, source: str) -> Settings:
        """This value set by ``source`` (a session's ``set_model``), remembered as its source."""
        return replace(self, **{name: value}, sources={**self.sources, name: source})


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
    "reflection.idle_seconds": "reflection_idle_seconds",
    "model.request_timeout": "request_timeout",
    "model.attempts": "model_attempts",
    "model.max_response_chars": "max_response_chars",
    "model.price_in": "price_in",
    "model.price_out": "price_out",
    "tools.sandbox": "sandbox",
    "tools.network": "network",
    "tools.env": "tool_env",
    "tools.overflow_to_file": "overflow_to_file",
    "tools.middle_truncate": "middle_truncate",
    "tools.write_limit_mb": "write_limit_mb",
    "reflection.merge": "reflection_merge",
    "reflection.merge_instructions": "reflection_merge_instructions",
    "limits.subagents": "max_subagents",
    "limits.process_subagents": "max_process_subagents",
    **{f"limits.{f.name[len('limit_'):]}": f.name for f in fields(Settings) if f.name.startswith("limit_")},
}
_ENV: Mapping[str, str] = {
    "REVERIE_BASE_URL": "base_url",
    "OPENAI_API_KEY": "api_key",
    "REVERIE_MODEL": "model",
    "REVERIE_CONTEXT_WINDOW": "context_window",
    "REVERIE_MAX_STEPS": "max_steps",
    "REVERIE_STREAM_IDLE_TIMEOUT": "stream_idle_timeout",
    "REVERIE_REQUEST_TIMEOUT": "request_timeout",
    "REVERIE_MODEL_ATTEMPTS": "model_attempts",
    "REVERIE_MAX_RESPONSE_CHARS": "max_response_chars",
    "REVERIE_SANDBOX": "sandbox",
    "REVERIE_REFLECTION_TRIGGER": "reflection_trigger",
    "REVERIE_COMPACTION_MODE": "compaction_mode",
    "REVERIE_TOOL_OVERFLOW_TO_FILE": "overflow_to_file",
    "REVERIE_TOOL_MIDDLE_TRUNCATE": "middle_truncate",
    "REVERIE_WRITE_LIMIT_MB": "write_limit_mb",
    "REVERIE_MAX_SUBAGENTS": "max_subagents",
    "REVERIE_MAX_PROCESS_SUBAGENTS": "max_process_subagents",
    **{f"REVERIE_{f.name.upper()}": f.name for f in fields(Settings) if f.name.startswith("limit_")},
}
_FLAG_NAMES: Mapping[str, str] = {"limit_session_tokens": "--max-tokens", "limit_session_cost": "--max-cost"}
"""Flags not spelled as their setting (``--context-window`` is ``context_window``'s own)."""
SUBAGENT_TOKENS_PER_WINDOW = 32
"""B2: a subagent launch may spend this many context windows of tokens unless told otherwise."""
SUBAGENT_SECONDS_FLOOR = 600.0
_DERIVED: Mapping[str, tuple[Any, str]] = {
    **{
        f"limit_{kind}_tokens": (
            lambda s: SUBAGENT_TOKENS_PER_WINDOW * s.context_window,
            f"{SUBAGENT_TOKENS_PER_WINDOW} x compaction.context_window",
        )
        for kind in ("reflection", "compaction", "resolver")
    },
    **{
        f"limit_{kind}_seconds": (
            lambda s: max(SUBAGENT_SECONDS_FLOOR, s.context_window / 100),
            f"compaction.context_window / 100 s, at least {SUBAGENT_SECONDS_FLOOR:.0f} s",
        )
        for kind in ("reflection", "compaction", "resolver")
    },
}
"""B2's defaults: a setting left unset takes the value of its function of the other settings."""
SETTING_NAMES: tuple[str, ...] = tuple(f.name for f in fields(Settings) if f.name != "sources")
"""Every setting's attribute name, in declaration order (``sources`` is bookkeeping, not a setting)."""
_TYPES = {f.name: f.type for f in fields(Settings) if f.name != "sources"}
_MINIMUM = {"context_window": 256}
_DAY = 86_400.0
_MAXIMUM: Mapping[str, float] = {
    "max_steps": 100_000,
    "max_subagents": 64,
    "max_process_subagents": 1024,
    "bash_timeout": _DAY,
    "stream_idle_timeout": _DAY,
    "request_timeout": _DAY,
    "model_attempts": 100,
    "context_window": 100_000_000,
    "summary_reserve": 10_000_000,
    "reflection_step_count": 1_000_000,
    "reflection_idle_seconds": _DAY,
    "max_response_chars": 100_000_000,
    "write_limit_mb": 1024 * 1024,
}
"""Upper bounds: a value past them is a typo or a unit mistake (``1e308`` seconds), never intended."""
_PRICES = ("price_in", "price_out")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SECRET_NAME = re.compile(r"API_?KEY|SECRET|TOKEN|PASSWORD", re.IGNORECASE)
CHOICES: Mapping[str, Choices] = {
    "reflection_trigger": REFLECTION_TRIGGERS,
    "compaction_mode": COMPACTION_MODES,
    "reflection_merge": MERGE_POLICIES,
    "sandbox": SANDBOX_MODES,
}
"""The settings that take one of a few names, with their declaration."""
_FILE_KEY = {attr: dotted for dotted, attr in _KEYS.items()}


def read_config_file(path: Path | None = None) -> dict[str, Any]:
    """The config file flattened to dotted keys; missing file is empty, a bad one a ConfigError."""
    path = path or config_path()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror or exc}") from None
    # deferred: the TOML parser (its regexes) is only needed when a config file exists
    import tomllib

    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
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


def parse_setting(name: str, value: Any) -> dict[str, Any]:
    """The one parser of a setting's value: ``{name: value}`` as the setting's type, with what the
    value also sets (``step-count:5`` sets ``reflection_step_count`` too). A refusal is ``BadValue``
    with the reason alone; the caller names where the value was written (module docstring)."""
    if name not in _TYPES:
        raise BadValue(f"unknown setting (known: {', '.join(SETTING_NAMES)})")
    choices = CHOICES.get(name)
    if choices is None or not isinstance(value, str) or not value.strip():
        return {name: _value(name, value)}
    choice, argument = choices.parse(value)
    if argument is None:
        return {name: choice.name}
    try:
        return {name: choice.name, choice.into: _value(choice.into, argument)}
    except BadValue as exc:
        raise BadValue(f"{choice.spelled}: {exc}") from None


def parameter_value(name: str, value: Any) -> Any:
    """A library parameter that is a setting (``price_in=``), through the setting's parser; None
    passes. A refusal is a ``ConfigError`` naming the parameter (``price_in = -1: ...``)."""
    if value is None:
        return None
    try:
        return parse_setting(name, value)[name]
    except BadValue as exc:
        raise ConfigError(f"{name} = {value!r}: {exc}") from None


def _value(name: str, value: Any) -> Any:
    """``value`` as the setting's type, or ``BadValue`` saying why not."""
    kind = str(_TYPES[name])
    if value is None or (isinstance(value, str) and not value.strip()):
        if "None" in kind:
            return None
        raise BadValue("must not be empty")
    if kind.startswith("int"):
        if isinstance(value, bool) or isinstance(value, float) and not value.is_integer():
            raise BadValue("expected a whole number")
        try:
            number = int(value.strip()) if isinstance(value, str) else int(value)
        except (TypeError, ValueError):
            raise BadValue("expected a whole number") from None
        if number < _MINIMUM.get(name, 1):
            raise BadValue(f"must be at least {_MINIMUM[name]}" if name in _MINIMUM else "must be positive")
        if name in _MAXIMUM and number > _MAXIMUM[name]:
            raise BadValue(f"must be at most {_MAXIMUM[name]:,.0f}")
        return number
    if kind.startswith("float"):
        if isinstance(value, bool):
            raise BadValue("expected a number")
        try:
            real = float(value)
        except (TypeError, ValueError):
            raise BadValue("expected a number") from None
        if name in _PRICES and real == 0:
            return real
        if not real > 0 or real == float("inf"):
            raise BadValue("must be zero or more" if name in _PRICES else "must be a positive number")
        if name in _MAXIMUM and real > _MAXIMUM[name]:
            raise BadValue(f"must be at most {_MAXIMUM[name]:,.0f}")
        if name == "sliding_percentage" and real > 1:
            raise BadValue("must be in (0, 1]")
        return real
    if kind.startswith("bool"):
        return _boolean(value)
    if kind.startswith("tuple"):
        return _names(value)
    if not isinstance(value, str):
        raise BadValue("expected a string (in quotes)")
    if name == "base_url" and not re.match(r"^https?://[^\s/]+", value):
        raise BadValue("expected an http:// or https:// URL")
    return value


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("0", "false", "no", "off"):
        return False
    raise BadValue("expected true or false")


def _names(value: Any) -> tuple[str, ...]:
    """``[tools] env``: environment variable names passed to the bash tool; secrets never are."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(item, str) for item in items):
        raise BadValue("expected a list of environment variable names")
    names = tuple(item.strip() for item in items if item.strip())
    for name in names:
        if not _ENV_NAME.match(name):
            raise BadValue(f"{name!r} is not an environment variable name")
        if _SECRET_NAME.search(name):
            raise BadValue(f"{name} looks like a secret; the bash tool never receives API keys or tokens")
    return names


def _where(source: str, name: str) -> str:
    if source == "environment":
        return next(var for var, attr in _ENV.items() if attr == name)
    if source == "command line":
        return _FLAG_NAMES.get(name, f"--{name.replace('_', '-')}")
    if source == "settings":
        return name
    if source == "agent settings":
        return f"agent setting {name}"
    return f"{source}: {_FILE_KEY.get(name, name)}"


def load_settings(
    *,
    cli: Mapping[str, Any] | None = None,
    agent: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    path: Path | None = None,
) -> Settings:
    """Resolve the settings; ``None`` values in ``cli`` mean "not given". ``cli`` ranks highest and
    is named as flags when it is ``Flags`` (the command line), else as parameters (the library)."""
    environ = os.environ if environ is None else environ
    settings = Settings()
    origin: dict[str, str] = {}
    layers: list[tuple[str, Mapping[str, Any]]] = [
        (str(path or config_path()), read_config_file(path)),
        ("agent settings", dict(agent or {})),
        ("environment", {attr: environ[var] for var, attr in _ENV.items() if environ.get(var)}),
        ("command line" if isinstance(cli, Flags) else "settings", {k: v for k, v in (cli or {}).items() if v is not None}),
    ]
    for source, values in layers:
        updates: dict[str, Any] = {}
        for name, value in values.items():
            if name not in _TYPES:
                raise ConfigError(f"{source}: unknown setting {name!r} (known: {', '.join(SETTING_NAMES)})")
            where = _where(source, name)
            try:
                parsed = parse_setting(name, value)
            except BadValue as exc:
                raise ConfigError(f"{where} = {value!r}: {exc}") from None
            updates.update(parsed)
            origin.update(dict.fromkeys(parsed, where))
        settings = replace(settings, **updates)
    return replace(settings, sources=origin)
