"""Tree constraints of the pre-commit validator and ``.memfs.config.json`` (MEMFS-4.6 to MEMFS-4.7).

Pure: the caller hands in the index listing, the accepted tree and blob contents. The config is
parsed the way the reference's JavaScript parses it (``JSON.parse`` plus safe-integer checks), so
booleans are not numbers, ``5.0`` and ``1e3`` are integers, ``NaN``/``Infinity`` are not JSON and
unknown keys are reported in JavaScript's key order (array-index-like keys first).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from orchestrator.memfs.glob import compile_glob, pattern_error
from orchestrator.memfs.policy import (
    APPROVAL_ENV,
    APPROVAL_ENV_ALIAS,
    ROOT_MARKER,
    SHARED_MEMORY,
    LayoutPolicy,
)
from orchestrator.memfs.snapshot import Entry

__all__ = [
    "CONFIG_PATH",
    "DEFAULT_CONFIG",
    "DEFAULT_CONFIG_JSON",
    "CharacterLimit",
    "ConfigError",
    "ConstraintsConfig",
    "Formatting",
    "change_approved",
    "parse_config",
    "read_only_errors",
    "read_only_patterns",
    "tree_constraint_errors",
]

CONFIG_PATH: Final = ".memfs.config.json"
DEFAULT_CONFIG_JSON: Final = (
    '{\n  "version": 1,\n  "maxDepth": 2,\n  "maxFileCharacters": 20000,\n  "maxCoreMemoryCharacters": 65536\n}\n'
)
_MAX_SAFE: Final = 2**53 - 1
_KEYS: Final = (
    "version",
    "maxDepth",
    "maxFileCharacters",
    "maxCoreMemoryCharacters",
    "fileCharacterLimits",
    "readOnlyFiles",
    "formatting",
)
_LEGACY_MEMORY = re.compile(r"(?:memory/)?(?:system|reference)/.*\.md", re.DOTALL)
_P: Final = CONFIG_PATH + ": "


@dataclass(frozen=True)
class CharacterLimit:
    """One ``fileCharacterLimits`` entry; ``max_characters`` None means unlimited."""

    pattern: str
    max_characters: int | None


@dataclass(frozen=True)
class Formatting:
    """Opt-in hygiene checks; never rewrite files."""

    line_endings: str | None = None
    final_newline: bool = False
    trailing_whitespace: bool = False


@dataclass(frozen=True)
class ConstraintsConfig:
    """A parsed config; None fields are absent (no limit from them)."""

    max_depth: int | None = None
    max_file_characters: int | None = None
    max_core_memory_characters: int | None = None
    file_character_limits: tuple[CharacterLimit, ...] = ()
    read_only_files: tuple[str, ...] = ()
    formatting: Formatting | None = None

    def overlay_on(self, defaults: ConstraintsConfig, present: frozenset[str]) -> ConstraintsConfig:
        """``{...defaults, ...parsed}``: keys present in the file win, the rest come from ``defaults``."""
        return ConstraintsConfig(
            max_depth=self.max_depth if "maxDepth" in present else defaults.max_depth,
            max_file_characters=(
                self.max_file_characters if "maxFileCharacters" in present else defaults.max_file_characters
            ),
            max_core_memory_characters=(
                self.max_core_memory_characters
                if "maxCoreMemoryCharacters" in present
                else defaults.max_core_memory_characters
            ),
            file_character_limits=self.file_character_limits,
            read_only_files=self.read_only_files,
            formatting=self.formatting,
        )


DEFAULT_CONFIG: Final = ConstraintsConfig(max_depth=2, max_file_characters=20000, max_core_memory_characters=65536)


@dataclass(frozen=True)
class ConfigError:
    """Parse result carrying the reference's messages, in its order."""

    errors: tuple[str, ...]


def change_approved(env: Mapping[str, str]) -> bool:
    """Human approval for changing the config: ``REVERIE_…=1`` or the reference's ``LETTA_…=1`` (M7)."""
    return env.get(APPROVAL_ENV) == "1" or env.get(APPROVAL_ENV_ALIAS) == "1"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"Unexpected token {name} in JSON")


def _safe_int(value: object) -> int | None:
    """The integer a JSON number stands for when it is a safe integer, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    number = int(value)
    return number if abs(number) <= _MAX_SAFE else None


def _js_key_order(keys: Sequence[str]) -> list[str]:
    """``Object.keys`` order: canonical array indexes ascending, then the rest in insertion order."""

    def is_index(key: str) -> bool:
        return key.isascii() and key.isdigit() and (key == "0" or key[0] != "0") and int(key) < 2**32 - 1

    indexes = sorted((k for k in keys if is_index(k)), key=int)
    return indexes + [k for k in keys if not is_index(k)]


def _is_object(value: object) -> bool:
    return isinstance(value, dict)


def parse_config(text: str) -> tuple[ConstraintsConfig, frozenset[str]] | ConfigError:
    """Parse the staged config text: the config and the keys it sets, or every error found."""
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as error:
        return ConfigError((f"{_P}invalid JSON ({error})",))
    if not _is_object(value):
        return ConfigError((f"{_P}expected a JSON object",))
    errors: list[str] = []
    for key in _js_key_order(list(value)):
        if key not in _KEYS:
            errors.append(f"{_P}unknown field '{key}'")
    if _safe_int(value.get("version")) != 1:
        errors.append(f"{_P}version must be 1")
    max_depth = _safe_int(value.get("maxDepth"))
    if "maxDepth" in value and (max_depth is None or max_depth < 0):
        errors.append(f"{_P}maxDepth must be a non-negative integer")
    positive: dict[str, int | None] = {}
    for key in ("maxFileCharacters", "maxCoreMemoryCharacters"):
        number = _safe_int(value.get(key))
        positive[key] = number
        if key in value and (number is None or number <= 0):
            errors.append(f"{_P}{key} must be a positive integer")
    read_only: list[str] = []
    if "readOnlyFiles" in value:
        patterns = value["readOnlyFiles"]
        if not isinstance(patterns, list):
            errors.append(f"{_P}readOnlyFiles must be an array")
        else:
            for index, pattern in enumerate(patterns):
                problem = pattern_error(pattern, f"{_P}readOnlyFiles[{index}]")
                if problem:
                    errors.append(problem)
                else:
                    read_only.append(pattern)
    formatting = _parse_formatting(value, errors)
    limits = _parse_limits(value, errors)
    if errors:
        return ConfigError(tuple(errors))
    config = ConstraintsConfig(
        max_depth=max_depth,
        max_file_characters=positive["maxFileCharacters"],
        max_core_memory_characters=positive["maxCoreMemoryCharacters"],
        file_character_limits=tuple(limits),
        read_only_files=tuple(read_only),
        formatting=formatting,
    )
    return config, frozenset(value)


def read_only_patterns(text: bytes | None) -> tuple[str, ...]:
    """The ``readOnlyFiles`` of a config's text; none for an absent or invalid config."""
    if text is None:
        return ()
    parsed = parse_config(text.decode("utf-8", "replace"))
    return () if isinstance(parsed, ConfigError) else parsed[0].read_only_files


def _parse_formatting(value: dict[str, Any], errors: list[str]) -> Formatting | None:
    if "formatting" not in value:
        return None
    spec = value["formatting"]
    if not _is_object(spec):
        errors.append(f"{_P}formatting must be an object")
        return None
    for key in _js_key_order(list(spec)):
        item = spec[key]
        if key == "lineEndings":
            if item != "lf":
                errors.append(f"{_P}formatting.lineEndings must be 'lf'")
        elif key in ("finalNewline", "trailingWhitespace"):
            if not isinstance(item, bool):
                errors.append(f"{_P}formatting.{key} must be a boolean")
        else:
            errors.append(f"{_P}formatting: unknown field '{key}'")
    return Formatting(
        line_endings="lf" if spec.get("lineEndings") == "lf" else None,
        final_newline=spec.get("finalNewline") is True,
        trailing_whitespace=spec.get("trailingWhitespace") is True,
    )


def _parse_limits(value: dict[str, Any], errors: list[str]) -> list[CharacterLimit]:
    if "fileCharacterLimits" not in value:
        return []
    overrides = value["fileCharacterLimits"]
    if not isinstance(overrides, list):
        errors.append(f"{_P}fileCharacterLimits must be an array")
        return []
    limits: list[CharacterLimit] = []
    for index, override in enumerate(overrides):
        label = f"{_P}fileCharacterLimits[{index}]"
        if not _is_object(override):
            errors.append(f"{label} must be an object")
            continue
        for key in _js_key_order(list(override)):
            if key not in ("pattern", "maxCharacters"):
                errors.append(f"{label}: unknown field '{key}'")
        problem = pattern_error(override.get("pattern"), label)
        if problem:
            errors.append(problem)
        maximum = override.get("maxCharacters", ...)
        number = _safe_int(maximum)
        if maximum is not None and (number is None or number <= 0):
            errors.append(f"{label}: maxCharacters must be a positive integer or null")
        elif not problem:
            limits.append(CharacterLimit(override["pattern"], None if maximum is None else number))
    return limits


_FENCE = re.compile(" {0,3}(`{3,}|~{3,})([^\n\r\u2028\u2029]*)")
_QUOTE_PREFIX = re.compile(r"(?: {0,3}> ?)+")
_TRAILING = re.compile(r"[ \t]+\Z")


def _js_trim_is_empty(text: str) -> bool:
    return not text.strip(
        "\t\n\x0b\x0c\r \xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
        "\u2028\u2029\u202f\u205f\u3000\ufeff"
    )


def _formatting_errors(path: str, content: str, formatting: Formatting) -> list[str]:
    errors: list[str] = []
    if formatting.line_endings == "lf" and "\r" in content:
        errors.append(f"{path}: formatting requires LF line endings")
    if formatting.final_newline and content and not content.endswith("\n"):
        errors.append(f"{path}: formatting requires a final newline")
    if formatting.trailing_whitespace:
        fence = ""
        for number, line in enumerate(content.replace("\r\n", "\n").split("\n"), start=1):
            quoted = _QUOTE_PREFIX.match(line)
            prose = line[quoted.end() :] if quoted else line
            marker = _FENCE.fullmatch(prose)
            if marker and (
                not fence
                or (
                    marker.group(1)[0] == fence[0]
                    and len(marker.group(1)) >= len(fence)
                    and _js_trim_is_empty(marker.group(2))
                )
            ):
                fence = "" if fence else marker.group(1)
                continue
            if fence or prose.startswith(("    ", "\t")):
                continue
            trailing = _TRAILING.search(prose)
            if trailing and not (trailing.group(0) == "  " and not _js_trim_is_empty(prose)):
                errors.append(f"{path}:{number}: formatting disallows trailing whitespace")
    return errors


def _is_memory_file(path: str, v2: bool, layout: LayoutPolicy) -> bool:
    if path.startswith("skills/"):
        return False
    return v2 or layout == SHARED_MEMORY or _LEGACY_MEMORY.fullmatch(path) is not None


def _missing_index(path: str, paths: set[str]) -> str | None:
    prefix = ""
    for segment in path.split("/")[:-1]:
        prefix = f"{prefix}/{segment}" if prefix else segment
        if f"{prefix}/MEMORY.md" not in paths:
            return f"{prefix}/MEMORY.md"
    return None


def read_only_errors(
    index: Mapping[str, Entry], accepted: Mapping[str, Entry], patterns: Sequence[str]
) -> list[str]:
    """One line for each path a pattern covers that differs between ``accepted`` and ``index``."""
    if not patterns:
        return []
    compiled = [compile_glob(p) for p in dict.fromkeys(patterns)]
    errors: list[str] = []
    for path in [*accepted, *(p for p in index if p not in accepted)]:
        if not any(c.fullmatch(path) for c in compiled):
            continue
        if accepted.get(path) != index.get(path):
            errors.append(f"{path}: read-only file cannot be created, changed or removed")
    return errors


def tree_constraint_errors(
    index: Mapping[str, Entry],
    read: Callable[[str], bytes],
    config: ConstraintsConfig,
    layout: LayoutPolicy,
    *,
    require_root_marker: bool,
    accepted: Mapping[str, Entry],
) -> list[str]:
    """The tree check of MEMFS-4.6 over ``index`` (in index order), errors in the reference's order.

    ``read(path)`` gives a staged blob; ``accepted`` is the tree before this change (``HEAD``, or empty
    when unborn, MEMFS-R4.5). Entries compare by mode and object id, which is comparing mode and bytes.
    """
    markdown = [p for p in index if p.endswith(".md")]
    paths = set(markdown)
    v2 = layout == ROOT_MARKER and (require_root_marker or "MEMORY.md" in paths)
    errors: list[str] = []
    if v2 and "MEMORY.md" not in paths:
        errors.append("MEMORY.md: root memory index is required for MemFS v2")
    memory_files = [p for p in markdown if _is_memory_file(p, v2, layout)]
    if v2:
        for path in memory_files:
            missing = _missing_index(path, paths)
            if missing:
                errors.append(f"{path}: missing required index {missing}")
    if config.read_only_files:
        errors.extend(read_only_errors(index, accepted, config.read_only_files))
    core = 0
    count_core = layout == ROOT_MARKER and config.max_core_memory_characters is not None
    for path in memory_files:
        if not index[path].is_regular:
            errors.append(f"{path}: memory Markdown must be a regular file")
            continue
        content = read(path).decode("utf-8", "replace")
        if config.formatting is not None:
            errors.extend(_formatting_errors(path, content, config.formatting))
        depth = path.count("/")
        if config.max_depth is not None and depth > config.max_depth:
            errors.append(f"{path}: depth {depth} exceeds maxDepth {config.max_depth}")
        limit, source = config.max_file_characters, "maxFileCharacters"
        for override in config.file_character_limits:
            if compile_glob(override.pattern).fullmatch(path):
                limit, source = override.max_characters, f"glob '{override.pattern}'"
                break
        characters = len(content)
        if count_core and "/" not in path:
            core += characters
        if limit is not None and characters > limit:
            errors.append(f"{path}: {characters} characters exceeds {limit} from {source}")
    if count_core and config.max_core_memory_characters is not None and core > config.max_core_memory_characters:
        errors.append(
            f"core memory: {core} characters exceeds {config.max_core_memory_characters} "
            "from maxCoreMemoryCharacters"
        )
    return errors
