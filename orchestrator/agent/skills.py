"""The ``<available_skills>`` block (TURN-6): discovered from the committed HEAD (S29),
rendered exactly as the reference renders it, appended to the prompt on every request.

Ordering uses reverie's one documented collation (ICU ``en-US``, M4/S11) for roots,
directories and files alike; for lowercase ASCII names it equals the reference's order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.memfs.collation import sorted_by_collation
from orchestrator.memfs.frontmatter import js_trim, parse_frontmatter
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.markup import neutralise

__all__ = ["Skill", "append_available_skills", "discover_skills", "render_available_skills"]


@dataclass(frozen=True)
class Skill:
    """A skill found under ``skills/`` of the memory repository, as the available-skills block lists it."""

    name: str
    description: str = ""
    location: str = ""


def discover_skills(memory_dir: Path, revision: str | None = None) -> list[Skill]:
    """``skills/<dir>/SKILL.md`` at the committed revision; the name is the frontmatter ``name``
    when it is a non-empty string, else the folder name. Blocking: call from a worker thread."""
    with GitRepo(memory_dir).open() as reader:
        if reader is None:
            return []
        resolved = reader.revision(revision or "HEAD")
        if resolved is None:
            return []
        found = reader.lookup(resolved.tree, "skills")
        if found is None or found[1] != "tree":
            return []
        skills: list[Skill] = []
        for entry in reader.tree_entries(found[0], "skills"):
            if not entry.is_tree:
                continue
            hit = reader.lookup(entry.oid, "SKILL.md")
            if hit is None or hit[1] != "blob":
                continue
            data = reader.read_blob(hit[0])
            if data is None:
                continue
            fields = parse_frontmatter(data.decode("utf-8", "replace")).fields
            name = fields.get("name")
            description = fields.get("description")
            skills.append(
                Skill(
                    name=js_trim(name) if isinstance(name, str) and js_trim(name) else entry.name,
                    description=description if isinstance(description, str) else "",
                    location=f"{memory_dir}/{entry.path}/SKILL.md",
                )
            )
        return skills


def render_available_skills(skills: Sequence[Skill]) -> str:
    """The block of TURN-6.1, or ``""`` when there are no skills."""
    seen: set[str] = set()
    roots: dict[str, list[tuple[str, str]]] = {}
    for skill in skills:
        if not skill.name or skill.name in seen:
            continue
        seen.add(skill.name)
        description = neutralise(js_trim(skill.description).split("\n", 1)[0])
        location = js_trim(skill.location) or "${MEMORY_DIR}/skills/" + skill.name + "/SKILL.md"
        root, relative = _split_location(location.replace("\\", "/"), skill.name)
        roots.setdefault(root, []).append((relative, description))
    if not roots:
        return ""
    lines = ["<available_skills>"]
    for i, root in enumerate(sorted_by_collation(roots, key=str)):
        if i:
            lines.append("")
        lines.append(root)
        lines.extend(_render_tree(roots[root]))
    lines.append("</available_skills>")
    return "\n".join(lines)


def append_available_skills(prompt: str, skills: Sequence[Skill]) -> str:
    """Trailing whitespace of the prompt removed, ``\\n\\n``, the block; unchanged without skills."""
    block = render_available_skills(skills)
    if not block:
        return prompt
    return prompt.rstrip() + "\n\n" + block.lstrip()


def _split_location(location: str, name: str) -> tuple[str, str]:
    parent, _, file_name = location.rpartition("/")
    if location.endswith("/SKILL.md"):
        grand, _, dir_name = parent.rpartition("/")
        if dir_name == name.rpartition("/")[2]:
            return grand, f"{dir_name}/SKILL.md"
    return parent, file_name


@dataclass
class _Node:
    """A folder of the rendered skills tree."""

    dirs: dict[str, _Node]
    files: list[tuple[str, str]]


def _render_tree(entries: list[tuple[str, str]]) -> list[str]:
    root = _Node({}, [])
    for relative, description in sorted_by_collation(entries, key=lambda e: e[0]):
        segments = [s for s in relative.split("/") if s]
        if not segments:
            continue
        node = root
        for segment in segments[:-1]:
            node = node.dirs.setdefault(segment, _Node({}, []))
        node.files.append((segments[-1], description))
    lines: list[str] = []
    _render_node(root, "", lines)
    return lines


def _render_node(node: _Node, prefix: str, lines: list[str]) -> None:
    children: list[tuple[str, _Node | str]] = [
        (name, node.dirs[name]) for name in sorted_by_collation(node.dirs, key=str)
    ]
    children += [(name, desc) for name, desc in sorted_by_collation(node.files, key=lambda f: f[0])]
    for i, (name, child) in enumerate(children):
        last = i == len(children) - 1
        connector = "└── " if last else "├── "
        if isinstance(child, _Node):
            lines.append(f"{prefix}{connector}{name}/")
            _render_node(child, prefix + ("    " if last else "│   "), lines)
        else:
            lines.append(f"{prefix}{connector}{name}" + (f" ({child})" if child else ""))
