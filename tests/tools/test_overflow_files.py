"""Overflow files (COMPACTION-7.5, D6): a long tool output is written in full by reverie
under ``$REVERIE_HOME``, the cut result names the file, and ``read_file`` reads it back in pieces
(a read-only root: nothing may write there)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import anyio
import pytest

from orchestrator.app.session import ChatSession
from orchestrator.base.paths import reverie_home
from orchestrator.models.scripted import ScriptedModel
from orchestrator.models.types import Message, ModelRequest, ModelResponse, ToolCall

_PATH = re.compile(r"\[Full output written to: (.+?)\]")
_SEQ = "seq 1 9000"


def _call(name: str, **args: object) -> ModelResponse:
    return ModelResponse(
        Message("assistant", "", tool_calls=(ToolCall(f"call-{name}-{len(args)}", name, json.dumps(args)),)),
        finish_reason="tool_calls",
    )


def _last_tool(request: ModelRequest) -> str:
    return next(m.content for m in reversed(request.messages) if m.role == "tool")


def _read_overflow(request: ModelRequest) -> ModelResponse:
    found = _PATH.search(_last_tool(request))
    assert found is not None, "the cut result names its overflow file"
    return _call("read_file", path=found.group(1), offset=4000, limit=3)


def _write_overflow(request: ModelRequest) -> ModelResponse:
    path = next(
        _PATH.search(m.content).group(1)  # type: ignore[union-attr]
        for m in request.messages
        if m.role == "tool" and _PATH.search(m.content)
    )
    return _call("write_file", path=path, content="overwritten")


@pytest.mark.anyio
async def test_long_bash_output_round_trips_through_an_overflow_file(tmp_path: Path) -> None:
    script = [
        _call("bash", command=_SEQ),
        _read_overflow,
        _write_overflow,
        ModelResponse(Message("assistant", "done")),
    ]
    async with ChatSession.open(
        agent_id="overflow", model=ScriptedModel(script), workspace=tmp_path, cli={"context_window": 100_000}
    ) as chat:
        outcome = await chat.send("count")
        assert outcome.status == "end_turn"
        results = [m.message for m in await chat.runtime.store.transcript(chat.conversation_id, 0) if m.message.role == "tool"]
    cut, piece, refused = (r.content for r in results)
    assert len(cut) < 32_000 and "characters omitted" in cut
    path = Path(_PATH.search(cut).group(1))  # type: ignore[union-attr]
    assert path.is_relative_to(reverie_home()) and path.name.startswith("bash-")
    full = await anyio.Path(path).read_text()
    assert full == "\n".join(str(i) for i in range(1, 9001))
    assert piece.splitlines() == ["  4000\t4000", "  4001\t4001", "  4002\t4002"]
    assert "read-only" in refused and await anyio.Path(path).read_text() == full


@pytest.mark.anyio
async def test_overflow_files_can_be_switched_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVERIE_TOOL_OVERFLOW_TO_FILE", "false")
    monkeypatch.setenv("REVERIE_TOOL_MIDDLE_TRUNCATE", "false")
    script = [_call("bash", command=_SEQ), ModelResponse(Message("assistant", "done"))]
    async with ChatSession.open(agent_id="nofiles", model=ScriptedModel(script), workspace=tmp_path) as chat:
        await chat.send("count")
        results = [m.message for m in await chat.runtime.store.transcript(chat.conversation_id, 0) if m.message.role == "tool"]
    assert "[Full output written to" not in results[0].content
    assert results[0].content.startswith("1\n2\n3") and "characters omitted" not in results[0].content
    assert not await anyio.Path(reverie_home() / "projects").exists()
