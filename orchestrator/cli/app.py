"""The ``reverie`` command: a typer app that parses, calls the runtime, and prints.

User mistakes (bad paths, bad settings, invalid memory, unreachable endpoints) end with one line on
stderr and a non-zero exit, never a traceback; ``REVERIE_DEBUG=1`` shows the traceback for bugs.
"""

from __future__ import annotations

import os
import sys

import typer

from orchestrator.cli import memory as memory_cli
from orchestrator.cli.errors import describe, fail, interrupted, user_error_in

__all__ = ["app", "main"]

app = typer.Typer(
    name="reverie",
    help="Agents whose memory is Markdown in git, with background reflection and compaction.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode="rich",
)
app.add_typer(memory_cli.app, name="memory")


def _register_optional() -> None:
    """Attach command groups that live in their own modules."""
    from orchestrator.cli.commands import register

    register(app)


def main() -> None:
    _register_optional()
    try:
        app()
    except BaseException as exc:
        if isinstance(exc, SystemExit) or os.environ.get("REVERIE_DEBUG"):
            raise
        if interrupted(exc):
            print("reverie: interrupted", file=sys.stderr)
            raise SystemExit(130) from None
        mistake = user_error_in(exc) if isinstance(exc, Exception) else None
        if mistake is None:
            raise
        fail(describe(mistake))
