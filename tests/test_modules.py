"""No product module is over 700 lines (K1): past that a module held more than one concept, and a
reader new to it had to find where one ended. A module that grows past the line is split by what
its parts are, not at the line."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 700



def _long_modules() -> dict[str, int]:
    found = {}
    for package in ("orchestrator", "subagents", "prompts"):
        for path in sorted((ROOT / package).rglob("*.py")):
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > MAX_LINES:
                found[path.relative_to(ROOT).as_posix()] = lines
    return found


def test_no_product_module_is_over_700_lines() -> None:
    over = _long_modules()
    assert over == {}, f"split these by concept (docs/design.md K1): {over}"
