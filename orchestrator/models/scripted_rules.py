"""The rules the scripted model follows and the bash commands with which it saves them.

A rule is followed only while its text is in the request (S27): ``answer_rules`` reads the list
lines of the rule sources, and a user's "remember: ..." becomes a ``- <rule>`` line appended to
``persona.md`` or ``human.md`` by a command the agent runs through its bash tool, as a real model
would (``remember_command`` for chat, ``reflection_command`` for a reflection's batch).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .scripted_request import rule_sources
from .types import ModelRequest

__all__ = [
    "answer_rules",
    "apply_rules",
    "memory_lines",
    "reflection_command",
    "remember_command",
    "stated_rule",
]


_BULLET = re.compile(r"^\s*[-*]\s+(.+?)\s*$")


_NOUNS = r"(?:answers?|repl(?:y|ies)|responses?|messages?)"


_RULE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "suffix",
        re.compile(rf"^(?:always\s+)?end\s+(?:(?:all|every|each|your)\s+)*{_NOUNS}\s+with\s+(.+)$", re.I),
    ),
    (
        "prefix",
        re.compile(
            rf"^(?:always\s+)?(?:start|begin)\s+(?:(?:all|every|each|your)\s+)*{_NOUNS}\s+with\s+(.+)$", re.I
        ),
    ),
    ("suffix", re.compile(r"^回答末尾(?:总是|都|一律)?(?:加上|带上|加)\s*(.+)$")),
    ("prefix", re.compile(r"^回答开头(?:总是|都|一律)?(?:加上|带上|加)\s*(.+)$")),
)


_REMEMBER = (
    re.compile(r"^(?:please\s+)?remember\s*(?:[:：,]|\s+that\b)\s*(.+)$", re.I | re.S),
    re.compile(r"^from\s+now\s+on\s*[,:：]?\s*(.+)$", re.I | re.S),
    re.compile(r"^(?:设定|记住)\s*[:：]\s*(.+)$", re.S),
)


_PERSONA_WORDS = re.compile(
    r"\b(?:answers?|repl(?:y|ies)|respon(?:d|ses?)|you|your|yourself)\b|回答|回复|你", re.I
)


def _clean_value(value: str) -> str:
    value = value.strip()
    pairs = {'"': '"', "'": "'", "`": "`", "“": "”", "「": "」", "‘": "’"}
    if len(value) >= 2 and value[0] in pairs and value[-1] == pairs[value[0]]:
        return value[1:-1].strip()
    if len(value) > 1 and value[-1] in ".。":
        value = value[:-1].rstrip()
        if len(value) >= 2 and value[0] in pairs and value[-1] == pairs[value[0]]:
            value = value[1:-1].strip()
    return value


def memory_lines(request: ModelRequest) -> list[str]:
    """Every list line of the rule sources (what memory already holds)."""
    lines: list[str] = []
    for source in rule_sources(request):
        for line in source.splitlines():
            match = _BULLET.match(line)
            if match:
                lines.append(match.group(1))
    return lines


def answer_rules(texts: Iterable[str]) -> list[tuple[str, str]]:
    """``(kind, value)`` for every answer rule found as a list line in ``texts``, first-seen order."""
    rules: list[tuple[str, str]] = []
    for text in texts:
        for line in text.splitlines():
            bullet = _BULLET.match(line)
            if not bullet:
                continue
            for kind, pattern in _RULE_PATTERNS:
                match = pattern.match(bullet.group(1))
                if match:
                    rule = (kind, _clean_value(match.group(1)))
                    if rule[1] and rule not in rules:
                        rules.append(rule)
                    break
    return rules


def apply_rules(answer: str, rules: list[tuple[str, str]]) -> str:
    """``answer`` with each ``(kind, value)`` rule applied, as a prefix or a suffix."""
    for kind, value in rules:
        answer = f"{value} {answer}" if kind == "prefix" else f"{answer} {value}"
    return answer


def stated_rule(text: str) -> str | None:
    """The rule in a "remember: ..." or "from now on ..." message, or None."""
    for pattern in _REMEMBER:
        match = pattern.match(text.strip())
        if match:
            rule = " ".join(match.group(1).split())
            if len(rule) > 1 and rule[-1] in ".。" and not rule[-2].isspace():
                rule = rule[:-1]
            return rule or None
    return None


def _quote(text: str) -> str:
    """A single-quoted shell word for ``text`` (newlines folded to spaces)."""
    return "'" + " ".join(text.split()).replace("'", "'\\''") + "'"


def _target(rule: str, layout_v1: bool) -> tuple[str, str]:
    name = (
        "persona" if _PERSONA_WORDS.search(rule) or any(p.match(rule) for _, p in _RULE_PATTERNS) else "human"
    )
    return name, (f"system/{name}.md" if layout_v1 else f"{name}.md")


_DESCRIPTIONS = {"persona": "Who I am and how I behave.", "human": "What I know about the user."}


def _append_script(name: str, path: str, rules: list[str]) -> str:
    header = " ".join(
        _quote(line) for line in ("---", f"name: {name}", f"description: {_DESCRIPTIONS[name]}", "---")
    )
    parent = path.rsplit("/", 1)[0] if "/" in path else ""
    steps = [f"mkdir -p {parent}"] if parent else []
    steps += [
        f"{{ test -s {path} || printf '%s\\n' {header} > {path}; }}",
        f'{{ test -z "$(tail -c 1 {path})" || echo >> {path}; }}',
        f"printf '%s\\n' {' '.join(_quote('- ' + rule) for rule in rules)} >> {path}",
    ]
    return " && ".join(steps)


def remember_command(rule: str, *, layout_v1: bool = False) -> str:
    """The bash command that appends ``- <rule>`` to the right memory file and commits it.

    Another process of the same agent may have committed the line already (its commit of the file
    took ours along): then there is nothing left to commit and the command still succeeds.
    """
    name, path = _target(rule, layout_v1)
    return (
        f'cd "$MEMORY_DIR" && {_append_script(name, path, [rule])} && git add -- {path} && '
        f"{{ git commit -q -m 'feat: update {name}' -- {path} || "
        f"git show HEAD:{path} | grep -qxF -- {_quote('- ' + rule)}; }} && "
        "git log --oneline -1"
    )


def reflection_command(rules: list[str], layout_v1: bool) -> str:
    """The bash command that appends a reflection's ``rules`` to their memory files and commits them once."""
    groups: dict[str, tuple[str, list[str]]] = {}
    for rule in rules:
        name, path = _target(rule, layout_v1)
        groups.setdefault(name, (path, []))[1].append(rule)
    paths = " ".join(path for path, _ in groups.values())
    appends = " && ".join(_append_script(name, path, items) for name, (path, items) in groups.items())
    subject = _quote(f"feat(reflection): remember {len(rules)} item(s) 🔮")
    return (
        f'cd "$MEMORY_DIR" && {appends} && git add -- {paths} && git commit -q -m {subject} -- {paths} && '
        "git log --oneline -1"
    )
