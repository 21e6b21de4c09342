"""A setting whose value is one of a few names, declared once with every name it allows.

Each such setting (reflection trigger, compaction mode, merge policy, sandbox mode, output format)
is one ``Choices`` value next to the setting it belongs to, and every reader of the setting (the
config file, the environment, flags, suite files, sweeps, the library) parses through it, so a
name is spelled in one place and every refusal says the same thing: the allowed values. A choice
may take an argument after a colon (``step-count:N``); ``into`` names the setting the argument sets,
and that setting's own parser checks it (docs/architecture.md, "Settings and their values").
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.base.errors import ReverieError

__all__ = ["BadValue", "Choice", "Choices"]


class BadValue(ReverieError, ValueError):
    """A value a setting does not take; the message is the reason alone (``use off, ...``), so each
    reader puts in front where the value was written (a file key, a flag, a parameter)."""


@dataclass(frozen=True)
class Choice:
    """One allowed name. ``argument`` is what it takes after a colon, as the user reads it (``N``,
    ``SECONDS``); ``into`` the setting that argument sets. Without ``argument`` it takes none."""

    name: str
    argument: str = ""
    into: str = ""

    @property
    def spelled(self) -> str:
        """How help texts and errors write it: ``off``, ``step-count:N``."""
        return f"{self.name}:{self.argument}" if self.argument else self.name


@dataclass(frozen=True)
class Choices:
    """The allowed names of one setting, in the order help and errors list them."""

    values: tuple[Choice, ...]

    @classmethod
    def of(cls, *names: str) -> Choices:
        """Names that take no argument."""
        return cls(tuple(Choice(name) for name in names))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(choice.name for choice in self.values)

    def allowed(self) -> str:
        """``off, compaction-event or step-count:N``: the one list every refusal names."""
        spelled = [choice.spelled for choice in self.values]
        return spelled[0] if len(spelled) == 1 else f"{', '.join(spelled[:-1])} or {spelled[-1]}"

    def parse(self, value: str) -> tuple[Choice, str | None]:
        """The choice ``value`` names and its argument text (None when it has none); ``BadValue``
        naming the allowed values when it names none, or gives an argument to a choice without one."""
        name, colon, argument = value.strip().partition(":")
        for choice in self.values:
            if choice.name == name and (not colon or choice.argument):
                return choice, argument.strip() if colon else None
        raise BadValue(f"use {self.allowed()}")

    def by_argument(self, into: str) -> Choice | None:
        """The choice whose argument sets ``into`` (``reflection_step_count`` -> ``step-count``)."""
        return next((choice for choice in self.values if choice.into == into), None)
