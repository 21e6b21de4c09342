"""Every dataclass in the packages has its own docstring: one line saying what the value is.

Without one, CPython 3.11 also builds a ``__doc__`` from ``inspect.signature`` at import; the 39
dataclasses imported before ``chat -p``'s first request that had none cost 8 M instructions there
(``bench/startup.py --instructions``). The check reads the source, so modules no test imports are
covered too.
"""

from __future__ import annotations

import ast
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
_PACKAGES = ("orchestrator", "subagents", "prompts")


def _is_dataclass_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    return (isinstance(target, ast.Name) and target.id == "dataclass") or (
        isinstance(target, ast.Attribute) and target.attr == "dataclass"
    )


def _undocumented(path: Path, root: Path = _ROOT) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [
        f"{path.relative_to(root)}:{node.lineno} {node.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        and any(_is_dataclass_decorator(d) for d in node.decorator_list)
        and ast.get_docstring(node) is None
    ]


def test_every_dataclass_has_a_docstring() -> None:
    paths = [path for package in _PACKAGES for path in sorted((_ROOT / package).rglob("*.py"))]
    missing = [entry for path in paths for entry in _undocumented(path)]
    assert missing == [], "dataclasses without a docstring (write one line saying what the value is):\n" + "\n".join(missing)


def test_the_check_sees_a_missing_docstring(tmp_path: Path) -> None:
    source = tmp_path / "values.py"
    source.write_text(
        "from dataclasses import dataclass\nimport dataclasses\n\n"
        "@dataclass(frozen=True)\nclass Bare:\n    x: int\n\n"
        "@dataclasses.dataclass\nclass AlsoBare:\n    y: int\n\n"
        "@dataclass\nclass Documented:\n    '''Why it exists.'''\n    z: int\n",
        encoding="utf-8",
    )
    assert _undocumented(source, tmp_path) == ["values.py:5 Bare", "values.py:9 AlsoBare"]
