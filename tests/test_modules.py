"""No product module is over 700 lines (K1): past that a module held more than one concept, and a
reader new to it had to find where one ended. A module that grows past the line is split by what
its parts are, not at the line. Likewise no docstring runs over 25 lines: it says what and why at the
point of use, and the walk-through, the cases and the figures live in docs/architecture.md ("Module
notes"), docs/design.md and bench/README.md."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 700
MAX_DOCSTRING_LINES = 25



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


def _long_docstrings() -> dict[str, int]:
    found = {}
    for package in ("orchestrator", "subagents"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                first = node.body[0] if node.body else None
                if (
                    isinstance(first, ast.Expr)
                    and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)
                ):
                    lines = (first.end_lineno or first.lineno) - first.lineno + 1
                    if lines > MAX_DOCSTRING_LINES:
                        name = getattr(node, "name", "<module>")
                        found[f"{path.relative_to(ROOT).as_posix()}:{first.lineno} {name}"] = lines
    return found


def test_no_docstring_is_over_25_lines() -> None:
    over = _long_docstrings()
    assert over == {}, f"say what and why, the rest to docs/ or bench/ (docs/design.md K1): {over}"
