"""What a batch task pays before its first turn and after its last (P4: setup and teardown).

Three measurements, each side interleaved with the other round by round, medians reported:

* ``memory repo``: a task's copy of the run's template repository as the runner makes it
  (``copy_template``: files written from memory, git objects hard-linked) against
  ``shutil.copytree`` of the same template (what the runner did before);
* ``new store``: opening a store that does not exist yet (a file seeded from the empty database
  migrated once per process) against creating the same schema statement by statement
  (``configure_connection`` on an empty file, what every new store did before), both closed after
  one write;
* ``session``: one task's whole setup and teardown in-process on trio (reset, ``ChatSession.open``,
  ``finish_one_shot``, close; no turn), absolute wall and CPU per task.

    .venv/bin/python bench/setup.py [--rounds 200]
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path

import anyio

from orchestrator.app.session import ChatSession
from orchestrator.base import blocking
from orchestrator.base.paths import using_home
from orchestrator.batch import runner
from orchestrator.batch.suite import parse_task
from orchestrator.batch.templates import copy_template, template_repo
from orchestrator.models.scripted import ScriptedModel
from orchestrator.store.schema import configure_connection, seed_store


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def _write_one(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        configure_connection(conn)
        conn.execute("INSERT INTO agents (id, name, created_at) VALUES ('a', 'a', 'now')")
    finally:
        conn.close()


def _pair(root: Path, rounds: int) -> dict[str, list[tuple[float, float]]]:
    template, _base, tree = template_repo(root / "templates", {})
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in ("copy", "copytree", "seeded", "migrated")}
    for i in range(rounds):
        (root / f"a{i}").mkdir()
        (root / f"b{i}").mkdir()
        times["copy"].append(_timed(partial(copy_template, template, root / f"a{i}" / "memory", tree)))
        times["copytree"].append(_timed(partial(shutil.copytree, template, root / f"b{i}" / "memory", symlinks=True)))
        times["seeded"].append(_timed(lambda i=i: (seed_store(root / f"s{i}.db"), _write_one(root / f"s{i}.db"))))
        times["migrated"].append(_timed(partial(_write_one, root / f"m{i}.db")))
    return times


async def _sessions(root: Path, rounds: int) -> list[tuple[float, float]]:
    raw = {"id": "t", "turns": ["hi"], "settings": {"reflection_trigger": "off"}, "checks": [{"contains": "hi"}]}
    task = parse_task(raw)
    options = runner.RunOptions(out_dir=root / "out")
    out: list[tuple[float, float]] = []
    with using_home(runner.run_home(options.out_dir)), runner.batch_process():
        for i in range(rounds + 5):
            one = replace(task, id=f"t{i}")
            paths = runner.task_paths(options.out_dir, one.id)
            wall, cpu = time.perf_counter(), time.process_time()
            await blocking.run_sync("git", partial(runner._reset, paths, one.memory_files))
            async with ChatSession.open(
                agent_id=one.id, new=True, cli={}, suite=one.settings, model=ScriptedModel(),
                workspace=paths.workspace, store_path=paths.store,
            ) as session:
                await session.finish_one_shot()
            if i >= 5:  # the first ones make the template and warm the caches
                out.append((time.perf_counter() - wall, time.process_time() - cpu))
    return out


def _ms(values: list[tuple[float, float]], index: int) -> float:
    return statistics.median(v[index] for v in values) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="reverie-bench-setup-") as tmp:
        times = _pair(Path(tmp), args.rounds)
        sessions = anyio.run(_sessions, Path(tmp), args.rounds, backend="trio")
    print(f"{args.rounds} rounds, medians (ms)")
    print(f"{'':14s} {'now wall':>9} {'now CPU':>8} {'before wall':>11} {'before CPU':>10} {'ratio':>6}")
    for label, now, before in (("memory repo", "copy", "copytree"), ("new store", "seeded", "migrated")):
        ratio = _ms(times[before], 0) / max(_ms(times[now], 0), 1e-9)
        print(
            f"{label:14s} {_ms(times[now], 0):9.3f} {_ms(times[now], 1):8.3f} "
            f"{_ms(times[before], 0):11.3f} {_ms(times[before], 1):10.3f} {ratio:5.1f}x"
        )
    print(f"{'session':14s} {_ms(sessions, 0):9.3f} {_ms(sessions, 1):8.3f}   (reset + open + close, no turn)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
