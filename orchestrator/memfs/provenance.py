"""Who made a memory commit and why, written into the commit itself as git trailers (H1).

Every commit reverie makes or carries ends with a block of ``Reverie-*`` trailers: its source
(:data:`SOURCES`), the agent, and as far as they apply the conversation, turn, reflection and its
trigger, the batch run and task, and for an undo the changes it takes back. Plain ``git log``
(``%(trailers:key=Reverie-Source)``) answers "who and why" without reverie; a commit without the
block was made outside reverie and reads as ``outside``. The compiler reads trees only, so no
trailer reaches a prompt.

How a writer gets them: the agent's ``git commit`` through the wrapper on its ``PATH``
(``memfs.gitwrap`` adds ``--trailer`` options from :data:`TRAILERS_ENV`, so the agent's message is
untouched and the pre-commit hook still runs); reverie's own commits through
:func:`with_trailers`; a batch task's run and task ids through :func:`scoped`, a context
variable its turns read when they build their tools' environment.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Final

__all__ = [
    "OUTSIDE",
    "SOURCES",
    "SOURCE_KEY",
    "TRAILERS_ENV",
    "Provenance",
    "body",
    "parse",
    "scoped",
    "scoped_trailers",
    "trailer_args",
    "trailers_env",
    "with_trailers",
]

TRAILERS_ENV: Final = "REVERIE_TRAILERS"
"""The tool environment's variable holding a command's trailers, one ``Key: value`` a line."""

OUTSIDE: Final = "outside"
SOURCES: Final = ("agent", "reflection", "resolver", "undo", "restore", "init", "stress", OUTSIDE)
"""Every writer a commit can be attributed to; ``outside`` is a commit with no ``Reverie-Source``."""

SOURCE_KEY: Final = "Reverie-Source"

_KEYS: Final = {
    "source": "Reverie-Source",
    "agent": "Reverie-Agent",
    "conversation": "Reverie-Conversation",
    "turn": "Reverie-Turn",
    "reflection": "Reverie-Reflection",
    "trigger": "Reverie-Trigger",
    "run": "Reverie-Run",
    "task": "Reverie-Task",
    "undoes": "Reverie-Undoes",
}
_BY_KEY: Final = {key.lower(): name for name, key in _KEYS.items()}
_TRAILER = re.compile(r"^([A-Za-z0-9][A-Za-z0-9-]*)\s*:\s*(.*)$")
_SCOPE: ContextVar[Mapping[str, str]] = ContextVar("reverie_provenance_scope", default=MappingProxyType({}))


@dataclass(frozen=True)
class Provenance:
    """What a commit's ``Reverie-*`` trailers say; ``source`` is ``outside`` when it has none."""

    source: str = OUTSIDE
    agent: str | None = None
    conversation: str | None = None
    turn: str | None = None
    reflection: str | None = None
    trigger: str | None = None
    run: str | None = None
    task: str | None = None
    undoes: str | None = None

    def trailers(self) -> tuple[tuple[str, str], ...]:
        """``(key, value)`` for each field set, in a fixed order (nothing for ``outside``)."""
        if self.source == OUTSIDE:
            return ()
        pairs = ((_KEYS[f.name], getattr(self, f.name)) for f in fields(self))
        return tuple((key, _clean(value)) for key, value in pairs if value)

    def as_dict(self) -> dict[str, str]:
        """The fields set, by name (``source`` always): what ``--json`` prints."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) or f.name == "source"}


def _clean(value: str) -> str:
    return " ".join(str(value).split())[:200]


def parse(message: str) -> Provenance:
    """The provenance in ``message``'s last paragraph (git's trailer block); later trailers of a
    key win, as a resolver's ``Reverie-Source`` replaces the reflection's it reconciled."""
    paragraphs = [p for p in message.strip().split("\n\n") if p.strip()]
    if len(paragraphs) < 2:
        return Provenance()
    found: dict[str, str] = {}
    for line in paragraphs[-1].splitlines():
        match = _TRAILER.match(line.strip())
        if match and (name := _BY_KEY.get(match.group(1).lower())) is not None:
            found[name] = match.group(2).strip()
    if "source" not in found:
        return Provenance()
    return Provenance(**found)


def body(message: str) -> str:
    """``message`` without its ``Reverie-*`` trailer block: what its writer wrote."""
    head, sep, last = message.rstrip("\n").rpartition("\n\n")
    if sep and last.strip() and all(line.lower().startswith("reverie-") for line in last.strip().splitlines()):
        return head + "\n"
    return message


def with_trailers(message: str, provenance: Provenance) -> str:
    """``message`` with ``provenance``'s trailers as its last paragraph (reverie's own commits)."""
    block = "\n".join(f"{key}: {value}" for key, value in provenance.trailers())
    body = message.rstrip("\n")
    return f"{body}\n\n{block}\n" if block else f"{body}\n"


def trailer_args(provenance: Provenance) -> list[str]:
    """``--trailer`` options giving a ``git commit`` ``provenance``'s trailers."""
    return [arg for key, value in provenance.trailers() for arg in ("--trailer", f"{key}: {value}")]


def trailers_env(provenance: Provenance) -> dict[str, str]:
    """The tool environment that makes the git wrapper add ``provenance``'s trailers to a commit,
    with the run and task of the enclosing :func:`scoped` block."""
    scope = _SCOPE.get()
    merged = Provenance(**{**provenance.as_dict(), **{k: v for k, v in scope.items() if not getattr(provenance, k)}})
    return {TRAILERS_ENV: "\n".join(f"{key}: {value}" for key, value in merged.trailers())}


def scoped_trailers() -> Mapping[str, str]:
    """The fields (``run``, ``task``) the enclosing :func:`scoped` block adds to every commit."""
    return _SCOPE.get()


@contextmanager
def scoped(**values: str) -> Iterator[None]:
    """Within the block (and the tasks it starts), every agent and reflection commit also carries
    ``values`` (a batch task's ``run`` and ``task``)."""
    unknown = set(values) - set(_KEYS)
    if unknown:
        raise ValueError(f"unknown provenance field(s): {', '.join(sorted(unknown))}")
    token = _SCOPE.set({**_SCOPE.get(), **{k: v for k, v in values.items() if v}})
    try:
        yield
    finally:
        _SCOPE.reset(token)
