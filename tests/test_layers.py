"""The layer order of D9, as ``pyproject.toml`` states it for import-linter, read by a test
too: every import points down (or sideways where the contract allows), and every function-level
import says why it is not at the top (STYLE 3), since a hidden import is invisible to both checks."""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator, Sequence
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
_CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]


def _layers(contract_id: str) -> list[list[str]]:
    """The contract's layers, highest first, each a list of its sibling packages."""
    (contract,) = [c for c in _CONTRACTS["contracts"] if c["id"] == contract_id]
    return [[part.strip() for part in layer.replace("|", ":").split(":")] for layer in contract["layers"]]


def _rank(layers: Sequence[Sequence[str]], module: str) -> int | None:
    for rank, siblings in enumerate(layers):
        if any(module == s or module.startswith(s + ".") for s in siblings):
            return len(layers) - rank
    return None


def upward_imports(graph: grimp.ImportGraph, layers: Sequence[Sequence[str]]) -> list[str]:
    """``importer -> imported`` for every import from a layer into one above it."""
    found = []
    for importer in sorted(graph.modules):
        low = _rank(layers, importer)
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            high = _rank(layers, imported)
            if low is not None and high is not None and high > low:
                found.append(f"{importer} -> {imported}")
    return found


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*_CONTRACTS["root_packages"])


def test_no_module_imports_a_layer_above_its_own(graph: grimp.ImportGraph) -> None:
    assert upward_imports(graph, _layers("d9-layers")) == []


def test_the_check_catches_the_supervisor_importing_a_subagent() -> None:
    graph = grimp.ImportGraph()
    graph.add_import(importer="subagents.compaction", imported="orchestrator.runtime.plugins")
    graph.add_import(importer="orchestrator.runtime.supervisor", imported="subagents.compaction")
    assert upward_imports(graph, _layers("d9-layers")) == ["orchestrator.runtime.supervisor -> subagents.compaction"]


def test_every_package_of_reverie_has_a_layer(graph: grimp.ImportGraph) -> None:
    layers = _layers("d9-layers")
    packages = {m for m in graph.modules if m.count(".") == 1 and graph.find_children(m)} | {"subagents", "prompts"}
    unplaced = sorted(p for p in packages if _rank(layers, p) is None and p != "orchestrator.testing")
    assert unplaced == [], f"add these packages to the d9-layers contract in pyproject.toml: {unplaced}"


def _import_groups() -> Iterator[tuple[Path, ast.stmt, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """The first import of each run of imports inside a function body, with its function."""
    for package in ("orchestrator", "subagents", "prompts"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for func in ast.walk(tree):
                if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                for block in ast.walk(func):
                    for field in ("body", "orelse", "finalbody"):
                        previous: ast.stmt | None = None
                        body = getattr(block, field, None)
                        for stmt in body if isinstance(body, list) else ():
                            is_import = isinstance(stmt, ast.Import | ast.ImportFrom)
                            if is_import and not isinstance(previous, ast.Import | ast.ImportFrom):
                                yield path, stmt, func
                            previous = stmt


def test_every_function_level_import_says_why() -> None:
    """The reason is a comment on the line above the import (or above the run of imports it
    starts), or the function's docstring when the function exists for that import (``_pygit2``)."""
    unexplained = []
    for path, stmt, func in _import_groups():
        lines = path.read_text(encoding="utf-8").splitlines()
        above = lines[stmt.lineno - 2].strip()
        if above == "try:":
            above = lines[stmt.lineno - 3].strip()
        if not above.startswith("#") and "import" not in (ast.get_docstring(func) or ""):
            unexplained.append(f"{path.relative_to(ROOT)}:{stmt.lineno}")
    assert unexplained == [], f"function-level imports without a reason: {unexplained}"


def _thread_handoffs(source: str) -> list[int]:
    """Lines that hand work to a thread themselves: a call of ``to_thread.run_sync`` (spelt through
    ``anyio`` or imported) or an import of ``anyio.to_thread``."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "run_sync":
            base = node.value
            if (isinstance(base, ast.Attribute) and base.attr == "to_thread") or (
                isinstance(base, ast.Name) and base.id == "to_thread"
            ):
                lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "anyio" and any(a.name == "to_thread" for a in node.names):
            lines.append(node.lineno)
    return lines


def test_blocking_work_leaves_the_loop_only_through_base_blocking() -> None:
    """One way off the event loop (O2): every hand-off to a thread goes through
    ``orchestrator.base.blocking.run_sync`` (kinds ``git``, ``files``, ``wait``)."""
    own = ROOT / "orchestrator" / "base" / "blocking.py"
    found = {
        f"{path.relative_to(ROOT)}:{line}"
        for folder in ("orchestrator", "subagents")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path != own
        for line in _thread_handoffs(path.read_text(encoding="utf-8"))
    }
    assert found == set(), "use orchestrator.base.blocking.run_sync"
    assert _thread_handoffs("import anyio\nasync def f():\n    await anyio.to_thread.run_sync(g)\n") == [3]
