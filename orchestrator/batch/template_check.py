"""A suite's memory templates, validated when the suite is (before anything runs).

A task's ``template.files`` become the first commit of its memory repository, which the pre-commit
hook validates; an invalid seed used to be found only when its task ran, as that task's ``error``
after the tasks before it had run. The same validator runs here on the same files (the defaults,
overlaid with the task's seeds), in memory: no repository, no git process.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from orchestrator.batch.suite import SuiteError, Task
from orchestrator.memfs.policy import ROOT_MARKER
from orchestrator.memfs.repo import DEFAULT_MEMORY_FILES
from orchestrator.memfs.snapshot import Entry, Snapshot, diff_status, path_order_key
from orchestrator.memfs.validator import validate_snapshot

__all__ = ["check_templates", "template_errors"]


def _blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def template_errors(seeds: Mapping[str, str]) -> tuple[str, ...]:
    """What the pre-commit hook would refuse in a first commit of these seeds over the defaults."""
    files = {**DEFAULT_MEMORY_FILES, **seeds}
    blobs = {rel: text.encode("utf-8") for rel, text in files.items()}
    index = {rel: Entry("100644", _blob_id(data)) for rel, data in sorted(blobs.items(), key=lambda i: path_order_key(i[0]))}
    snapshot = Snapshot(
        index=MappingProxyType(index),
        head=None,
        blobs=MappingProxyType({_blob_id(data): data for data in blobs.values()}),
        changes=MappingProxyType(diff_status(index, None)),
    )
    return tuple(validate_snapshot(snapshot, ROOT_MARKER, os.environ).errors)


def check_templates(tasks: Iterable[Task], source: str = "<suite>") -> None:
    """Raise ``SuiteError`` naming the first task whose template the hook would refuse, and why.
    Tasks with the same seeds are checked once. Blocking (pure CPU)."""
    seen: set[tuple[tuple[str, str], ...]] = set()
    for task in tasks:
        if not task.memory_files:
            continue
        key = tuple(sorted(task.memory_files.items()))
        if key in seen:
            continue
        seen.add(key)
        errors = template_errors(task.memory_files)
        if errors:
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise SuiteError(f"{source}: task {task.id!r}: template.files would be refused by the memory hook: {errors[0]}{more}")
