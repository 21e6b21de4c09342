"""Path classification for MemFS repositories (MEMFS-1.2 to MEMFS-1.7).

Pure functions over repository-relative paths. Paths read from git are used exactly as stored
(M2): a backslash is an ordinary file-name character there, so callers holding git paths
pass them straight in. ``normalize_path`` (backslash to slash) exists for paths typed by a user or
a tool on Windows-style input and is applied by the ``*_path`` predicates only when asked via
``normalize=True``.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Final, Literal

__all__ = [
    "MARKDOWN_SUFFIX",
    "MEMFS_V1",
    "MEMFS_V2",
    "ROOT_INDEX",
    "SKILLS_DIR",
    "MemoryFormat",
    "child_index_directory",
    "detect_memory_format",
    "detect_tree_format",
    "is_child_index_path",
    "is_core_memory_path",
    "is_first_level_child_index",
    "is_markdown_path",
    "is_projected_memory_path",
    "is_root_file",
    "is_skills_path",
    "label_from_path",
    "missing_index_for",
    "normalize_path",
    "required_indexes_for",
]

MemoryFormat = Literal["memfs-v2", "memfs-v1"]

MEMFS_V2: Final[MemoryFormat] = "memfs-v2"
MEMFS_V1: Final[MemoryFormat] = "memfs-v1"
ROOT_INDEX: Final = "MEMORY.md"
MARKDOWN_SUFFIX: Final = ".md"
SKILLS_DIR: Final = "skills"
_INDEX_NAME: Final = "MEMORY.md"


def normalize_path(path: str) -> str:
    """Replace every backslash with a slash and nothing else (MEMFS-1.2)."""
    return path.replace("\\", "/")


def is_markdown_path(path: str) -> bool:
    """Case-sensitive ``.md`` test: ``notes.MD`` and ``x.md `` are not Markdown."""
    return path.endswith(MARKDOWN_SUFFIX)


def is_root_file(path: str) -> bool:
    """A path directly in the memory root (no ``/``)."""
    return "/" not in path


def is_skills_path(path: str) -> bool:
    """``skills`` itself or anything below ``skills/`` (case-sensitive; ``Skills/`` is memory)."""
    return path == SKILLS_DIR or path.startswith(SKILLS_DIR + "/")


def is_core_memory_path(path: str, memory_format: MemoryFormat, *, normalize: bool = False) -> bool:
    """Core memory per MEMFS-1.2: v2 root Markdown (``MEMORY.md`` included), v1 ``system/``."""
    p = normalize_path(path) if normalize else path
    if not is_markdown_path(p):
        return False
    if memory_format == MEMFS_V2:
        return "/" not in p
    return p.startswith("system/")


def required_indexes_for(path: str) -> list[str]:
    """The ``<dir>/MEMORY.md`` paths the index-chain rule (MEMFS-1.3) requires, top first."""
    segments = path.split("/")[:-1]
    required: list[str] = []
    prefix = ""
    for segment in segments:
        prefix = segment if not prefix else f"{prefix}/{segment}"
        required.append(f"{prefix}/{_INDEX_NAME}")
    return required


def missing_index_for(path: str, all_paths: Collection[str]) -> str | None:
    """The first required index absent from ``all_paths``, or None when the chain is complete."""
    for index in required_indexes_for(path):
        if index not in all_paths:
            return index
    return None


def is_projected_memory_path(
    path: str,
    all_paths: Collection[str],
    memory_format: MemoryFormat,
    *,
    normalize: bool = False,
) -> bool:
    """Memory under the index-chain rule (MEMFS-1.2); does not check the ``.md`` suffix.

    ``all_paths`` is used as given. A child index witnesses its own directory.
    """
    p = normalize_path(path) if normalize else path
    if memory_format == MEMFS_V1:
        return True
    if is_skills_path(p):
        return False
    if "/" not in p:
        return True
    return missing_index_for(p, all_paths) is None


def is_child_index_path(path: str) -> bool:
    """Last segment exactly ``MEMORY.md`` and not the root index."""
    return path != ROOT_INDEX and path.endswith("/" + _INDEX_NAME)


def is_first_level_child_index(path: str) -> bool:
    """``<dir>/MEMORY.md`` with exactly one ``/`` and a non-empty ``<dir>`` (``^[^/]+/MEMORY\\.md$``)."""
    head, sep, tail = path.partition("/")
    return bool(sep) and bool(head) and tail == _INDEX_NAME


def child_index_directory(index_path: str) -> str:
    """The directory an index stands for: ``projects/MEMORY.md`` gives ``projects``."""
    return index_path[: -len("/" + _INDEX_NAME)]


def label_from_path(path: str, *, normalize: bool = False) -> str:
    """Path with one trailing ``.md`` removed (MEMFS-1.4): ``.md`` gives ``""``."""
    p = normalize_path(path) if normalize else path
    return p[: -len(MARKDOWN_SUFFIX)] if p.endswith(MARKDOWN_SUFFIX) else p


def detect_tree_format(markdown_paths: Collection[str]) -> MemoryFormat:
    """The compiler's rule (MEMFS-1.5): v2 iff the tree's paths contain exactly ``MEMORY.md``."""
    return MEMFS_V2 if ROOT_INDEX in markdown_paths else MEMFS_V1


def detect_memory_format(memory_dir: str | Path) -> MemoryFormat:
    """Working-tree detector (MEMFS-1.2) for tools that write files; never for prompt purposes.

    Does I/O (one ``stat``); kept here because it is a one-line layout rule.
    """
    return MEMFS_V2 if (Path(memory_dir) / ROOT_INDEX).is_file() else MEMFS_V1
