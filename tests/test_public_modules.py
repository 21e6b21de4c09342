"""Every public module names its public surface in ``__all__`` (as anyio does)."""

from __future__ import annotations

import importlib
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
