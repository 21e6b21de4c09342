"""``reverie compact``, the chat's ``/compact`` and the library's ``Session.compact`` are one
implementation: each reaches ``ChatSession.compact`` (which takes the turn lock and runs the
session's compactor), so what one of them does the others do too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from orchestrator.api import open_session
from orchestrator.app.session import ChatSession
from orchestrator.cli.chat_slash import Slash
from orchestrator.cli.compact import compact
from orchestrator.cli.render import compaction_line
from orchestrator.compaction.result import CompactionResult


@pytest.fixture
def compactions(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any, CompactionResult]]:
    """Every ``ChatSession.compact`` call: the conversation, the mode and the result (it still runs)."""
    seen: list[tuple[str, Any, CompactionResult]] = []
    original = ChatSession.compact

    async def recorded(self: ChatSession, *, mode: Any = None) -> CompactionResult:
        result = await original(self, mode=mode)
        seen.append((self.conversation_id, mode, result))
        return result

    monkeypatch.setattr(ChatSession, "compact", recorded)
    return seen


def test_the_command_the_slash_command_and_the_library_compact_through_the_session(
    tmp_path: Path, compactions: list[tuple[str, Any, CompactionResult]], capsys: pytest.CaptureFixture[str]
) -> None:
    async def chat() -> tuple[str, list[str]]:
        said: list[str] = []
        async with ChatSession.open(agent_id="one", workspace=tmp_path) as session:
            for text in ("I like green tea", "and long walks", "and the sea"):
                await session.send(text)
            assert await Slash(session, said.append).run("/compact") is False
            return session.conversation_id, said

    conversation, said = anyio.run(chat, backend="trio")
    compact(agent="one", conversation=conversation, mode="all", context_window=None)
    printed = capsys.readouterr().out.strip()

    async def library() -> CompactionResult:
        async with open_session("one", conversation) as session:
            return await session.compact(mode="sliding_window")

    anyio.run(library, backend="trio")
    assert [(c, m) for c, m, _ in compactions] == [(conversation, None), (conversation, "all"), (conversation, "sliding_window")]
    assert all(result.trigger == "manual" for _, _, result in compactions)
    assert said[-1] == compaction_line(compactions[0][2]) and printed == compaction_line(compactions[1][2])
