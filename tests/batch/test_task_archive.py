"""A task's files packed where it ran and unpacked into another run directory are the task as a local
run leaves it (the report reads the same transcript, diff and events); an archive naming anything
outside the task's own files is refused before anything is written."""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path

import anyio
import pytest

from orchestrator.batch.executors import LocalExecutor
from orchestrator.batch.report_data import gather
from orchestrator.batch.run import run_suite
from orchestrator.batch.runner import RunOptions, task_paths
from orchestrator.batch.suite import load_suite
from orchestrator.batch.task_archive import ArchiveError, pack_task, unpack_task
from tests.batch.helpers import TINY, write_suite


def _details_by_id(run_dir: Path) -> dict[str, dict[str, object]]:
    data = gather(run_dir)
    rows = data.index["runs"][0]["rows"]
    return {r["id"]: data.details[r["n"]] for r in rows}


def test_a_packed_task_unpacks_into_the_same_report(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", [TINY[0], TINY[1]])
    here = tmp_path / "ran-here"

    async def go() -> None:
        tasks = await anyio.to_thread.run_sync(load_suite, suite)
        await run_suite(tasks, RunOptions(out_dir=here), LocalExecutor(2))

    anyio.run(go, backend="trio")
    there = tmp_path / "driver"
    there.mkdir()
    for name in ("results.jsonl", "summary.json", "run.json"):
        shutil.copy(here / name, there / name)
    stale = task_paths(there, "rule").memory / "stale.md"
    stale.parent.mkdir(parents=True)
    stale.write_text("from an earlier attempt")
    for task_id in ("rule", "fact"):
        unpack_task(there, task_id, pack_task(here, task_id))

    assert not stale.exists(), "an earlier attempt's files are replaced, not merged"
    want, got = _details_by_id(here), _details_by_id(there)
    for task_id in ("rule", "fact"):
        assert got[task_id]["diff"] == want[task_id]["diff"] and got[task_id]["diff"]["files"]  # type: ignore[index]
        assert got[task_id]["transcript"] == want[task_id]["transcript"]
        assert got[task_id]["timeline"] == want[task_id]["timeline"]
    assert "~fin" in (task_paths(there, "rule").memory / "persona.md").read_text()


@pytest.mark.parametrize("name", ["../escape.txt", "home/agents/other/memory/x", "results.jsonl", "/etc/x"])
def test_an_archive_naming_another_path_is_refused(tmp_path: Path, name: str) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        info = tarfile.TarInfo(name)
        info.size = 2
        archive.addfile(info, io.BytesIO(b"hi"))
    (tmp_path / "results.jsonl").write_text("kept\n")
    with pytest.raises(ArchiveError, match="outside the task's files"):
        unpack_task(tmp_path, "rule", buffer.getvalue())
    assert (tmp_path / "results.jsonl").read_text() == "kept\n"
    assert not (tmp_path.parent / "escape.txt").exists()


def test_a_truncated_archive_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(ArchiveError, match="cannot be unpacked"):
        unpack_task(tmp_path, "rule", b"\x1f\x8b\x08garbage")
