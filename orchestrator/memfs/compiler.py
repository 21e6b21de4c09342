"""Compile committed memory into the system prompt (MEMFS-3, M1-M6, S14).

Only the committed tree of ``HEAD`` (or an explicit revision) is read, through the git seam's pooled
libgit2 handle (``GitRepo.open``, ``memfs.git``) and its caches; the working tree and the index never matter. For v2 only what the prompt shows is read:
the root tree, the root files' blobs and, per root directory, whether it holds a ``MEMORY.md``.
Deferred files are never listed, walked or read, so their number does not affect compile time.
This is exact because a v2 prompt depends only on root files and first-level child indexes
(MEMFS-3.3): a first-level index is its own witness under the index-chain rule.

Descriptions and names are rendered verbatim as the reference renders them, except that a
structural tag in them (``markup.STRUCTURAL_TAGS`` or the file's own label) is neutralised: memory
that reached ``HEAD`` without the hook cannot open or close a block of the prompt. A block's own
tags are the label as written (``memory.md`` opens ``<memory>``, byte for byte the reference's):
the hook refuses such names for new files, and a committed one keeps compiling as it always did.

The compiler is synchronous and best-effort: a git failure degrades to "no files" (or "skip this
file"), never an exception. Async callers run it in a worker thread.
"""

from __future__ import annotations

import hashlib
import html
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

from orchestrator.memfs.collation import sorted_by_collation
from orchestrator.memfs.errors import GitError
from orchestrator.memfs.frontmatter import js_trim, js_trim_end, parse_frontmatter
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.gittrees import Revision, display_path
from orchestrator.memfs.layout import (
    MEMFS_V1,
    MEMFS_V2,
    ROOT_INDEX,
    SKILLS_DIR,
    MemoryFormat,
    child_index_directory,
    is_markdown_path,
    label_from_path,
)
from orchestrator.memfs.localrepo import LocalRepo
from orchestrator.memfs.markup import label_tags, neutralise

__all__ = [
    "CORE_MEMORY_PLACEHOLDER",
    "DEFAULT_CONVERSATION_ID",
    "CompiledPrompt",
    "MemoryRecord",
    "clear_render_cache",
    "compile_system_prompt",
    "escape_xml_attribute",
    "format_compiled_at",
    "inject_core_memory",
    "render_metadata",
    "render_v1",
    "render_v2",
]

CORE_MEMORY_PLACEHOLDER: Final = "{CORE_MEMORY}"
DEFAULT_CONVERSATION_ID: Final = "default"
_V1_REMINDER: Final = "Reminder: <projection> contains the local path of the memory file projection."


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """One collected Markdown file: ``value`` is the parsed body, ``description`` JS-trimmed."""

    path: str
    label: str
    value: str = ""
    description: str = ""


@dataclass(frozen=True, slots=True)
class CompiledPrompt:
    """The compiled system prompt; ``memfs_revision`` is None when there was no revision."""

    content: str
    core_memory: str
    compiled_at: str
    raw_system_hash: str
    memfs_revision: str | None
    memory_format: MemoryFormat


@dataclass(slots=True)
class _Node:
    """A folder of the compiled memory tree."""

    children: dict[str, _Node] = field(default_factory=dict)
    record: MemoryRecord | None = None


def escape_xml_attribute(text: str) -> str:
    """MEMFS-3.5: ``&``, ``"``, ``'``, ``<``, ``>`` and nothing else."""
    return html.escape(text, quote=True)


def format_compiled_at(now: datetime) -> str:
    """JavaScript ``toISOString``: UTC, milliseconds truncated. A naive ``now`` is taken as UTC."""
    moment = now.replace(tzinfo=UTC) if now.tzinfo is None else now.astimezone(UTC)
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T"
        f"{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}.{moment.microsecond // 1000:03d}Z"
    )


def render_metadata(agent_id: str, conversation_id: str, now: datetime, previous_message_count: int) -> str:
    """The v1 ``<memory_metadata>`` block, second resolution (MEMFS-3.6, MEMFS-R3.7)."""
    moment = now.replace(tzinfo=UTC) if now.tzinfo is None else now.astimezone(UTC)
    hour = moment.hour % 12 or 12
    meridiem = "AM" if moment.hour < 12 else "PM"
    stamp = (
        f"{moment.year}-{moment.month:02d}-{moment.day:02d} "
        f"{hour:02d}:{moment.minute:02d}:{moment.second:02d} {meridiem} UTC+0000"
    )
    return "\n".join(
        [
            "<memory_metadata>",
            f"- AGENT_ID: {agent_id}",
            f"- CONVERSATION_ID: {conversation_id}",
            f"- System prompt last recompiled: {stamp}",
            f"- {previous_message_count} previous messages between you and the user are stored in recall memory",
            "</memory_metadata>",
        ]
    )


def inject_core_memory(raw_system: str, core_memory: str) -> str:
    """MEMFS-3.7 steps 1-2, then literal substitution of every placeholder (MEMFS-R3.4, M3)."""
    template = raw_system if CORE_MEMORY_PLACEHOLDER in raw_system else js_trim_end(raw_system) + "\n\n" + CORE_MEMORY_PLACEHOLDER
    return template.replace(CORE_MEMORY_PLACEHOLDER, core_memory)


def _open_tag(label: str) -> str:
    """The tag a block opens with: ``<label>`` as the reference renders any label, a structural word
    included (a committed ``memory.md`` is ``<memory>``). Only a structural tag written inside the
    label itself (a name holding ``<``, refused for new files by D10) is neutralised."""
    return f"<{neutralise(label)}>"


def _close_tag(label: str) -> str:
    """The closing tag of ``_open_tag(label)``'s block."""
    return f"</{neutralise(label)}>"


def _sorted_records(records: Sequence[MemoryRecord]) -> list[MemoryRecord]:
    return sorted_by_collation(records, key=lambda record: record.label)


def render_v2(records: Sequence[MemoryRecord]) -> str:
    """MEMFS-3.3: root files by label, then ``<memory>`` with first-level child indexes.

    ``records`` must already be in label order; child indexes are those with path
    ``<dir>/MEMORY.md`` (one ``/``) outside ``skills/`` (callers pass only existing ones).
    """
    blocks: list[str] = []
    root_index: MemoryRecord | None = None
    child_indexes: list[MemoryRecord] = []
    for record in records:
        if "/" not in record.path:
            if record.path == ROOT_INDEX:
                root_index = root_index or record
                continue
            lines = [_open_tag(record.label)]
            description = js_trim(record.description)
            if description:
                lines.append(f"<description>{neutralise(description, label_tags(record.label))}</description>")
            value = js_trim_end(record.value)
            if value:
                lines.append(value)
            lines.append(_close_tag(record.label))
            blocks.append("\n".join(lines))
        elif record.path.count("/") == 1 and record.path.endswith("/" + ROOT_INDEX):
            if not record.path.startswith(SKILLS_DIR + "/") and record.path.split("/")[0]:
                child_indexes.append(record)
    if root_index is not None:
        lines = ["<memory>"]
        value = js_trim_end(root_index.value)
        if value:
            lines.append(value)
        if child_indexes:
            lines.append("<deferred-memory>")
            for index in sorted_by_collation(child_indexes, key=lambda record: record.path):
                directory = escape_xml_attribute(child_index_directory(index.path))
                lines.append(f'<directory path="{directory}/" index="{directory}/MEMORY.md" />')
            lines.append("</deferred-memory>")
        lines.append("</memory>")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _render_system_tree(root: _Node, out: list[str]) -> None:
    """The nested ``system/`` blocks, depth first, with a stack of open folders rather than
    recursion: a label nests at most ``MAX_TREE_DEPTH`` folders (the walk stops there), and no
    rendering should lean on Python's recursion limit to stay below it."""
    stack: list[tuple[_Node, tuple[str, ...], Iterator[str]]] = [
        (root, (), iter(sorted_by_collation(root.children, key=lambda segment: segment)))
    ]
    while stack:
        node, parts, names = stack[-1]
        name = next(names, None)
        if name is None:
            stack.pop()
            if parts:
                out.append("  " * (len(parts) - 1) + _close_tag(parts[-1]))
            continue
        child = node.children[name]
        child_parts = (*parts, name)
        pad = "  " * len(parts)
        out.append(pad + _open_tag(name))
        if child.record is not None:
            projection = neutralise(f"$MEMORY_DIR/system/{'/'.join(child_parts)}.md")
            out.append(f"{pad}  <projection>{projection}</projection>")
            if js_trim(child.record.description):
                description = neutralise(child.record.description, child_parts)
                out.append(f"{pad}  <description>{description}</description>")
            value = js_trim_end(child.record.value)
            if value:
                out.append(f"{pad}  {value}")
        stack.append((child, child_parts, iter(sorted_by_collation(child.children, key=lambda segment: segment))))


def _render_external_tree(root: _Node, out: list[str]) -> None:
    """The ``external_projection`` listing (folders first, then files, each by collation), with a
    stack as ``_render_system_tree``."""
    stack = [(root, "", iter(_external_entries(root)))]
    while stack:
        node, prefix, entries = stack[-1]
        entry = next(entries, None)
        if entry is None:
            stack.pop()
            continue
        name, is_directory, last = entry
        out.append(f"{prefix}{'└── ' if last else '├── '}{neutralise(name)}{'/' if is_directory else ''}")
        if is_directory:
            child = node.children[name]
            stack.append((child, prefix + ("    " if last else "│   "), iter(_external_entries(child))))


def _external_entries(node: _Node) -> list[tuple[str, bool, bool]]:
    """``(name, is a folder, is the last)`` of ``node``'s children in listing order."""
    directories = sorted_by_collation([n for n, c in node.children.items() if c.children], key=lambda n: n)
    files = sorted_by_collation([n for n, c in node.children.items() if not c.children], key=lambda n: n)
    entries = [(name, True) for name in directories] + [(name, False) for name in files]
    return [(name, is_directory, i == len(entries) - 1) for i, (name, is_directory) in enumerate(entries)]


def render_v1(records: Sequence[MemoryRecord]) -> str:
    """MEMFS-3.4 (legacy projection), records in label order.

    Every segment is an ordinary name (no JavaScript object-prototype collisions, M1).
    """
    if not records:
        return ""
    lines = [_V1_REMINDER]
    persona = next((r for r in records if r.label == "system/persona"), None)
    if persona is not None:
        lines += [
            "",
            "<self>",
            "<projection>$MEMORY_DIR/system/persona.md</projection>",
            js_trim_end(persona.value),
            "</self>",
        ]
    system_root = _Node()
    external_root = _Node()
    has_system = has_external = False
    for record in records:
        if record.label.startswith("system/"):
            if record.label == "system/persona":
                continue
            segments = [s for s in record.label[len("system/") :].split("/") if s]
            has_system = True
            if not segments:
                continue
            node = system_root
            for segment in segments:
                node = node.children.setdefault(segment, _Node())
            node.record = record
        elif not record.label.startswith(SKILLS_DIR + "/"):
            has_external = True
            node = external_root
            for segment in (s for s in record.path.split("/") if s):
                node = node.children.setdefault(segment, _Node())
    if has_system or has_external:
        lines += ["", "<memory>"]
        tree: list[str] = []
        _render_system_tree(system_root, tree)
        if tree:
            lines.append("\n".join(tree))
        if has_external:
            lines += ["<external_projection>", "${MEMORY_DIR}/"]
            _render_external_tree(external_root, lines)
            lines.append("</external_projection>")
        lines.append("</memory>")
    return "\n".join(lines)


def _record_from_blob(path: str, data: bytes) -> MemoryRecord:
    parsed = parse_frontmatter(data.decode("utf-8", "replace"))
    description = parsed.fields.get("description")
    return MemoryRecord(
        path=display_path(path),
        label=display_path(label_from_path(path)),
        value=parsed.body,
        description=js_trim(description) if isinstance(description, str) else "",
    )


def _collect_v2(reader: LocalRepo, revision: Revision) -> list[MemoryRecord]:
    records: list[MemoryRecord] = []
    for entry in reader.tree_entries(revision.tree):
        if entry.is_tree:
            if entry.path == SKILLS_DIR:
                continue
            found = reader.lookup(entry.oid, ROOT_INDEX)
            if found is not None and found[1] == "blob":
                index_path = f"{entry.path}/{ROOT_INDEX}"
                records.append(MemoryRecord(path=display_path(index_path), label=display_path(label_from_path(index_path))))
        elif is_markdown_path(entry.path):
            data = reader.read_blob(entry.oid)
            if data is not None:
                records.append(_record_from_blob(entry.path, data))
    return _sorted_records(records)


def _collect_v1(reader: LocalRepo, revision: Revision) -> list[MemoryRecord]:
    records: list[MemoryRecord] = []
    for entry in reader.walk(revision.tree):
        if not is_markdown_path(entry.path):
            continue
        data = reader.read_blob(entry.oid)
        if data is not None:
            records.append(_record_from_blob(entry.path, data))
    return _sorted_records(records)


class _RenderCache:
    """Rendered memory by (repository, root tree id): the rendering is a pure function of the
    tree's content, so a hit is identical to a fresh compile (MEMFS-R3.9). The repository is its
    common git directory, so a linked worktree (compaction reads core memory in one, C9, on most
    turns of a long session) shares the main checkout's entries instead of rendering again."""

    def __init__(self, max_entries: int = 128) -> None:
        self._max_entries = max_entries
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, str], tuple[MemoryFormat, str]] = OrderedDict()

    def get(self, key: tuple[str, str]) -> tuple[MemoryFormat, str] | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def put(self, key: tuple[str, str], value: tuple[MemoryFormat, str]) -> None:
        with self._lock:
            self._entries[key] = value
            while len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


_RENDER_CACHE: Final = _RenderCache()


def clear_render_cache() -> None:
    """Forget rendered trees (benchmarks measure the uncached path with it)."""
    _RENDER_CACHE.clear()


def _render_tree(reader: LocalRepo, resolved: Revision) -> tuple[MemoryFormat, str]:
    root = reader.tree_entries(resolved.tree)
    if any(entry.path == ROOT_INDEX and not entry.is_tree for entry in root):
        return MEMFS_V2, render_v2(_collect_v2(reader, resolved))
    return MEMFS_V1, render_v1(_collect_v1(reader, resolved))


def _collect(
    memory_dir: str | os.PathLike[str], revision: str
) -> tuple[str | None, MemoryFormat, str]:
    """(revision, format, rendered memory); every git failure degrades (MEMFS-3.2)."""
    commit: str | None = None
    try:
        with GitRepo(memory_dir).open() as reader:
            if reader is None:
                return None, MEMFS_V1, ""
            resolved = reader.revision(revision)
            if resolved is None:
                return None, MEMFS_V1, ""
            commit = resolved.commit
            key = (str(reader.common_dir), resolved.tree)  # one object store for a checkout and its worktrees
            rendered = _RENDER_CACHE.get(key)
            if rendered is None:
                rendered = _render_tree(reader, resolved)
                _RENDER_CACHE.put(key, rendered)
            return commit, *rendered
    except (GitError, OSError, ValueError):
        return commit, MEMFS_V1, ""


def _sha256_hex(text: str) -> str:
    """SHA-256 of the UTF-8 bytes; a lone surrogate hashes as U+FFFD, as in JavaScript."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        data = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace").encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def compile_system_prompt(
    memory_dir: str | os.PathLike[str],
    raw_system: str,
    *,
    agent_id: str,
    conversation_id: str | None = None,
    now: datetime | None = None,
    previous_message_count: int = 0,
    revision: str | None = None,
) -> CompiledPrompt:
    """Compile ``raw_system`` with the memory committed at ``revision`` (default ``HEAD``).

    ``conversation_id`` None prints ``default`` in the v1 metadata block (letta-code's default
    conversation). An unknown ``revision`` compiles as "no revision", like a repository without
    commits. A git failure after the revision resolved keeps the revision and renders no files
    (MEMFS-3.2 step B).
    """
    moment = now if now is not None else datetime.now(UTC)
    memfs_revision, memory_format, memory = _collect(memory_dir, revision or "HEAD")
    metadata = (
        ""
        if memory_format == MEMFS_V2
        else render_metadata(agent_id, conversation_id or DEFAULT_CONVERSATION_ID, moment, previous_message_count)
    )
    core_memory = "\n\n".join(part for part in (memory, metadata) if js_trim(part))
    return CompiledPrompt(
        content=inject_core_memory(raw_system, core_memory),
        core_memory=core_memory,
        compiled_at=format_compiled_at(moment),
        raw_system_hash=_sha256_hex(raw_system),
        memfs_revision=memfs_revision,
        memory_format=memory_format,
    )
