"""``run_async``: the heap alive before the loop is left out of garbage collection, and Ctrl-C in a
task group ends as one plain ``KeyboardInterrupt``."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import anyio
import pytest

from orchestrator.cli.aio import run_async


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_what_exists_before_the_loop_is_never_scanned_by_the_collector(unfrozen: None) -> None:
    class Program:
        pass

    program = Program()

    async def main() -> tuple[int, bool]:
        made_in_the_loop = [object()]
        return gc.get_freeze_count(), any(o is made_in_the_loop for o in gc.get_objects())

    frozen, loop_object_tracked = run_async(main)
    assert frozen > 0
    assert loop_object_tracked, "objects made while the loop runs are collected as usual"
    assert not any(o is program for o in gc.get_objects()), "the pre-loop heap is frozen out of collection"


def test_ctrl_c_inside_a_task_group_is_one_keyboard_interrupt() -> None:
    async def main() -> None:
        async def interrupt() -> None:
            raise KeyboardInterrupt

        async with anyio.create_task_group() as tg:
            tg.start_soon(interrupt)
            await anyio.sleep_forever()

    with pytest.raises(KeyboardInterrupt):
        run_async(main)
