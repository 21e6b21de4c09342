"""D12: a total time and a size cap per model request, each a transient failure under the
retry policy, against the loopback server (real SDK, real HTTP)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from orchestrator.models import Message, ModelError, ModelRequest, OpenAIModel
from orchestrator.testing.openai_server import LoopbackOpenAI, Planned, PlannedToolCall, text_reply
from tests.support import SleepRecorder

pytestmark = pytest.mark.anyio


@pytest.fixture
def server() -> Iterator[LoopbackOpenAI]:
    with LoopbackOpenAI() as loopback:
        yield loopback


def _model(server: LoopbackOpenAI, sleep: SleepRecorder, **options: float) -> OpenAIModel:
    return OpenAIModel(base_url=server.base_url, model="m", sleep=sleep, max_attempts=3, **options)  # type: ignore[arg-type]


def _ask() -> ModelRequest:
    return ModelRequest(system="s", messages=(Message("user", "talk"),))


def endless(text: str = "tick ") -> Planned:
    """A stream that keeps sending well within the idle timeout and would take minutes to end."""
    return Planned(text=text * 20_000, chunk_size=5, chunk_delay=0.02)


async def test_endless_stream_is_cut_by_request_timeout_each_attempt(server: LoopbackOpenAI) -> None:
    server.enqueue(endless(), endless(), endless())
    sleep = SleepRecorder()
    shown: list[str] = []

    async def sink(text: str) -> None:
        shown.append(text)

    started = time.monotonic()
    with pytest.raises(ModelError) as caught:
        await _model(server, sleep, request_timeout=0.6, idle_timeout=5).complete(_ask(), on_text=sink)
    elapsed = time.monotonic() - started
    error = caught.value
    assert error.transient
    assert "(request_timeout)" in str(error) and "gave up after 3 attempts" in str(error)
    assert "\n" not in str(error)
    assert len(server.chat_bodies) == 3 and sleep.delays == [1.0, 2.0]
    assert 1.8 <= elapsed < 10
    assert error.partial_text.startswith("tick tick")
    assert error.partial_text.endswith("[response cut: no end after 0.6 s (request_timeout)]")
    assert "".join(shown).startswith("tick tick")


async def test_oversized_answer_is_cut_at_the_cap_and_retried(server: LoopbackOpenAI) -> None:
    huge = "x" * 200_000
    server.enqueue(Planned(text=huge, chunk_size=4096), Planned(text=huge, chunk_size=4096), text_reply("short"))
    sleep = SleepRecorder()
    response = await _model(server, sleep, max_response_chars=10_000).complete(_ask())
    assert response.message.content == "short"
    assert len(server.chat_bodies) == 3 and sleep.delays == [1.0, 2.0]


async def test_oversized_answer_keeps_at_most_the_cap(server: LoopbackOpenAI) -> None:
    huge = "y" * 200_000
    server.enqueue(*(Planned(text=huge, chunk_size=3000) for _ in range(3)))
    with pytest.raises(ModelError) as caught:
        await _model(server, SleepRecorder(), max_response_chars=10_000).complete(_ask())
    partial = caught.value.partial_text
    assert "exceeded 10,000 characters (max_response_chars)" in str(caught.value)
    assert partial.count("y") == 10_000
    assert partial.endswith("[response cut at 10,000 characters (max_response_chars)]")


async def test_oversized_tool_arguments_count_toward_the_cap(server: LoopbackOpenAI) -> None:
    call = PlannedToolCall("bash", '{"command": "' + "z" * 50_000 + '"}')
    server.enqueue(*(Planned(tool_calls=(call,), chunk_size=1000) for _ in range(3)))
    with pytest.raises(ModelError) as caught:
        await _model(server, SleepRecorder(), max_response_chars=5_000).complete(_ask())
    assert "(max_response_chars)" in str(caught.value)


async def test_answers_under_both_bounds_are_untouched(server: LoopbackOpenAI) -> None:
    server.enqueue(Planned(text="a" * 9_999, chunk_size=500))
    response = await _model(server, SleepRecorder(), max_response_chars=9_999, request_timeout=30).complete(_ask())
    assert response.message.content == "a" * 9_999
