"""Every example in docs/api.md runs as written, in an empty directory, on the scripted model, and
prints what the ``text`` block under it shows; every type the page names is one ``orchestrator``
exports, and the session's members return the types the page says."""

from __future__ import annotations

import builtins
import inspect
import re
import typing
from pathlib import Path

import pytest

import orchestrator

DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"
TEXT = DOC.read_text(encoding="utf-8")
EXAMPLES = re.findall(r"```python\n(.*?)```(?:\s*```text\n(.*?)```)?", TEXT, re.DOTALL)
MEMBER = re.compile(r"^\| `(\w+)\([^`]*\) -> (\w+)` \|", re.M)


def _matches(expected: str, printed: str) -> bool:
    """Line by line; ``…`` stands for any text within a line, or alone on a line for any lines."""
    parts = [
        r"(?:[^\n]*\n)*?" if line == "…" else "[^\n]*".join(re.escape(p) for p in line.split("…")) + r"\n"
        for line in expected.splitlines()
    ]
    return re.fullmatch("".join(parts), printed) is not None


def test_the_document_has_an_example_per_function_and_each_shows_its_output() -> None:
    text = "\n".join(source for source, _ in EXAMPLES)
    for name in ("open_session", "load_effective_settings", "run_suite", "sweep", "stress", "report"):
        assert name in text, name
    assert all(output for _, output in EXAMPLES), "every example is followed by the text it prints"


@pytest.mark.parametrize(("source", "output"), EXAMPLES, ids=[f"example-{i}" for i in range(len(EXAMPLES))])
def test_the_example_prints_what_the_page_says(
    source: str, output: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(source, f"{DOC.name} example", "exec"), {"__name__": "__main__"})
    printed = capsys.readouterr().out
    assert _matches(output, printed), f"the page says:\n{output}\nthe example printed:\n{printed}"


def test_every_type_the_page_names_is_exported() -> None:
    named = set(re.findall(r"`([A-Z][A-Za-z]+)`", TEXT)) | {t for _, t in MEMBER.findall(TEXT)}
    named -= {"None"}
    assert named, "the page names types"
    for name in sorted(named):
        if isinstance(getattr(builtins, name, None), type):
            continue
        assert name in orchestrator.__all__ and isinstance(getattr(orchestrator, name), type), name


@pytest.mark.parametrize(("member", "returns"), MEMBER.findall(TEXT))
def test_a_session_member_returns_the_type_the_page_names(member: str, returns: str) -> None:
    hints = typing.get_type_hints(getattr(orchestrator.Session, member))
    answer = hints["return"]
    names = {getattr(a, "__name__", repr(a)) for a in typing.get_args(answer)} or {getattr(answer, "__name__", "")}
    assert returns in names or (returns == "None" and answer is type(None)), (member, answer)
    assert inspect.iscoroutinefunction(getattr(orchestrator.Session, member))


@pytest.mark.parametrize(
    ("expected", "printed", "verdict"),
    [
        ("a\nb\n", "a\nb\n", True),
        ("a …\n", "a 12\n", True),
        ("a\n…\nz\n", "a\nb\nc\nz\n", True),
        ("a\n…\nz\n", "a\nz\n", True),
        ("a\nb\n", "a\nc\n", False),
        ("a\n", "a\nb\n", False),
    ],
)
def test_the_output_pattern(expected: str, printed: str, verdict: bool) -> None:
    assert _matches(expected, printed) is verdict
