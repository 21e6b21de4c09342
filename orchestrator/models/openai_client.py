"""The model seam over any OpenAI-compatible chat endpoint (OpenAI, llama.cpp, vLLM, ...).

The SDK is built with ``max_retries=0`` (S26) so tenacity owns retries and tests inject the sleep
(S25); calls always stream, and a silent stream (S20), a deadline or a size cap (D12) counts as one
transient failure. One module because it is the model seam's only importer of the SDK (STYLE habit
1), so stream assembly, the D12 bounds and the translation of every SDK failure stay in one place.
Each choice, and the worst-case time at defaults, is in docs/architecture.md, "The
OpenAI-compatible client"."""

from __future__ import annotations

import json
import os
import platform
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

import httpx2
import openai
from anyio import CancelScope, create_task_group, current_time, fail_after, move_on_after
from anyio import sleep as anyio_sleep

from orchestrator.base import blocking
from orchestrator.base.config import ConfigError
from orchestrator.base.errors import UsageError

from .types import (
    Message,
    ModelClient,
    ModelError,
    ModelRequest,
    ModelResponse,
    TextSink,
    ToolCall,
    Usage,
    is_context_overflow_text,
)

if TYPE_CHECKING:
    from tenacity import RetryCallState

__all__ = [
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_MAX_RESPONSE_CHARS",
    "DEFAULT_REQUEST_TIMEOUT",
    "OpenAIModel",
    "Sleep",
    "is_context_overflow_text",
    "model_from_settings",
    "resolve_model_client",
    "to_wire_messages",
]

DEFAULT_IDLE_TIMEOUT = 60.0
DEFAULT_REQUEST_TIMEOUT = 600.0
DEFAULT_MAX_RESPONSE_CHARS = 1_000_000
DEFAULT_MAX_ATTEMPTS = 4
_BACKOFF_BASE = 1.0
_BACKOFF_CAP = 60.0

Sleep = Callable[[float], Awaitable[None]]


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _server_message(body: object, fallback: str) -> str:
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping) and isinstance(inner.get("message"), str):
            return inner["message"]
        if isinstance(inner, str):
            return inner
        return json.dumps(body, ensure_ascii=False)
    if isinstance(body, str) and body:
        return body
    return fallback


def _parse_retry_after(headers: Mapping[str, str]) -> float | None:
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(raw).timestamp() - time.time())
    except (TypeError, ValueError, IndexError):
        return None


def to_wire_messages(request: ModelRequest) -> list[dict[str, Any]]:
    """The OpenAI chat form of a request's conversation.

    Assistant tool-call messages carry ``"content": ""`` rather than null: several servers
    (llama.cpp among them) reject a null content on replay.
    """
    wire: list[dict[str, Any]] = []
    if request.system:
        wire.append({"role": "system", "content": request.system})
    for message in request.messages:
        item: dict[str, Any] = {"role": message.role, "content": message.content}
        if message.role == "assistant" and message.tool_calls:
            item["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in message.tool_calls
            ]
        if message.role == "tool":
            item["tool_call_id"] = message.tool_call_id or ""
        elif message.name and message.role == "user":
            item["name"] = message.name
        wire.append(item)
    return wire


def _wire_tools(request: ModelRequest) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": dict(tool.parameters) or {"type": "object", "properties": {}},
            },
        }
        for tool in request.tools
    ]


@dataclass
class _PartialCall:
    """A tool call still arriving in stream fragments."""

    index: int | None
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class _CallAssembler:
    """Joins streamed tool-call fragments into whole calls."""

    def __init__(self) -> None:
        self.calls: list[_PartialCall] = []

    def _find(self, index: int | None, call_id: str) -> _PartialCall | None:
        if index is not None:
            for call in self.calls:
                if call.index == index and not (call_id and call.id and call.id != call_id):
                    return call
            return None
        if call_id:
            for call in self.calls:
                if call.id == call_id:
                    return call
            return None
        return self.calls[-1] if self.calls else None

    def add(self, index: int | None, call_id: str | None, name: str | None, arguments: str | None) -> None:
        call = self._find(index, call_id or "")
        if call is None:
            call = _PartialCall(index)
            self.calls.append(call)
        if call_id and not call.id:
            call.id = call_id
        if name and name != call.name:
            call.name = call.name + name if call.name and not name.startswith(call.name) else name
        if arguments:
            call.arguments.append(arguments)

    def result(self) -> tuple[ToolCall, ...]:
        return tuple(
            ToolCall(id=call.id or f"call_{n}", name=call.name, arguments="".join(call.arguments))
            for n, call in enumerate(self.calls)
        )


class _TextRelay:
    """Forwards text to ``on_text`` without repeating what an earlier attempt already showed."""

    def __init__(self, sink: TextSink | None) -> None:
        self._sink = sink
        self._shown = ""
        self._attempt_text = ""

    def new_attempt(self) -> None:
        self._attempt_text = ""

    async def feed(self, delta: str) -> None:
        self._attempt_text += delta
        if self._sink is None or self._shown.startswith(self._attempt_text):
            return
        if self._attempt_text.startswith(self._shown):
            fresh = self._attempt_text[len(self._shown) :]
        else:
            fresh = delta
        self._shown = self._attempt_text
        await self._sink(fresh)


def _is_transient(exc: BaseException) -> bool:
    return isinstance(exc, ModelError) and exc.transient


class OpenAIModel(ModelClient):
    """``ModelClient`` over an OpenAI-compatible endpoint.

    ``sleep`` is the backoff wait (default ``anyio.sleep``); tests pass a recorder. The SDK client is
    created on first use so that constructing the model never touches the network or the disk.
    """

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str = "",
        model: str,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        max_response_chars: int = DEFAULT_MAX_RESPONSE_CHARS,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        sleep: Sleep | None = None,
        backoff_base: float = _BACKOFF_BASE,
        backoff_cap: float = _BACKOFF_CAP,
        http_client: httpx2.AsyncClient | None = None,
    ) -> None:
        if max_attempts < 1:
            raise UsageError(f"max_attempts must be at least 1, got {max_attempts}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.idle_timeout = idle_timeout
        self.max_attempts = max_attempts
        self._api_key = api_key or "sk-no-key"
        self._request_timeout = request_timeout
        self.request_timeout = request_timeout
        self.max_response_chars = max_response_chars
        self._sleep: Sleep = sleep or anyio_sleep
        self.on_retry: Callable[[str], Awaitable[None]] | None = None
        """Told before each retry wait (a chat shows it), so a slow or failing server is never silent."""
        self._backoff_base = backoff_base
        self._backoff_cap = backoff_cap
        self._http_client = http_client
        self._client: openai.AsyncOpenAI | None = None

    def _build_sdk(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=self._api_key,
            max_retries=0,
            timeout=self._request_timeout,
            http_client=self._http_client,
        )

    def _build_or_error(self) -> openai.AsyncOpenAI | Exception:
        try:
            return self._build_sdk()
        except Exception as exc:
            return exc

    async def _sdk(self) -> openai.AsyncOpenAI:
        """The SDK client, built in a worker thread: TLS setup reads certificate files. The SDK's
        first request asks ``platform`` for its headers, which runs ``uname -p`` (~6 ms, once per
        process); started beside the build, that child's wait overlaps the build's CPU instead of
        delaying the first request (P1)."""
        if self._client is None:
            async with create_task_group() as tg:
                tg.start_soon(blocking.run_sync, "files", platform.platform)
                built = await blocking.run_sync("files", self._build_or_error)
            if isinstance(built, Exception):
                # raised here, not inside the group, so callers see the SDK's own error type
                raise built
            client = built
            if self._client is None:
                self._client = client
            else:
                await client.close()
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        if isinstance(exc, ModelError) and exc.retry_after is not None:
            return min(exc.retry_after, self._backoff_cap)
        return min(self._backoff_base * 2 ** (state.attempt_number - 1), self._backoff_cap)

    async def _before_retry(self, state: RetryCallState) -> None:
        if self.on_retry is None:
            return
        exc = state.outcome.exception() if state.outcome is not None else None
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        reason = _one_line(str(exc), 160) if exc is not None else "no answer"
        await self.on_retry(f"{reason}; retry {state.attempt_number + 1}/{self.max_attempts} in {wait:.0f} s")

    async def complete(self, request: ModelRequest, *, on_text: TextSink | None = None) -> ModelResponse:
        """The first attempt is made before tenacity is imported (a chat's first request waits for
        nothing but the SDK, P1); a transient failure of it is replayed as the first attempt
        of tenacity's loop, so retries count, wait and report exactly as if tenacity had made it."""
        relay = _TextRelay(on_text)
        relay.new_attempt()
        try:
            return await self._attempt(request, relay)
        except ModelError as exc:
            if not (exc.transient and self.max_attempts > 1):
                raise
            first: ModelError | None = exc
        # deferred: only a transient failure needs the retry loop
        from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt

        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.max_attempts),
            wait=self._wait,
            retry=retry_if_exception(_is_transient),
            sleep=self._sleep,
            before_sleep=self._before_retry,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    if first is not None:
                        failed, first = first, None
                        raise failed
                    relay.new_attempt()
                    return await self._attempt(request, relay)
        except ModelError as exc:
            if exc.transient and self.max_attempts > 1:
                raise ModelError(
                    f"{exc} (gave up after {self.max_attempts} attempts)",
                    transient=True,
                    status=exc.status,
                    retry_after=exc.retry_after,
                    partial_text=exc.partial_text,
                ) from exc
            raise
        raise ModelError(f"model error: no attempt was made against {self.base_url}")

    def _error(self, what: str, **kwargs: Any) -> ModelError:
        return ModelError(_one_line(f"model error: {what}"), **kwargs)

    def _translate(self, exc: Exception) -> ModelError:
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            text = _server_message(exc.body, exc.message)
            overflow = status in (400, 413, 422) and is_context_overflow_text(f"{text} {exc.body!r}")
            transient = status in (408, 409, 429) or status >= 500
            retry_after = _parse_retry_after(exc.response.headers)
            return self._error(
                f"HTTP {status} from {self.base_url}: {text}",
                transient=transient and not overflow,
                context_overflow=overflow,
                status=status,
                retry_after=retry_after,
            )
        if isinstance(exc, openai.APITimeoutError):
            return self._error(f"request to {self.base_url} timed out", transient=True)
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc.__context__
            detail = f"{type(cause).__name__}: {cause}" if cause else str(exc)
            return self._error(f"connection to {self.base_url} failed: {detail}", transient=True)
        if isinstance(exc, httpx2.TransportError):
            return self._error(
                f"connection to {self.base_url} failed: {type(exc).__name__}: {exc}", transient=True
            )
        if isinstance(exc, openai.APIError):
            return self._error(f"bad response from {self.base_url}: {exc}")
        return self._error(f"unexpected failure talking to {self.base_url}: {type(exc).__name__}: {exc}")

    async def _attempt(self, request: ModelRequest, relay: _TextRelay) -> ModelResponse:
        params: dict[str, Any] = {
            "model": request.model or self.model,
            "messages": to_wire_messages(request),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            params["tools"] = _wire_tools(request)
        if request.tool_choice:
            choice = request.tool_choice
            # a bare function name forces that function; the wire form is an object
            params["tool_choice"] = (
                choice if choice in ("auto", "none", "required") else {"type": "function", "function": {"name": choice}}
            )
        if request.max_tokens:
            params["max_tokens"] = request.max_tokens
        reply = _Reply(self.max_response_chars)
        try:
            with CancelScope(deadline=current_time() + self.request_timeout) as deadline:
                try:
                    await self._read(params, reply, relay)
                except TimeoutError:
                    raise self._error(
                        f"{self.base_url} sent nothing for {self.idle_timeout:g} s (stream idle timeout)",
                        transient=True,
                    ) from None
                except (openai.OpenAIError, httpx2.HTTPError) as exc:
                    raise self._translate(exc) from exc
        finally:
            if reply.stream is not None:
                with CancelScope(shield=True), move_on_after(5):
                    await reply.stream.close()
        if deadline.cancelled_caught:
            raise self._error(
                f"response from {self.base_url} took longer than {self.request_timeout:g} s (request_timeout)",
                transient=True,
                partial_text=reply.partial(f"[response cut: no end after {self.request_timeout:g} s (request_timeout)]"),
            )
        if reply.over_cap:
            raise self._error(
                f"response from {self.base_url} exceeded {self.max_response_chars:,} characters (max_response_chars)",
                transient=True,
                partial_text=reply.partial(
                    f"[response cut at {self.max_response_chars:,} characters (max_response_chars)]"
                ),
            )
        if reply.finish is None:
            raise self._error(f"stream from {self.base_url} ended before the model finished", transient=True)
        tool_calls = reply.calls.result()
        finish = "tool_calls" if tool_calls else reply.finish
        message = Message(role="assistant", content="".join(reply.text), tool_calls=tool_calls)
        return ModelResponse(
            message=message, usage=reply.usage, finish_reason=finish, model=reply.model_name or params["model"]
        )

    async def _read(self, params: dict[str, Any], reply: _Reply, relay: _TextRelay) -> None:
        """Stream one response into ``reply``; stops early (``reply.over_cap``) at the size cap."""
        # The messages and tools go in ``extra_body``, which the SDK merges into the JSON as given:
        # as keyword arguments it walks every message and schema against its TypedDicts (renaming
        # nothing here: ``to_wire_messages`` builds the wire form), ~10 ms of CPU for a 40-message
        # conversation, growing with it, at every request of a session (P8).
        wire = {key: params[key] for key in _AS_GIVEN if key in params}
        rest = {key: value for key, value in params.items() if key not in wire}
        with fail_after(self.idle_timeout):
            reply.stream = await (await self._sdk()).chat.completions.create(
                **rest, messages=[], extra_body=wire
            )
        iterator = reply.stream.__aiter__()
        while True:
            with fail_after(self.idle_timeout):
                try:
                    chunk = await iterator.__anext__()
                except StopAsyncIteration:
                    return
            reply.model_name = chunk.model or reply.model_name
            if chunk.usage is not None:
                reply.usage = Usage(chunk.usage.prompt_tokens or 0, chunk.usage.completion_tokens or 0)
            for choice in chunk.choices or ():
                delta = choice.delta
                if delta is not None and delta.content:
                    kept = reply.take(delta.content)
                    if kept:
                        reply.text.append(kept)
                        await relay.feed(kept)
                for part in (delta.tool_calls if delta is not None else None) or ():
                    function = part.function
                    arguments = reply.take(function.arguments) if function and function.arguments else None
                    reply.calls.add(part.index, part.id, function.name if function else None, arguments)
                if choice.finish_reason:
                    reply.finish = choice.finish_reason
            if reply.over_cap:
                return


_AS_GIVEN = ("messages", "tools")


@dataclass
class _Reply:
    """One attempt's response as it streams in, with the size cap (D12) applied as it grows."""

    cap: int
    text: list[str] = field(default_factory=list)
    calls: _CallAssembler = field(default_factory=lambda: _CallAssembler())
    usage: Usage = field(default_factory=Usage)
    finish: str | None = None
    model_name: str = ""
    stream: Any = None
    size: int = 0
    over_cap: bool = False

    def take(self, piece: str) -> str:
        """The part of ``piece`` that fits under the cap; past it, ``over_cap`` is set."""
        room = self.cap - self.size
        if len(piece) > room:
            self.over_cap = True
            piece = piece[: max(room, 0)]
        self.size += len(piece)
        return piece

    def partial(self, mark: str) -> str:
        """The text received so far, marked as cut (never more than the cap plus the mark)."""
        said = "".join(self.text)
        return f"{said}\n\n{mark}" if said else mark


def model_from_settings(
    base_url: str,
    api_key: str | None,
    model: str,
    *,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    max_response_chars: int = DEFAULT_MAX_RESPONSE_CHARS,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    sleep: Sleep | None = None,
) -> OpenAIModel:
    """An ``OpenAIModel`` from resolved settings; a one-line ``ConfigError`` for bad ones."""
    if not re.match(r"^https?://[^\s/]+", base_url or ""):
        raise ConfigError(f"model base_url must be an http(s) URL, got {base_url!r}")
    if not model:
        raise ConfigError(
            f"no model name configured for {base_url} (set --model, REVERIE_MODEL or model.name in config.toml)"
        )
    return OpenAIModel(
        base_url=base_url,
        api_key=api_key or "",
        model=model,
        idle_timeout=idle_timeout,
        request_timeout=request_timeout,
        max_response_chars=max_response_chars,
        max_attempts=max_attempts,
        sleep=sleep,
    )


def resolve_model_client(
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    model: str | None = None,
    config: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    idle_timeout: float | None = None,
    sleep: Sleep | None = None,
) -> ModelClient:
    """The model a conversation should use.

    Precedence (S20): explicit arguments (CLI flags) > environment (``REVERIE_BASE_URL``,
    ``OPENAI_API_KEY``, ``REVERIE_MODEL``) > ``config`` (the caller's merged per-agent/config-file
    values, keys ``base_url``, ``api_key``, ``model``, ``idle_timeout``). With no endpoint anywhere
    the offline ``ScriptedModel`` is returned, so reverie works without a network.
    """
    env = os.environ if environ is None else environ
    cfg = config or {}

    def pick(explicit: str | None, env_name: str, key: str) -> str:
        for value in (explicit, env.get(env_name), cfg.get(key)):
            if value:
                return str(value)
        return ""

    url = pick(base_url, "REVERIE_BASE_URL", "base_url")
    if not url:
        # lazy: a configured endpoint (the real path) never needs the scripted model
        from orchestrator.models.scripted import ScriptedModel

        return ScriptedModel()
    timeout = (
        idle_timeout if idle_timeout is not None else float(cfg.get("idle_timeout") or DEFAULT_IDLE_TIMEOUT)
    )
    return model_from_settings(
        url,
        pick(api_key, "OPENAI_API_KEY", "api_key"),
        pick(model, "REVERIE_MODEL", "model"),
        idle_timeout=timeout,
        sleep=sleep,
    )
