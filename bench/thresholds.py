"""The bench's pass marks (``bench/thresholds.toml``) and the reference they are measured against.

One file of marks, read by every bench script and by ``bench/check.py``, so a mark is changed in one
place and the scripts never disagree about it.

The marks are ratios of CPU, not seconds: a figure's CPU over the CPU of a fixed reference process
run beside it in the same invocation (``REFERENCE``: a fresh interpreter importing the OpenAI SDK,
~700 pydantic classes built from bytecode: the same kind of work as reverie's own start and turns,
and a pinned dependency, so it does not move with reverie). On this 2-core machine under load 15-20
the two CPU times drift together by tens of percent while their ratio stays within a few percent
(``import openai`` 680-1080 ms CPU, ``chat -p`` 340-530 ms, ratio 0.44-0.54 over six pairs); wall
time, which the marks used to be in, also counts every other process's turn on the cores.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

__all__ = ["REFERENCE", "THRESHOLDS_FILE", "load_thresholds", "reference_cpu"]

THRESHOLDS_FILE = Path(__file__).with_name("thresholds.toml")
REFERENCE = (sys.executable, "-c", "import openai")


def load_thresholds(path: Path = THRESHOLDS_FILE) -> dict[str, Any]:
    with path.open("rb") as handle:
        return tomllib.load(handle)


def reference_cpu(repeats: int = 3) -> float:
    """CPU seconds (user + system) of ``REFERENCE``, the median of ``repeats`` fresh processes."""
    samples = []
    for _ in range(repeats):
        proc = subprocess.Popen(REFERENCE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"the reference process failed: {' '.join(REFERENCE)}")
        samples.append(usage.ru_utime + usage.ru_stime)
    return statistics.median(samples)
