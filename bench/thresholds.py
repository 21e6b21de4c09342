"""The bench's pass marks (``bench/thresholds.toml``): one file, read by every bench script and by
``bench/check.py``, so a mark is changed in one place and the scripts never disagree about it."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

__all__ = ["THRESHOLDS_FILE", "load_thresholds"]

THRESHOLDS_FILE = Path(__file__).with_name("thresholds.toml")


def load_thresholds(path: Path = THRESHOLDS_FILE) -> dict[str, Any]:
    with path.open("rb") as handle:
        return tomllib.load(handle)
