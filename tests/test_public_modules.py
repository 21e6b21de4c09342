"""Every public module names its public surface in ``__all__``, both ways (as anyio's
``test_all_attributes`` does): what ``__all__`` names exists, and every public name the module
defines is in ``__all__`` (a helper that is not part of the surface starts with ``_``)."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil

import pytest

import orchestrator
import prompts
import subagents


def _public_modules() -> list[str]:
    names = []
    for package in (orchestrator, subagents, prompts):
        names.append(package.__name__)
        for info in pkgutil.walk_packages(package.__path__, prefix=package.__name__ + "."):
            if not any(part.startswith("_") for part in info.name.split(".")):
                names.append(info.name)
    return names


@pytest.mark.parametrize("name", _public_modules())
def test_module_defines_all(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert isinstance(exported, list | tuple), f"{name} has no __all__"
    for symbol in exported:
        assert hasattr(module, symbol), f"{name}.__all__ names missing {symbol}"


def _defined_names(module: object) -> set[str]:
    """Public names bound at the top level of the module's source (type variables excepted)."""
    tree = ast.parse(inspect.getsource(module))  # type: ignore[arg-type]
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            value = node.value
            if isinstance(value, ast.Call) and getattr(value.func, "id", "") in {"TypeVar", "ParamSpec"}:
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return {n for n in names if not n.startswith("_")}


@pytest.mark.parametrize("name", [n for n in _public_modules() if n != "orchestrator.__main__"])
def test_every_public_name_a_module_defines_is_in_all(name: str) -> None:
    module = importlib.import_module(name)
    missing = sorted(_defined_names(module) - set(getattr(module, "__all__", ())))
    assert missing == [], f"{name} defines public names missing from __all__: {missing} (add them, or start them with _)"
