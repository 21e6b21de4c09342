"""``.memfs.config.json`` parsing and the tree check (MEMFS-4.6 to MEMFS-4.7)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from orchestrator.memfs.constraints import (
    DEFAULT_CONFIG,
    DEFAULT_CONFIG_JSON,
    ConfigError,
    ConstraintsConfig,
    Formatting,
    change_approved,
    parse_config,
    tree_constraint_errors,
)
from orchestrator.memfs.policy import LayoutPolicy
from orchestrator.memfs.snapshot import Symlink, build_snapshot

P = ".memfs.config.json: "


def _errors(text: str) -> list[str]:
    parsed = parse_config(text)
    assert isinstance(parsed, ConfigError)
    return list(parsed.errors)


def test_defaults_serialise_like_the_reference() -> None:
    assert json.loads(DEFAULT_CONFIG_JSON) == {
        "version": 1,
        "maxDepth": 2,
        "maxFileCharacters": 20000,
        "maxCoreMemoryCharacters": 65536,
    }
    assert json.dumps(json.loads(DEFAULT_CONFIG_JSON), indent=2) + "\n" == DEFAULT_CONFIG_JSON


def test_invalid_json_and_non_objects() -> None:
    assert _errors("{")[0].startswith(P + "invalid JSON (")
    assert _errors('{"version": NaN}')[0].startswith(P + "invalid JSON (")
    assert _errors('{"version": Infinity}')[0].startswith(P + "invalid JSON (")
    for text in ("[]", '"x"', "null", "1"):
        assert _errors(text) == [P + "expected a JSON object"]


def test_errors_in_reference_order() -> None:
    text = json.dumps(
        {
            "zeta": 1,
            "2": 0,
            "version": 2,
            "maxDepth": None,
            "maxFileCharacters": True,
            "maxCoreMemoryCharacters": 5.5,
            "readOnlyFiles": ["ok.*", "/abs"],
            "formatting": {"lineEndings": "crlf", "finalNewline": 1, "other": True},
            "fileCharacterLimits": [3, {"pattern": "a/**.md", "extra": 1}, {"pattern": "x", "maxCharacters": 0}],
        }
    )
    assert _errors(text) == [
        P + "unknown field '2'",
        P + "unknown field 'zeta'",
        P + "version must be 1",
        P + "maxDepth must be a non-negative integer",
        P + "maxFileCharacters must be a positive integer",
        P + "maxCoreMemoryCharacters must be a positive integer",
        P + "readOnlyFiles[1]: pattern must be a non-empty repo-relative glob using '/'",
        P + "formatting.lineEndings must be 'lf'",
        P + "formatting.finalNewline must be a boolean",
        P + "formatting: unknown field 'other'",
        P + "fileCharacterLimits[0] must be an object",
        P + "fileCharacterLimits[1]: unknown field 'extra'",
        P + "fileCharacterLimits[1]: '**' must be a complete path segment",
        P + "fileCharacterLimits[1]: maxCharacters must be a positive integer or null",
        P + "fileCharacterLimits[2]: maxCharacters must be a positive integer or null",
    ]


def test_wrong_container_types() -> None:
    text = '{"version": 1, "readOnlyFiles": "x", "formatting": null, "fileCharacterLimits": {}}'
    assert _errors(text) == [
        P + "readOnlyFiles must be an array",
        P + "formatting must be an object",
        P + "fileCharacterLimits must be an array",
    ]


def test_numbers_follow_javascript() -> None:
    parsed = parse_config('{"version": 1.0, "maxDepth": 0, "maxFileCharacters": 1e3, "maxCoreMemoryCharacters": 5.0}')
    assert not isinstance(parsed, ConfigError)
    config, present = parsed
    assert (config.max_depth, config.max_file_characters, config.max_core_memory_characters) == (0, 1000, 5)
    assert present == {"version", "maxDepth", "maxFileCharacters", "maxCoreMemoryCharacters"}
    assert _errors('{"version": true}') == [P + "version must be 1"]
    assert _errors('{"version": 1, "maxFileCharacters": 9007199254740992}') == [
        P + "maxFileCharacters must be a positive integer"
    ]
    assert _errors('{"version": 1, "maxDepth": -1}') == [P + "maxDepth must be a non-negative integer"]


def test_overlay_fills_missing_keys_from_defaults() -> None:
    parsed = parse_config('{"version": 1, "maxDepth": 5}')
    assert not isinstance(parsed, ConfigError)
    config, present = parsed
    merged = config.overlay_on(DEFAULT_CONFIG, present)
    assert (merged.max_depth, merged.max_file_characters, merged.max_core_memory_characters) == (5, 20000, 65536)


def test_approval_variables() -> None:
    assert change_approved({"REVERIE_MEMORY_CONSTRAINTS_UPDATE": "1"})
    assert change_approved({"LETTA_MEMORY_CONSTRAINTS_UPDATE": "1"})
    assert not change_approved({"REVERIE_MEMORY_CONSTRAINTS_UPDATE": "true"})
    assert not change_approved({})


def _check(
    files: Mapping[str, str | bytes | Symlink],
    config: ConstraintsConfig,
    head: Mapping[str, str | bytes | Symlink] | None = None,
    *,
    layout: LayoutPolicy = "root-marker",
    require: bool = False,
) -> list[str]:
    snap = build_snapshot(files, head)

    def read(path: str) -> bytes:
        return snap.blobs[snap.index[path].oid]

    return tree_constraint_errors(
        snap.index, read, config, layout, require_root_marker=require, accepted=snap.head or {}
    )


def v2(body: str, name: str = "Notes") -> str:
    return f"---\nname: {name}\ndescription: Test memory\n---\n{body}"


def test_missing_indexes_and_root_marker() -> None:
    files: dict[str, str | bytes | Symlink] = {
        "a/b/MEMORY.md": "# B\n",
        "notes/b.md": v2("x"),
        "skills/x/SKILL.md": "anything",
        "picture.png": b"\x89PNG",
    }
    assert _check(files, DEFAULT_CONFIG, require=True) == [
        "MEMORY.md: root memory index is required for MemFS v2",
        "a/b/MEMORY.md: missing required index a/MEMORY.md",
        "notes/b.md: missing required index notes/MEMORY.md",
    ]
    assert _check(files, DEFAULT_CONFIG, require=False) == []


def test_depth_size_and_core_budget() -> None:
    files: dict[str, str | bytes | Symlink] = {
        "MEMORY.md": "# Memory\n",
        "reference/MEMORY.md": "# Reference\n",
        "reference/deep/MEMORY.md": "# Deep\n",
        "reference/deep/notes.md": v2("Nested.\n"),
    }
    assert _check(files, ConstraintsConfig(max_depth=1)) == [
        "reference/deep/MEMORY.md: depth 2 exceeds maxDepth 1",
        "reference/deep/notes.md: depth 2 exceeds maxDepth 1",
    ]
    core = {"MEMORY.md": "# Memory\n", **{f"core-{i}.md": v2("c" * 16000, f"Core {i}") for i in range(5)}}
    assert _check(core, DEFAULT_CONFIG) == ["core memory: 80239 characters exceeds 65536 from maxCoreMemoryCharacters"]
    emoji = {"MEMORY.md": "# Memory\n", "big.md": v2("🦉" * 19955)}
    assert len(emoji["big.md"]) == 20000
    assert _check(emoji, DEFAULT_CONFIG) == []
    assert _check({**emoji, "big.md": emoji["big.md"] + "\r"}, DEFAULT_CONFIG) == [
        "big.md: 20001 characters exceeds 20000 from maxFileCharacters"
    ]


def test_symlinks_are_not_counted() -> None:
    files: dict[str, str | bytes | Symlink] = {"MEMORY.md": Symlink("huge.txt"), "a.md": Symlink("MEMORY.md")}
    assert _check(files, ConstraintsConfig(max_file_characters=1)) == [
        "MEMORY.md: memory Markdown must be a regular file",
        "a.md: memory Markdown must be a regular file",
    ]


def test_first_matching_glob_wins() -> None:
    config = parse_config(
        json.dumps(
            {
                "version": 1,
                "maxFileCharacters": 80,
                "fileCharacterLimits": [
                    {"pattern": "reference/**/*.md", "maxCharacters": 220},
                    {"pattern": "reference/private/**", "maxCharacters": 60},
                ],
            }
        )
    )
    assert not isinstance(config, ConfigError)
    files: dict[str, str | bytes | Symlink] = {
        "MEMORY.md": "# Memory\n",
        "reference/MEMORY.md": "# R\n",
        "reference/private/MEMORY.md": "# P\n",
        "reference/private/notes.md": v2("r" * 100),
        "persona.md": v2("p" * 100),
        "skills/demo/SKILL.md": "s" * 500,
    }
    assert _check(files, config[0].overlay_on(DEFAULT_CONFIG, config[1])) == [
        "persona.md: 145 characters exceeds 80 from maxFileCharacters"
    ]


def test_legacy_and_shared_layouts() -> None:
    files: dict[str, str | bytes | Symlink] = {
        "notes.md": v2("n" * 100),
        "system/persona.md": "x" * 100,
        "memory/reference/a.md": "y" * 100,
        "skills/s.md": "z" * 100,
    }
    small = ConstraintsConfig(max_file_characters=70)
    assert _check(files, small, layout="legacy-only") == [
        "memory/reference/a.md: 100 characters exceeds 70 from maxFileCharacters",
        "system/persona.md: 100 characters exceeds 70 from maxFileCharacters",
    ]
    assert _check(files, small, layout="shared-memory") == [
        "memory/reference/a.md: 100 characters exceeds 70 from maxFileCharacters",
        "notes.md: 145 characters exceeds 70 from maxFileCharacters",
        "system/persona.md: 100 characters exceeds 70 from maxFileCharacters",
    ]


def test_read_only_files() -> None:
    config = ConstraintsConfig(read_only_files=("locked.*",))
    head: dict[str, str | bytes | Symlink] = {"locked.txt": "secret\n", "MEMORY.md": "# M\n"}
    assert _check(dict(head), config, head) == []
    assert _check({**head, "locked.txt": "changed\n"}, config, head) == [
        "locked.txt: read-only file cannot be created, changed or removed"
    ]
    assert _check({"MEMORY.md": "# M\n", "moved.txt": "secret\n"}, config, head) == [
        "locked.txt: read-only file cannot be created, changed or removed"
    ]
    assert _check({**head, "locked.new": "x"}, config, head) == [
        "locked.new: read-only file cannot be created, changed or removed"
    ]
    assert _check(dict(head), config, None) == ["locked.txt: read-only file cannot be created, changed or removed"]
    snap = build_snapshot(dict(head), head, executable=frozenset({"locked.txt"}))
    base = build_snapshot(dict(head))
    assert tree_constraint_errors(
        snap.index, lambda p: snap.blobs[snap.index[p].oid], config, "root-marker",
        require_root_marker=True, accepted=base.index,
    ) == ["locked.txt: read-only file cannot be created, changed or removed"]


def test_formatting_checks() -> None:
    config = ConstraintsConfig(formatting=Formatting(line_endings="lf", final_newline=True, trailing_whitespace=True))
    body = (
        "---\nname: a\ndescription: b\n---\n"
        "hard break  \n"  # allowed
        "trailing \n"  # 6
        "```py\ncode   \n```\n"
        "    indented   \n"
        "> quoted \n"  # 11
        "~~~\n~~~ not a close   \n~~~\n"
        "   \n"  # 15
        "end"
    )
    assert _check({"MEMORY.md": "# M\n", "a.md": body}, config) == [
        "a.md: formatting requires a final newline",
        "a.md:6: formatting disallows trailing whitespace",
        "a.md:11: formatting disallows trailing whitespace",
        "a.md:15: formatting disallows trailing whitespace",
    ]


def test_formatting_line_endings_and_final_newline() -> None:
    config = ConstraintsConfig(formatting=Formatting(line_endings="lf", final_newline=True))
    assert _check({"MEMORY.md": "# M\r\n", "a.md": ""}, config) == [
        "MEMORY.md: formatting requires LF line endings"
    ]
    assert _check({"MEMORY.md": "# M"}, config) == ["MEMORY.md: formatting requires a final newline"]
