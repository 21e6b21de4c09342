"""The error tree: every public exception reverie defines hangs under ``ReverieError`` and is drawn in
docs/architecture.md, "The error tree"; the CLI reports those as one line and nothing else."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import orchestrator
import subagents
from orchestrator.base.config import ConfigError
from orchestrator.base.errors import ReverieError, UsageError
from orchestrator.cli.errors import UserError, user_error_in
from orchestrator.memfs.errors import MemfsError
from orchestrator.memfs.repo import GitError
from orchestrator.store.records import StoreDamaged

# Bugs when they happen, so they keep a traceback; the testing harness is not part of reverie;
# NotPlain is a signal memfs.localrepo.LocalRepo always catches (ask libgit2 instead), never an error.
_OUTSIDE_THE_TREE = {"WorkerClosedError", "LlamaServerError", "NotPlain"}
ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def _drawing() -> str:
    """The section of docs/architecture.md that draws the tree, up to the next heading."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    start = text.index("### The error tree\n")
    end = text.find("\n#", start + 1)
    return text[start : end if end != -1 else len(text)]


def _public_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for package in (orchestrator, subagents):
        for info in pkgutil.walk_packages(package.__path__, prefix=package.__name__ + "."):
            if info.name.endswith("__main__"):
                continue
            module = importlib.import_module(info.name)
            for name, value in vars(module).items():
                if (
                    inspect.isclass(value)
                    and issubclass(value, BaseException)
                    and value.__module__ == module.__name__
                    and not name.startswith("_")
                ):
                    found[name] = value
    return found


def test_every_public_exception_is_a_reverie_error_or_a_named_exception() -> None:
    strays = sorted(n for n, c in _public_exceptions().items() if not issubclass(c, ReverieError))
    assert set(strays) <= _OUTSIDE_THE_TREE, f"not under ReverieError: {strays}"


def test_the_architecture_draws_every_class_of_the_tree() -> None:
    drawing = _drawing()
    where = 'docs/architecture.md, "The error tree"'
    tree = {n for n, c in _public_exceptions().items() if issubclass(c, ReverieError)}
    missing = sorted(n for n in tree if n not in drawing)
    assert not missing, f"{where} does not draw {missing}"
    drawn_lines = [
        line.split("── ", 1)[1].split()[0] for line in drawing.splitlines() if "├── " in line or "└── " in line
    ]
    twice = sorted({n for n in drawn_lines if drawn_lines.count(n) > 1})
    assert not twice, f"{where} draws these twice: {twice}"
    drawn = set(drawn_lines)
    gone = sorted(drawn - tree)
    assert not gone, f"{where} draws classes that are not ReverieErrors: {gone}"


def test_layer_errors_keep_the_builtin_base_they_had_before_the_root() -> None:
    assert issubclass(ConfigError, ValueError)
    assert issubclass(UsageError, ValueError)
    assert issubclass(GitError, MemfsError) and issubclass(GitError, RuntimeError)


@pytest.mark.parametrize("bug", [ValueError("x"), OSError(2, "No such file"), KeyError("k"), RuntimeError("r")])
def test_a_bug_is_not_taken_for_a_user_mistake(bug: Exception) -> None:
    assert user_error_in(bug) is None
    assert user_error_in(ExceptionGroup("g", [bug])) is None


def test_a_reverie_error_is_found_inside_task_group_wrappers() -> None:
    mistake = ConfigError("config.toml: [turn] max_steps: not a whole number")
    wrapped = BaseExceptionGroup("outer", [ExceptionGroup("inner", [ValueError("bug"), mistake])])
    assert user_error_in(wrapped) is mistake
    assert user_error_in(UserError("--prompt is empty")) is not None
    assert user_error_in(StoreDamaged("store.sqlite3: file is not a database")) is not None
