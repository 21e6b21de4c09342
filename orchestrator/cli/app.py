"""The ``reverie`` command: a typer app that parses, calls the runtime, and prints.

Start-up is lazy (P1): a command's module is imported only when that command runs, so
``reverie chat -p`` does not pay for typer's rich help, the batch runner or stress, and
``reverie --version`` imports nothing at all. ``COMMANDS`` names the module of every command; with no
command, ``--help`` or a name it does not know, every module is registered, so help is complete even
when the table is behind a module's ``register``. A module that fails to import keeps its commands:
they are listed with the reason and running one says why in one line. ``chat`` is parsed without
typer at all (``orchestrator.cli.chat_start``; typer only renders its ``--help``): typer and
pydantic are a third of the 0.3 s budget of ``chat -p``.

User mistakes (bad paths, bad settings, invalid memory, unreachable endpoints) end with one line on
stderr and a non-zero exit, never a traceback; ``REVERIE_DEBUG=1`` shows the traceback for bugs.

The console script is :func:`entry`, not :func:`main`: once a command has returned, everything it
must leave durable is already closed (the store, the memory repositories, child processes: each is
an async context that ends before the command does), so the process leaves as CPython's own
shutdown would (non-daemon threads joined, ``atexit`` functions run, standard streams flushed) and
then skips the interpreter's teardown with ``os._exit``. That teardown freed the OpenAI SDK's and
pydantic's modules object by object: 100-300 ms between the printed result and the exit, which a
script waiting on ``reverie chat -p`` paid on every call (P7). :func:`main` stays an ordinary
function for callers inside a Python process.
"""

from __future__ import annotations

import atexit
import importlib
import os
import sys
import threading
from typing import TYPE_CHECKING, Any, NoReturn

from orchestrator import __version__
from orchestrator.cli import collector

if TYPE_CHECKING:
    import typer

__all__ = ["COMMANDS", "GROUPS", "build_app", "entry", "leave", "main", "usage_line", "version_line"]

# command name -> module whose ``register(app)`` adds it
COMMANDS: dict[str, str] = {
    "chat": "orchestrator.cli.chat",
    "prompt": "orchestrator.cli.commands",
    "history": "orchestrator.cli.commands",
    "search": "orchestrator.cli.commands",
    "reflect": "orchestrator.cli.commands",
    "compact": "orchestrator.cli.compact",
    "stress": "orchestrator.cli.stress",
    "reflections": "orchestrator.cli.reflections",
    "run": "orchestrator.cli.batch",
    "sweep": "orchestrator.cli.batch",
    "events": "orchestrator.cli.batch",
    "report": "orchestrator.cli.report",
    "config": "orchestrator.cli.home",
    "agents": "orchestrator.cli.home",
}
# command groups: name -> module whose ``app`` is the group
GROUPS: dict[str, str] = {"memory": "orchestrator.cli.memory", "suite": "orchestrator.cli.suite"}

_HELP = "Agents whose memory is Markdown in git, with background reflection and compaction."


def version_line() -> str:
    return f"reverie {__version__}"


def _version_callback(value: bool) -> None:
    if value:
        # lazy: `reverie --version` imports no typer
        import typer

        print(version_line())
        raise typer.Exit()


def _requested(argv: list[str]) -> str | None:
    """The command named first on the command line (the main app's own options are flags that
    come before it and mean "show everything")."""
    return argv[0] if argv and not argv[0].startswith("-") else None


def _unavailable(app: typer.Typer, name: str, module: str, exc: BaseException) -> None:
    reason = f"{type(exc).__name__}: {exc}".splitlines()[0]

    def broken() -> None:
        # lazy: only a failure needs the error tree
        from orchestrator.cli.errors import fail

        fail(f"the `{name}` command is unavailable: {module} failed to import ({reason})")

    app.command(
        name,
        help=f"(unavailable: {module} failed to import: {reason})",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )(broken)


def _register_module(app: typer.Typer, module: str, names: list[str]) -> None:
    try:
        mod = importlib.import_module(module)
    except Exception as exc:
        if os.environ.get("REVERIE_DEBUG"):
            raise
        for name in names:
            _unavailable(app, name, module, exc)
        return
    if module in GROUPS.values():
        for name in names:
            app.add_typer(mod.app, name=name)
    else:
        mod.register(app)


def build_app(command: str | None = None) -> typer.Typer:
    """The typer app with ``command``'s module only, or with every module when ``command`` is None
    or unknown."""
    # lazy: `reverie --version` imports no typer
    import typer

    app = typer.Typer(
        name="reverie",
        help=_HELP,
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        add_completion=True,
        rich_markup_mode="rich",
    )

    @app.callback()
    def _root(
        version: bool = typer.Option(
            False, "--version", "-V", help="Print the version and exit.", is_eager=True, callback=_version_callback
        ),
    ) -> None:
        """Agents whose memory is Markdown in git, with background reflection and compaction."""

    table: dict[str, list[str]] = {}
    for name, module in {**GROUPS, **COMMANDS}.items():
        table.setdefault(module, []).append(name)
    wanted = COMMANDS.get(command or "") or GROUPS.get(command or "")
    if wanted is not None:
        _register_module(app, wanted, table[wanted])
        return app
    for module, names in table.items():
        _register_module(app, module, names)
    return app


def usage_line(exc: Any) -> str:
    """A command line click refused, as one line in the wording of reverie's other errors (typer
    would draw a box): the message, then where the options are listed."""
    message = " ".join(exc.format_message().split()).rstrip(".")
    message = message.replace("Input should be greater than or equal to", "must be at least")
    message = message.replace("Input should be less than or equal to", "must be at most")
    path = exc.ctx.command_path if exc.ctx is not None else "reverie"
    return f"{message} (see {path} --help)"


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args in (["--version"], ["-V"]):
        print(version_line())
        return
    # lazy: --version above imports nothing
    from orchestrator.base.processes import hide_secrets_from_proc

    hide_secrets_from_proc()  # A6: an unconfined bash cannot read the key from /proc/$PPID/environ
    try:
        if args[:1] == ["chat"]:
            # lazy: chat parses without typer (cli/chat_start.py)
            from orchestrator.cli.chat_start import ChatUsageError, parse_chat_args, run_fast

            try:
                parsed = parse_chat_args(args[1:])
            except ChatUsageError as exc:
                print(f"reverie: error: {exc} (see reverie chat --help)", file=sys.stderr)
                raise SystemExit(2) from None
            if parsed is not None:
                run_fast(parsed)
                return
        app = build_app(_requested(args))
        collector.resume()
        code = app(args=args, prog_name="reverie", standalone_mode=False)
    except BaseException as exc:
        _report(exc)
    else:
        if isinstance(code, int) and code:
            raise SystemExit(code)


def entry() -> NoReturn:
    """The ``reverie`` console script and ``python -m orchestrator``: :func:`main`, then
    :func:`leave` with its exit status. A bug's exception is not caught here: it takes CPython's
    ordinary path, traceback and full shutdown included. The cyclic collector waits for the
    command's start-up to end (``cli/collector.py``)."""
    collector.pause()
    try:
        main()
    except SystemExit as exc:
        leave(exc.code)
    leave(0)


def leave(status: object) -> NoReturn:
    """End the process as ``sys.exit(status)`` would, without the interpreter's teardown.

    The steps are the ones CPython's shutdown takes before it starts freeing modules: wait for
    non-daemon threads, run the ``atexit`` functions (logging's flush, ``weakref.finalize`` clean-ups
    such as temporary directories, exporters that registered one), flush the standard streams. A
    closed pipe on stdout (``reverie … | head``) is not an error here, as it is not for the shell.
    Under a profiler or a tracer (``python -m cProfile``, coverage) the ordinary exit is kept: they
    write their results during the interpreter's shutdown."""
    if sys.getprofile() is not None or sys.gettrace() is not None:
        raise SystemExit(status)
    code = _status_code(status)
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not current and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _status_code(status: object) -> int:
    if status is None:
        return 0
    if isinstance(status, int):
        return status & 0xFF
    print(status, file=sys.stderr)
    return 1


def _report(exc: BaseException) -> Any:
    if isinstance(exc, SystemExit) or os.environ.get("REVERIE_DEBUG"):
        raise exc
    # click's exceptions by class name: typer vendors click (typer._click) in new releases and
    # uses click itself in older ones, and the names are the same in both
    kinds = {cls.__name__ for cls in type(exc).__mro__}
    if "ClickException" not in kinds and "Abort" not in kinds:
        kinds = set()  # reverie's own UsageError is a ReverieError, reported below
    if "NoArgsIsHelpError" in kinds:
        exc.show()  # type: ignore[attr-defined]  # `reverie` or a group alone: its help, as before
        raise SystemExit(getattr(exc, "exit_code", 2)) from None
    if "UsageError" in kinds:
        print(f"reverie: error: {usage_line(exc)}", file=sys.stderr)
        raise SystemExit(getattr(exc, "exit_code", 2)) from None
    if "Abort" in kinds:
        print("reverie: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    # lazy: only a failure needs the error tree
    from orchestrator.cli.errors import describe, fail, interrupted, user_error_in

    if interrupted(exc):
        print("reverie: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    mistake = user_error_in(exc) if isinstance(exc, Exception) else None
    if mistake is None:
        raise exc
    fail(describe(mistake))
