"""``batch_environment``: what a batch process sets for its tasks and gives back afterwards."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.batch.runner import batch_environment, batch_sqlite_lanes
from orchestrator.store.schema import STORE_SYNC_VARIABLE
from orchestrator.store.worker import LANES_VARIABLE, SQLITE_LANES


@pytest.mark.parametrize("processes", [1, 2, 3, 64])
def test_each_process_gets_the_lanes_its_share_of_the_cores_can_use(processes: int) -> None:
    cores = os.cpu_count() or 1
    lanes = batch_sqlite_lanes(processes)
    assert 1 <= lanes <= SQLITE_LANES
    assert lanes == max(1, min(SQLITE_LANES, cores // processes))
    assert lanes * processes <= max(cores, processes), "no more lanes than cores, beyond one per process"


def test_the_environment_is_set_for_the_run_and_given_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LANES_VARIABLE, raising=False)
    monkeypatch.setenv("REVERIE_HOME", "/somewhere/else")
    with batch_environment(tmp_path / "run", processes=2):
        assert os.environ["REVERIE_HOME"] == str((tmp_path / "run" / "home").resolve())
        assert os.environ[STORE_SYNC_VARIABLE] == "off"
        assert os.environ[LANES_VARIABLE] == str(batch_sqlite_lanes(2))
    assert os.environ["REVERIE_HOME"] == "/somewhere/else"
    assert LANES_VARIABLE not in os.environ and STORE_SYNC_VARIABLE not in os.environ


def test_a_lane_count_the_user_chose_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LANES_VARIABLE, "3")
    with batch_environment(tmp_path / "run", processes=2):
        assert os.environ[LANES_VARIABLE] == "3"
    assert os.environ[LANES_VARIABLE] == "3"
