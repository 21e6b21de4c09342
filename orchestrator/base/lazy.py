"""A package's names that load their module on first use (PEP 562).

A package re-exports its modules' names for its users, but some modules cost start-up time that
most processes never need (the compaction ladder, the bash tool's sandbox, the validator in the
pre-commit hook): their names resolve through the package's ``__getattr__`` instead, and the value
is kept in the package's namespace so later look-ups are plain attribute reads.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(package: str, namespace: dict[str, Any], home: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``home`` maps each lazy name to the submodule
    defining it; ``namespace`` is the package's ``globals()``."""

    def __getattr__(name: str) -> Any:
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    return __getattr__
