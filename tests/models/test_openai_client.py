"""OpenAIModel against the loopback server: the real SDK and HTTP stack, never a patched SDK."""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial

import anyio
import anyio.to_thread
import pytest

from orchestrator.models import (
    Message,
    ModelError,
    ModelRequest,
    OpenAIModel,
    ScriptedModel,
    ToolCall,
    ToolSpec,
    model_from_settings,
    resolve_model_client,
)
from orchestrator.testing.openai_server import (
    LoopbackOpenAI,
    Planned,
    PlannedToolCall,
    context_overflow,
    cut_off,
    http_error,
    rate_limited,
    server_error,
    stall,
    text_reply,
    tool_call_reply,
)
from tests.support import SleepRecorder, wait_until

pytestmark = pytest.mark.anyio

BASH = ToolSpec(
    "bash", "Run a shell command", {"type": "object", "properties": {"command": {"type": "string"}}}
)


@pytest.fixture
def server() -> Iterator[LoopbackOpenAI]:
    with LoopbackOpenAI() as loopback:
        yield loopback


def make_model(server: LoopbackOpenAI, sleep: SleepRecorder | None = None, **options: float) -> OpenAIModel:
    return OpenAIModel(
        base_url=server.base_url,
        api_key="sk-test",
        model="test-model",
        sleep=sleep or SleepRecorder(),
        **options,  # type: ignore[arg-type]
    )


def ask(text: str = "hi", **options: object) -> ModelRequest:
    return ModelRequest(system="You are terse.", messages=(Message("user", text),), **options)  # type: ignore[arg-type]


async def test_plain_completion_sends_system_and_model(server: LoopbackOpenAI) -> None:
    server.enqueue(text_reply("hello there", usage=(12, 3)))
    response = await make_model(server).complete(ask("hi"))
    assert response.message == Message("assistant", "hello there")
    assert response.finish_reason == "stop"
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (12, 3)
    body = server.chat_bodies[0]
    assert body["model"] == "test-model"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "hi"},
    ]
    assert server.requests[0].headers["authorization"] == "Bearer sk-test"


async def test_streamed_text_reaches_on_text_in_pieces(server: LoopbackOpenAI) -> None:
    server.enqueue(text_reply("streaming works fine", chunk_size=3))
    pieces: list[str] = []

    async def sink(text: str) -> None:
        pieces.append(text)

    response = await make_model(server).complete(ask(), on_text=sink)
    assert len(pieces) > 3
    assert "".join(pieces) == response.message.content == "streaming works fine"


async def test_missing_usage_is_zero(server: LoopbackOpenAI) -> None:
    server.enqueue(text_reply("ok", report_usage=False))
    response = await make_model(server).complete(ask())
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (0, 0)


async def test_tool_call_is_assembled_and_tools_are_sent(server: LoopbackOpenAI) -> None:
    arguments = json.dumps({"command": 'git -C "$MEMORY_DIR" log --oneline -3'})
    server.enqueue(tool_call_reply("bash", arguments, id="call_abc", chunk_size=5))
    response = await make_model(server).complete(ask("log please", tools=(BASH,), tool_choice="auto"))
    assert response.finish_reason == "tool_calls"
    assert response.message.tool_calls == (ToolCall("call_abc", "bash", arguments),)
    body = server.chat_bodies[0]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "bash",
                "description": BASH.description,
                "parameters": dict(BASH.parameters),
            },
        }
    ]
    assert body["tool_choice"] == "auto"


async def test_a_function_name_as_tool_choice_forces_that_function(server: LoopbackOpenAI) -> None:
    server.enqueue(tool_call_reply("bash", "{}"))
    await make_model(server).complete(ask("log please", tools=(BASH,), tool_choice="bash"))
    assert server.chat_bodies[0]["tool_choice"] == {"type": "function", "function": {"name": "bash"}}


@pytest.mark.parametrize("style", ["repeat", "no_index"])
async def test_repeated_or_unindexed_deltas_make_one_call_per_tool(
    server: LoopbackOpenAI, style: str
) -> None:
    calls = (
        PlannedToolCall("bash", '{"command": "echo one two three"}', "call_1"),
        PlannedToolCall("conversation_search", '{"query": "pnpm"}', "call_2"),
    )
    server.enqueue(Planned(tool_calls=calls, tool_call_style=style, chunk_size=4))
    response = await make_model(server).complete(ask(tools=(BASH,)))
    assert response.message.tool_calls == (
        ToolCall("call_1", "bash", '{"command": "echo one two three"}'),
        ToolCall("call_2", "conversation_search", '{"query": "pnpm"}'),
    )


async def test_malformed_arguments_pass_through_verbatim(server: LoopbackOpenAI) -> None:
    broken = '{"command": "ls -la", '
    server.enqueue(tool_call_reply("bash", broken))
    response = await make_model(server).complete(ask(tools=(BASH,)))
    assert response.message.tool_calls[0].arguments == broken


async def test_replayed_tool_call_message_has_empty_string_content(server: LoopbackOpenAI) -> None:
    server.enqueue(text_reply("done"))
    history = (
        Message("user", "list files"),
        Message("assistant", "", tool_calls=(ToolCall("call_7", "bash", '{"command": "ls"}'),)),
        Message("tool", "a.txt", tool_call_id="call_7", name="bash"),
        Message("user", "<system-reminder>\nnote\n</system-reminder>", kind="reminder"),
    )
    await make_model(server).complete(ModelRequest(system="", messages=history, tools=(BASH,)))
    sent = server.chat_bodies[0]["messages"]
    assert sent[1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_7",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"command": "ls"}'},
            }
        ],
    }
    assert sent[2] == {"role": "tool", "content": "a.txt", "tool_call_id": "call_7"}
    assert sent[3]["role"] == "user"
    assert sent[0]["role"] == "user", "an empty system prompt is not sent"


async def test_429_waits_for_retry_after_then_succeeds(server: LoopbackOpenAI) -> None:
    server.enqueue(rate_limited(7), text_reply("after the wait"))
    sleep = SleepRecorder()
    response = await make_model(server, sleep).complete(ask())
    assert response.message.content == "after the wait"
    assert sleep.delays == [7.0]
    assert len(server.chat_bodies) == 2


async def test_persistent_500_gives_up_after_max_attempts(server: LoopbackOpenAI) -> None:
    server.enqueue(*[server_error("upstream exploded\nbadly")] * 3)
    sleep = SleepRecorder()
    with pytest.raises(ModelError) as caught:
        await make_model(server, sleep, max_attempts=3).complete(ask())
    error = caught.value
    assert error.transient and error.status == 500 and not error.context_overflow
    assert "\n" not in str(error)
    assert str(error).startswith(f"model error: HTTP 500 from {server.base_url}: upstream exploded badly")
    assert "3 attempts" in str(error)
    assert len(server.chat_bodies) == 3
    assert sleep.delays == [1.0, 2.0], "exponential backoff without Retry-After"


async def test_401_is_not_retried_and_reads_as_one_line(server: LoopbackOpenAI) -> None:
    server.enqueue(http_error(401, "Incorrect API key provided"), text_reply("never sent"))
    sleep = SleepRecorder()
    with pytest.raises(ModelError) as caught:
        await make_model(server, sleep).complete(ask())
    assert str(caught.value) == f"model error: HTTP 401 from {server.base_url}: Incorrect API key provided"
    assert not caught.value.transient and caught.value.status == 401
    assert len(server.chat_bodies) == 1 and sleep.delays == []


async def test_context_overflow_is_flagged_and_not_retried(server: LoopbackOpenAI) -> None:
    server.enqueue(context_overflow(4096, 9000))
    with pytest.raises(ModelError) as caught:
        await make_model(server).complete(ask())
    assert caught.value.context_overflow and not caught.value.transient
    assert "maximum context length is 4096" in str(caught.value)
    assert len(server.chat_bodies) == 1


async def test_stalled_stream_hits_idle_timeout_and_is_retried(server: LoopbackOpenAI) -> None:
    server.enqueue(stall(after=2, seconds=10), stall(after=2, seconds=10))
    sleep = SleepRecorder()
    with anyio.fail_after(8):
        with pytest.raises(ModelError) as caught:
            await make_model(server, sleep, idle_timeout=0.3, max_attempts=2).complete(ask())
    assert caught.value.transient
    assert "stream idle timeout" in str(caught.value)
    assert len(server.chat_bodies) == 2 and sleep.delays == [1.0]


async def test_slow_but_steady_stream_is_not_an_idle_timeout(server: LoopbackOpenAI) -> None:
    server.enqueue(text_reply("slow and steady", chunk_size=5, chunk_delay=0.1))
    response = await make_model(server, idle_timeout=0.5).complete(ask())
    assert response.message.content == "slow and steady"


async def test_cut_off_stream_is_retried_without_repeating_shown_text(server: LoopbackOpenAI) -> None:
    server.enqueue(cut_off("hello world", after=3), text_reply("hello world again"))
    pieces: list[str] = []

    async def sink(text: str) -> None:
        pieces.append(text)

    sleep = SleepRecorder()
    response = await make_model(server, sleep).complete(ask(), on_text=sink)
    assert response.message.content == "hello world again"
    assert "".join(pieces) == "hello world again"
    assert len(server.chat_bodies) == 2 and len(sleep.delays) == 1


async def test_connection_refused_is_transient(server: LoopbackOpenAI) -> None:
    model = OpenAIModel(base_url="http://127.0.0.1:9/v1", model="m", sleep=SleepRecorder(), max_attempts=2)
    with pytest.raises(ModelError) as caught:
        await model.complete(ask())
    assert caught.value.transient and "connection to http://127.0.0.1:9/v1 failed" in str(caught.value)


async def test_request_model_and_max_tokens_override(server: LoopbackOpenAI) -> None:
    server.enqueue(text_reply("ok"))
    await make_model(server).complete(ask(model="other-model", max_tokens=64))
    body = server.chat_bodies[0]
    assert body["model"] == "other-model" and body["max_tokens"] == 64


def test_resolve_model_client_prefers_explicit_then_env_then_config() -> None:
    assert isinstance(resolve_model_client(environ={}), ScriptedModel)
    env = {"REVERIE_BASE_URL": "http://127.0.0.1:1/v1", "REVERIE_MODEL": "env-model", "OPENAI_API_KEY": "k"}
    from_env = resolve_model_client(environ=env, config={"base_url": "http://127.0.0.1:2/v1", "model": "cfg"})
    assert isinstance(from_env, OpenAIModel)
    assert (from_env.base_url, from_env.model) == ("http://127.0.0.1:1/v1", "env-model")
    from_cfg = resolve_model_client(
        environ={}, config={"base_url": "http://127.0.0.1:2/v1", "model": "cfg", "idle_timeout": 5}
    )
    assert isinstance(from_cfg, OpenAIModel) and from_cfg.model == "cfg" and from_cfg.idle_timeout == 5
    explicit = resolve_model_client(base_url="http://127.0.0.1:3/v1", model="flag", environ=env)
    assert isinstance(explicit, OpenAIModel) and explicit.model == "flag"


def test_bad_settings_are_one_line_errors() -> None:
    with pytest.raises(ValueError, match="base_url must be an http"):
        model_from_settings("localhost:8080", None, "m")
    with pytest.raises(ValueError, match="no model name configured"):
        model_from_settings("http://127.0.0.1:8080/v1", None, "")


async def test_cancellation_is_not_retried_and_leaves_promptly(server: LoopbackOpenAI) -> None:
    server.enqueue(stall(after=2, seconds=10))
    sleep = SleepRecorder()
    scope = anyio.CancelScope()

    async def call() -> None:
        with scope:
            await make_model(server, sleep, idle_timeout=30).complete(ask())

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        await anyio.to_thread.run_sync(
            partial(wait_until, lambda: len(server.chat_bodies) == 1, timeout=60, what="the request at the server")
        )
        scope.cancel()
        cancelled_at = anyio.current_time()
    assert scope.cancelled_caught
    assert anyio.current_time() - cancelled_at < 5, "left at once, not after the server's 10 s stall"
    assert len(server.chat_bodies) == 1 and sleep.delays == []
