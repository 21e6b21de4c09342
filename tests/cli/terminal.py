"""A real terminal for chat tests: the program runs on a pty (pexpect) and its output is fed to a
VT100 emulator (pyte), which also answers cursor-position requests as a terminal does. Tests
wait for what the screen shows, so a notice drawn over the prompt line fails them."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pexpect
import pyte

__all__ = ["Terminal"]

ROWS, COLUMNS = 40, 140


class Terminal:
    def __init__(self, home: Path, **env: str) -> None:
        full_env = dict(os.environ, REVERIE_HOME=str(home), TERM="xterm", PS1="$ ", **env)
        full_env.pop("PYTHONDONTWRITEBYTECODE", None)
        self.child = pexpect.spawn(
            "bash", ["--norc", "--noprofile"], env=full_env, encoding="utf-8", timeout=30, dimensions=(ROWS, COLUMNS)
        )
        self.screen = pyte.Screen(COLUMNS, ROWS)
        self.stream = pyte.Stream(self.screen)
        self.screen.write_process_input = self.child.send

    def lines(self) -> list[str]:
        return [line.rstrip() for line in self.screen.display]

    def text(self) -> str:
        return "\n".join(self.lines())

    def pump(self, seconds: float = 0.1) -> None:
        end = time.monotonic() + seconds
        while True:
            try:
                self.stream.feed(self.child.read_nonblocking(65536, timeout=0.05))
            except pexpect.TIMEOUT:
                pass
            except pexpect.EOF:
                return
            if time.monotonic() >= end:
                return

    def wait(self, what: str | Callable[[str], bool], timeout: float = 120.0) -> str:
        test = (lambda text: what in text) if isinstance(what, str) else what
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.pump(0.05)
            text = self.text()
            if test(text):
                return text
        raise AssertionError(f"the screen never showed {what!r}:\n{self.text()}")

    def send(self, text: str) -> None:
        self.child.send(text)

    def line(self, text: str) -> None:
        self.child.send(text + "\r")

    def interrupt(self) -> None:
        self.child.sendintr()

    def close(self) -> None:
        self.child.close(force=True)
