"""Per-file frontmatter rules of the hook (MEMFS-4.5)."""

from __future__ import annotations

import pytest

from orchestrator.memfs.rules import legacy_frontmatter_errors, legacy_value, v2_frontmatter_errors

ALLOWED = "(allowed: name description)"


@pytest.mark.parametrize(
    ("content", "errors"),
    [
        ("---\nname: a\ndescription: b\n---\nbody\n", []),
        ("---\n  name: a\ndescription: b\n---\n", []),
        ("", ["x.md: missing frontmatter (must start with ---)"]),
        ("\ufeff---\nname: a\ndescription: b\n---\n", ["x.md: missing frontmatter (must start with ---)"]),
        ("---\r\nname: a\r\ndescription: b\r\n---\r\n", ["x.md: missing frontmatter (must start with ---)"]),
        ("--- \nname: a\n---\n", ["x.md: missing frontmatter (must start with ---)"]),
        ("---\nname: a\ndescription: b\n--- \n", ["x.md: frontmatter opened but never closed (missing closing ---)"]),
        ("---\n---\nbody", ["x.md: missing required field 'name'", "x.md: missing required field 'description'"]),
        (
            "---\nname: a\ndescription: |\n  text\n---\n",
            [f"x.md: unknown frontmatter key 'text' {ALLOWED}"],
        ),
        (
            "---\n\tname: a\ndescription: b\n---\n",
            [f"x.md: unknown frontmatter key '\tname' {ALLOWED}", "x.md: missing required field 'name'"],
        ),
        ("---\nname\ndescription: b\n---\n", []),
        ("---\nname: a\ndescription: ''\n---\n", ["x.md: 'description' must not be empty"]),
        ("---\nname: \"\"\ndescription:   \n---\n", ["x.md: 'name' must not be empty", "x.md: 'description' must not be empty"]),
        ("---\nname: a\ndescription: \"x\"\n---\n", []),
        (
            "---\nname: a\nname: b\ndescription: c\n---\n",
            ["x.md: duplicate frontmatter key 'name'"],
        ),
        (
            "---\nName: a\ndescription: c\nread_only: true\n---\n",
            [
                f"x.md: unknown frontmatter key 'Name' {ALLOWED}",
                f"x.md: unknown frontmatter key 'read_only' {ALLOWED}",
                "x.md: missing required field 'name'",
            ],
        ),
        ("---\n   \nname: a\ndescription: b\n---\n", [f"x.md: unknown frontmatter key '' {ALLOWED}"]),
    ],
)
def test_v2_rules(content: str, errors: list[str]) -> None:
    assert v2_frontmatter_errors("x.md", content) == errors


@pytest.mark.parametrize("path", ["MEMORY.md", "projects/MEMORY.md"])
def test_indexes_only_refuse_frontmatter(path: str) -> None:
    assert v2_frontmatter_errors(path, "# Memory\n") == []
    assert v2_frontmatter_errors(path, "") == []
    assert v2_frontmatter_errors(path, "---\nname: a\n---\n") == [f"{path}: MEMORY.md must not have frontmatter"]


def test_skill_named_file_outside_skills_is_memory() -> None:
    assert v2_frontmatter_errors("notes/SKILL.md", "body") == ["notes/SKILL.md: missing frontmatter (must start with ---)"]


LEGACY_ALLOWED = "(allowed: description read_only limit)"


def test_legacy_accepts_description_limit_and_continuations() -> None:
    text = "---\ndescription: d\nlimit: 5000\n  continued line\n\tmore\n---\nbody\n"
    assert legacy_frontmatter_errors("system/a.md", text, None) == []


def test_legacy_keys_lose_all_spaces() -> None:
    text = "---\ndesc ription: d\nfoo bar: x\n---\n"
    assert legacy_frontmatter_errors("system/a.md", text, None) == [
        f"system/a.md: unknown frontmatter key 'foobar' {LEGACY_ALLOWED}",
    ]


def test_legacy_missing_and_empty_description() -> None:
    assert legacy_frontmatter_errors("system/a.md", "---\nlimit: 1\n---\n", None) == [
        "system/a.md: missing required field 'description'"
    ]
    assert legacy_frontmatter_errors("system/a.md", "---\ndescription:\n---\n", None) == [
        "system/a.md: 'description' must not be empty"
    ]
    assert legacy_frontmatter_errors("system/a.md", "---\ndescription: \"\"\n---\n", None) == []


def test_legacy_read_only_protection() -> None:
    locked = "---\ndescription: d\nread_only: true\n---\nold\n"
    unlocked = "---\ndescription: d\nread_only: false\n---\nold\n"
    plain = "---\ndescription: d\n---\nold\n"
    path = "system/h.md"
    assert legacy_frontmatter_errors(path, plain, locked) == [f"{path}: file is read_only and cannot be modified"]
    assert legacy_frontmatter_errors(path, unlocked, None) == [
        f"{path}: 'read_only' is a protected field and cannot be set by the agent"
    ]
    assert legacy_frontmatter_errors(path, locked, unlocked) == [
        f"{path}: 'read_only' is a protected field and cannot be changed by the agent"
    ]
    assert legacy_frontmatter_errors(path, unlocked + "more", unlocked) == []
    assert legacy_frontmatter_errors(path, plain, unlocked) == [
        f"{path}: 'read_only' is a protected field and cannot be removed by the agent"
    ]
    assert legacy_frontmatter_errors(path, unlocked, "\n\n") == [
        f"{path}: 'read_only' is a protected field and cannot be set by the agent"
    ]
    assert legacy_frontmatter_errors(path, unlocked, None, protect=False) == []


def test_legacy_structure_checked_before_protection() -> None:
    locked = "---\ndescription: d\nread_only: true\n---\n"
    assert legacy_frontmatter_errors("system/h.md", "plain", locked) == [
        "system/h.md: missing frontmatter (must start with ---)"
    ]


def test_legacy_value() -> None:
    text = "---\nread_only: true\n  read_only: no\nread_only:  x \n---\nread_only: body\n"
    assert legacy_value(text, "read_only") == "true\nx"
    assert legacy_value("---\nread_only: true\n", "read_only") == ""
