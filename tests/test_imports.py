"""Imports sit at the top of a module (K3): a function-level import in reverie's product code
(``orchestrator/``, ``subagents/``) is allowed only of a module on the one named list,
``orchestrator.base.lazy.HEAVY_IMPORTS``, where each entry says why it loads late. Every entry is
used, so the list cannot keep a reason nobody needs any more."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from orchestrator.base.lazy import HEAVY_IMPORTS

ROOT = Path(__file__).resolve().parents[1]
_PACKAGES = ("orchestrator", "subagents")

def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    base = ROOT.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _targets(node: ast.Import | ast.ImportFrom, path: Path) -> Iterator[str]:
    """The modules an import statement loads: ``from pkg import mod`` names ``pkg.mod`` when that
    is a module of reverie's, else ``pkg``; a relative import is resolved against ``path``."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        package = _module_name(path).split(".")
        if path.name != "__init__.py":
            package = package[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, *([base] if base else [])])
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        yield sub if _is_module(sub) else base


def function_level_imports(source: str, path: Path) -> Iterator[tuple[int, str]]:
    """``(line, module)`` for every import inside a function body of ``source``, in line order."""
    found: set[tuple[int, str]] = set()
    for func in ast.walk(ast.parse(source)):
        if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(func):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    found.update((node.lineno, target) for target in _targets(node, path))
    yield from sorted(found)


def _heavy(module: str) -> bool:
    return any(module == entry or module.startswith(entry + ".") for entry in HEAVY_IMPORTS)


def _all_imports() -> Iterator[tuple[Path, int, str]]:
    for package in _PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for line, module in function_level_imports(path.read_text(encoding="utf-8"), path):
                yield path, line, module


def test_a_function_imports_only_a_module_on_the_heavy_list() -> None:
    found = sorted(
        {
            f"{path.relative_to(ROOT)}:{line} {module}"
            for path, line, module in _all_imports()
            if not _heavy(module)
        }
    )
    assert found == [], (
        "move these imports to the top of their module (break a cycle by moving the shared piece down a "
        f"layer), or add a measured reason to orchestrator/base/lazy.HEAVY_IMPORTS: {found}"
    )


def test_every_heavy_entry_is_imported_late_somewhere_and_says_why_in_one_line() -> None:
    used = {entry for _, _, module in _all_imports() for entry in HEAVY_IMPORTS if module == entry or module.startswith(entry + ".")}
    assert sorted(set(HEAVY_IMPORTS) - used) == []
    assert [e for e, why in HEAVY_IMPORTS.items() if not why.strip() or "\n" in why] == []


def test_the_check_sees_nested_relative_and_from_imports() -> None:
    source = (
        "import json\n"
        "def f():\n"
        "    import tenacity\n"
        "    def g():\n"
        "        from .scripted import ScriptedModel\n"
        "    from orchestrator.agent import audit\n"
    )
    path = ROOT / "orchestrator" / "models" / "example.py"
    assert list(function_level_imports(source, path)) == [
        (3, "tenacity"),
        (5, "orchestrator.models.scripted"),
        (6, "orchestrator.agent.audit"),
    ]
    assert [m for _, m in function_level_imports(source, path) if not _heavy(m)] == []
    assert not _heavy("orchestrator.store") and _heavy("opentelemetry.sdk.trace")
