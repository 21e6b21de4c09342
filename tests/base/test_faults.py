"""The one fault hook: a named step kills the real process; an unknown step is refused."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.base.faults import FAULT_ENV, kill_env

_CHILD = (
    "import sys\n"
    "from orchestrator.base.faults import fault_point_sync\n"
    "print('before', flush=True)\n"
    "fault_point_sync(sys.argv[1])\n"
    "print('after', flush=True)\n"
)


def _run(step: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _CHILD, step], env=env, capture_output=True, text=True, cwd=Path(__file__).parents[2]
    )


def test_an_armed_step_dies_with_sigkill_where_it_is_reached() -> None:
    result = _run("stress.commit.made", kill_env("stress.commit.made"))
    assert result.returncode == -signal.SIGKILL
    assert result.stdout == "before\n"


def test_several_steps_may_be_armed_and_others_pass() -> None:
    env = {**kill_env("locked"), FAULT_ENV: "locked, after-ff"}
    assert _run("after-ff", env).returncode == -signal.SIGKILL
    passed = _run("before-rebase", env)
    assert (passed.returncode, passed.stdout) == (0, "before\nafter\n")


def test_an_unknown_step_is_refused_when_arming() -> None:
    with pytest.raises(ValueError, match="unknown fault step 'nope'"):
        kill_env("nope")
