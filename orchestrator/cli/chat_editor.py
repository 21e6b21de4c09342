"""The chat's line editor: prompt_toolkit on a thread of its own, beside the trio (or asyncio) loop.

prompt_toolkit runs its own asyncio event loop, which cannot share a thread with trio, so it gets
a dedicated thread and loop; ``read`` submits a prompt there and waits for it without blocking
the session's loop. Output from elsewhere is printed above the prompt, never over it, and the prompt
stays up while a turn runs so typing ahead is kept. Ctrl-C, raw mode, queued input and the keys
are in docs/architecture.md, "The chat's line editor"."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TextIO

from prompt_toolkit import PromptSession
from prompt_toolkit.application import run_in_terminal
from prompt_toolkit.application.current import set_app
from prompt_toolkit.filters import Condition
from prompt_toolkit.history import FileHistory
from prompt_toolkit.key_binding import KeyBindings

from orchestrator.base import blocking

__all__ = ["LEAVING_AFTER_TURN", "LineEditor"]

LEAVING_AFTER_TURN = "  ⏏ leaving once this turn ends: waiting for the turn to finish (Ctrl-C interrupts it)"


class LineEditor:
    def __init__(self, history_path: Path, out: TextIO) -> None:
        self.history_path = history_path
        self.out = out
        self.status = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name="reverie-line-editor", daemon=True)
        self._session: Any = None
        self._reading = False
        self._busy = False
        self._queued = False
        """Enter was pressed during a turn: send the line when it ends (read and set on the editor's loop)."""
        self.leave_after_turn = False
        """Ctrl-D was pressed during a turn: the REPL leaves when it ends (set on the editor's loop)."""
        self.busy_status: Callable[[], str] = lambda: ""
        self._partial = ""
        self._message = ""
        self._shows: set[asyncio.Task[None]] = set()
        """Output on its way above the prompt (``run_in_terminal`` waits its turn): an entry is sent
        only after it, or the output of a turn would land below the command typed after it."""

    @property
    def busy(self) -> bool:
        """A turn (or a command) runs: Enter queues the typed text, Ctrl-C interrupts."""
        return self._busy

    @busy.setter
    def busy(self, value: bool) -> None:
        self._busy = value
        if not value and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._send_queued)

    # lifetime (called from the session's thread)

    def start(self) -> LineEditor:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._make_session(), self._loop).result()
        return self

    def close(self) -> None:
        """End a prompt still shown (its terminal mode is restored by prompt_toolkit), then the loop."""
        if not self._thread.is_alive():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout=5)
        except Exception:  # a stuck prompt must not keep the process from leaving
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def __enter__(self) -> LineEditor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # reading

    async def read(self, message: str) -> str | None:
        """One entry (possibly several lines); None at end of input (Ctrl-D)."""
        return await self.entry(self.show_prompt(message))

    def show_prompt(self, message: str) -> Future[str | None]:
        """Put the prompt up now (the REPL does so before a turn starts, so typing ahead goes into
        the input line); ``entry`` waits for what is entered."""
        future: Future[str | None] = asyncio.run_coroutine_threadsafe(self._prompt(message), self._loop)
        self._reading = True
        future.add_done_callback(lambda _: setattr(self, "_reading", False))
        return future

    async def entry(self, future: Future[str | None]) -> str | None:
        try:
            return await blocking.run_sync("wait", future.result)
        except BaseException:
            self._loop.call_soon_threadsafe(self._abort)
            raise

    def stream(self, text: str) -> None:
        """Streamed output while the prompt is up: whole lines above it, an unfinished line just
        above the input; written directly when no prompt is shown."""
        if not self._reading:
            self._write_raw(text)
            return
        self._loop.call_soon_threadsafe(self._stream, text)

    def invalidate(self) -> None:
        """Redraw the prompt (the toolbar's spinner moves)."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._invalidate)

    def notice(self, text: str) -> bool:
        """Print ``text`` above the prompt if one is being read (True); False: print it yourself."""
        if not self._reading:
            return False
        self._loop.call_soon_threadsafe(self._show, text)
        return True

    def set_status(self, text: str) -> None:
        if text == self.status:
            return
        self.status = text
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._invalidate)

    # on the editor's loop

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    async def _make_session(self) -> None:
        self.history_path.parent.mkdir(parents=True, exist_ok=True)
        self._session = PromptSession(
            history=FileHistory(str(self.history_path)),
            key_bindings=_bindings(self),
            bottom_toolbar=self._toolbar,
            prompt_continuation=lambda width, line_number, wrap_count: "… ".rjust(width),
            enable_suspend=True,
        )

    async def _prompt(self, message: str) -> str | None:
        self._message = message
        try:
            return str(await self._session.prompt_async(self._prompt_message))
        except EOFError:
            return None

    def _prompt_message(self) -> str:
        return f"{self._partial}\n{self._message}" if self._partial else self._message

    async def _shutdown(self) -> None:
        """End a prompt still shown and let its task finish, so nothing is left pending."""
        self._abort()
        others = [t for t in asyncio.all_tasks(self._loop) if t is not asyncio.current_task()]
        if others:
            await asyncio.wait(others, timeout=2)

    def _toolbar(self) -> str:
        if not self.busy:
            return self.status
        queued = " ⏎ queued ·" if self._queued else ""
        return f" {self.busy_status()} ·{queued}{self.status}"

    def _queue(self, queued: bool) -> None:
        self._queued = queued
        self._invalidate()

    def _send_queued(self) -> None:
        """The turn has ended: an entry queued with Enter during it is sent now."""
        if not self._queued:
            return
        self._queued = False
        app = self._running_app()
        if app is not None:
            self._submit(app.current_buffer)

    def _submit(self, buffer: Any) -> None:
        """Send the entry once the output before it is printed above the prompt."""
        pending = set(self._shows)

        async def submit() -> None:
            if pending:
                await asyncio.wait(pending)
            app = self._running_app()
            if app is not None and not app.future.done():
                buffer.validate_and_handle()

        if pending:
            self._loop.create_task(submit())
        else:
            buffer.validate_and_handle()

    def _stream(self, text: str) -> None:
        done, newline, rest = (self._partial + text).rpartition("\n")
        self._partial = rest
        if newline:
            self._show(done + "\n")
        self._invalidate()

    def _running_app(self) -> Any:
        app = self._session.app if self._session is not None else None
        return app if app is not None and app.is_running else None

    def _abort(self) -> None:
        app = self._running_app()
        if app is not None and not app.future.done():
            app.exit(exception=EOFError())

    def _invalidate(self) -> None:
        app = self._running_app()
        if app is not None:
            app.invalidate()

    def _show(self, text: str) -> None:
        app = self._running_app()
        if app is None:
            self._write(text)
            return

        async def show() -> None:
            with set_app(app):
                await run_in_terminal(lambda: self._write(text))

        task = self._loop.create_task(show())
        self._shows.add(task)
        task.add_done_callback(self._shows.discard)

    def _write(self, text: str) -> None:
        self._write_raw(text if text.endswith("\n") else text + "\n")

    def _write_raw(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()


def _bindings(editor: LineEditor) -> Any:
    kb = KeyBindings()
    busy = Condition(lambda: editor.busy)

    @kb.add("c-c", filter=busy)
    def _interrupt(event: Any) -> None:
        editor._queue(False)
        os.kill(os.getpid(), signal.SIGINT)

    @kb.add("c-c", filter=~busy)
    def _clear(event: Any) -> None:
        event.current_buffer.reset()

    @kb.add("c-d", filter=busy)
    def _after_the_turn(event: Any) -> None:
        """Ctrl-D during a turn leaves once the turn ends (L2), never in the middle of it, and says so."""
        if not editor.leave_after_turn:
            editor.leave_after_turn = True
            editor._show(LEAVING_AFTER_TURN)

    @kb.add("escape", "enter")
    def _newline(event: Any) -> None:
        event.current_buffer.insert_text("\n")

    @kb.add("enter")
    def _enter(event: Any) -> None:
        buffer = event.current_buffer
        if buffer.document.text_before_cursor.endswith("\\") and buffer.document.is_cursor_at_the_end:
            buffer.delete_before_cursor(1)
            buffer.insert_text("\n")
        elif editor.busy:
            editor._queue(bool(buffer.text.strip()))
        else:
            editor._submit(buffer)

    return kb

