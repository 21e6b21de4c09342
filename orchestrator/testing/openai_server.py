"""A loopback OpenAI-compatible chat server for tests and benchmarks.

It exists so that ``OpenAIModel`` is exercised through a real HTTP stack (the SDK, its transport,
SSE parsing) instead of a patched SDK. Each test scripts the server with a queue of planned replies
and faults; the server records every request body so tests can assert what reverie sent.

The server runs ``http.server.ThreadingHTTPServer`` in a background thread bound to 127.0.0.1 on an
ephemeral port. Every response carries ``Connection: close``, so a handler thread finishes with its
request and ``stop()`` joins them all; a stalled stream waits on the stop event, never longer.
Start and stop it outside the event loop (a fixture, or ``anyio.to_thread.run_sync``): the
constructor binds a socket and ``stop()`` joins threads.

When the queue is empty the server answers with ``fallback`` (default: ``(loopback) <last user
text>``), which benchmarks can replace with a callable.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = [
    "LoopbackOpenAI",
    "Planned",
    "PlannedToolCall",
    "RecordedRequest",
    "Responder",
    "context_overflow",
    "cut_off",
    "http_error",
    "rate_limited",
    "server_error",
    "stall",
    "text_reply",
    "tool_call_reply",
]


@dataclass(frozen=True)
class PlannedToolCall:
    """A tool call the server will send; ``arguments`` is sent verbatim, malformed JSON included."""

    name: str
    arguments: str
    id: str = ""


@dataclass(frozen=True)
class Planned:
    """One planned response or fault.

    ``status`` other than 200 sends ``error_message`` as an OpenAI error body with ``headers``.
    Streaming faults count SSE chunks: ``stall_after`` chunks then silence until ``stall_seconds``
    pass or the server stops; ``cut_after`` chunks then the connection closes with an unfinished
    chunked body and no ``[DONE]``. ``tool_call_style`` is ``"first"`` (id and name only in the
    first chunk of a call), ``"repeat"`` (id and name in every chunk, as some servers do) or
    ``"no_index"`` (no ``index`` field; id in the first chunk only). ``usage`` ``None`` reports a
    chars/4 estimate; ``(0, 0)`` reports zeros; ``report_usage=False`` sends no usage at all.
    """

    text: str = ""
    tool_calls: tuple[PlannedToolCall, ...] = ()
    status: int = 200
    error_message: str = ""
    error_code: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    chunk_size: int = 4
    chunk_delay: float = 0.0
    stall_after: int | None = None
    stall_seconds: float = 30.0
    cut_after: int | None = None
    tool_call_style: str = "first"
    finish_reason: str | None = None
    usage: tuple[int, int] | None = None
    report_usage: bool = True


@dataclass(frozen=True)
class RecordedRequest:
    """One request as received; header names are lower-cased."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any


Responder = Callable[[Any], Planned]


def text_reply(text: str, **options: Any) -> Planned:
    return Planned(text=text, **options)


def tool_call_reply(name: str, arguments: str, *, text: str = "", id: str = "", **options: Any) -> Planned:
    return Planned(text=text, tool_calls=(PlannedToolCall(name, arguments, id),), **options)


def http_error(
    status: int, message: str, *, code: str | None = None, headers: Mapping[str, str] | None = None
) -> Planned:
    return Planned(status=status, error_message=message, error_code=code, headers=dict(headers or {}))


def rate_limited(retry_after: float | str = 1, message: str = "Rate limit reached, slow down") -> Planned:
    return http_error(429, message, code="rate_limit_exceeded", headers={"Retry-After": str(retry_after)})


def server_error(message: str = "internal server error", status: int = 500) -> Planned:
    return http_error(status, message)


def context_overflow(limit: int = 4096, used: int = 5000) -> Planned:
    return http_error(
        400,
        f"This model's maximum context length is {limit} tokens. However, your messages resulted in {used} tokens. "
        "Please reduce the length of the messages.",
        code="context_length_exceeded",
    )


def stall(text: str = "partial answer that never ends", after: int = 1, seconds: float = 30.0) -> Planned:
    return Planned(text=text, stall_after=after, stall_seconds=seconds)


def cut_off(text: str = "partial answer that is cut off", after: int = 2) -> Planned:
    return Planned(text=text, cut_after=after)


def _last_user_text(body: Any) -> str:
    if isinstance(body, dict):
        for message in reversed(body.get("messages") or []):
            if isinstance(message, dict) and message.get("role") == "user":
                content = message.get("content")
                return content if isinstance(content, str) else json.dumps(content)
    return ""


def _echo(body: Any) -> Planned:
    return Planned(text=f"(loopback) {_last_user_text(body)}")


def _estimate(text: str) -> int:
    return (len(text) + 3) // 4


class _Server(ThreadingHTTPServer):
    daemon_threads = False
    block_on_close = True
    owner: LoopbackOpenAI


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        owner = self.server.owner
        owner._record(
            RecordedRequest("GET", self.path, {k.lower(): v for k, v in self.headers.items()}, None)
        )
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            self._send_json(
                200,
                {"object": "list", "data": [{"id": owner.model, "object": "model", "owned_by": "loopback"}]},
            )
        else:
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw.decode("utf-8")) if raw else None
        except (UnicodeDecodeError, json.JSONDecodeError):
            body = raw.decode("utf-8", "replace")
        owner._record(
            RecordedRequest("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        )
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        plan = owner._next_plan(body)
        try:
            if plan.status != 200:
                error: dict[str, Any] = {
                    "message": plan.error_message,
                    "type": "error",
                    "code": plan.error_code,
                }
                self._send_json(plan.status, {"error": error}, plan.headers)
            elif isinstance(body, dict) and body.get("stream"):
                self._stream(plan, body)
            else:
                self._complete(plan, body)
        except (BrokenPipeError, ConnectionResetError):
            return

    def _send_json(self, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()
        self.close_connection = True

    def _usage(self, plan: Planned, body: Any) -> dict[str, int]:
        if plan.usage is not None:
            prompt, completion = plan.usage
        else:
            prompt = _estimate(json.dumps(body.get("messages", [])) if isinstance(body, dict) else "")
            completion = _estimate(plan.text + "".join(c.name + c.arguments for c in plan.tool_calls))
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def _finish(self, plan: Planned) -> str:
        return plan.finish_reason or ("tool_calls" if plan.tool_calls else "stop")

    def _complete(self, plan: Planned, body: Any) -> None:
        owner = self.server.owner
        if plan.stall_after is not None:
            owner._stopping.wait(plan.stall_seconds)
        if plan.cut_after is not None:
            self.close_connection = True
            return
        message: dict[str, Any] = {"role": "assistant", "content": plan.text or None}
        if plan.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id or f"call_{i}",
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for i, call in enumerate(plan.tool_calls)
            ]
        payload: dict[str, Any] = {
            "id": owner._completion_id(),
            "object": "chat.completion",
            "created": 0,
            "model": owner.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish(plan)}],
        }
        if plan.report_usage:
            payload["usage"] = self._usage(plan, body)
        self._send_json(200, payload)

    def _chunks(self, plan: Planned, body: Any, completion_id: str) -> Iterator[dict[str, Any]]:
        owner = self.server.owner

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": 0,
                "model": owner.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }

        yield chunk({"role": "assistant", "content": ""})
        size = max(1, plan.chunk_size)
        for start in range(0, len(plan.text), size):
            yield chunk({"content": plan.text[start : start + size]})
        for index, call in enumerate(plan.tool_calls):
            call_id = call.id or f"call_{index}"
            pieces = [call.arguments[s : s + size] for s in range(0, len(call.arguments), size)] or [""]
            for n, piece in enumerate(pieces):
                entry: dict[str, Any] = {"function": {"arguments": piece}}
                if plan.tool_call_style != "no_index":
                    entry["index"] = index
                if n == 0 or plan.tool_call_style == "repeat":
                    entry["id"] = call_id
                    entry["type"] = "function"
                    entry["function"]["name"] = call.name
                yield chunk({"tool_calls": [entry]})
        yield chunk({}, self._finish(plan))
        options = body.get("stream_options") if isinstance(body, dict) else None
        if plan.report_usage and isinstance(options, dict) and options.get("include_usage"):
            final = chunk({})
            final["choices"] = []
            final["usage"] = self._usage(plan, body)
            yield final

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):X}\r\n".encode("ascii") + data + b"\r\n")
        self.wfile.flush()

    def _stream(self, plan: Planned, body: Any) -> None:
        owner = self.server.owner
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        for count, event in enumerate(self._chunks(plan, body, owner._completion_id())):
            if plan.cut_after is not None and count >= plan.cut_after:
                return
            if plan.stall_after is not None and count >= plan.stall_after:
                owner._stopping.wait(plan.stall_seconds)
                return
            if count and plan.chunk_delay > 0 and owner._stopping.wait(plan.chunk_delay):
                return
            self._write_chunk(b"data: " + json.dumps(event, ensure_ascii=False).encode("utf-8") + b"\n\n")
        self._write_chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class LoopbackOpenAI:
    """The server; use as ``with LoopbackOpenAI() as server: ...`` (starts on enter, stops on exit)."""

    def __init__(self, *, model: str = "loopback-model", fallback: Responder | Planned | None = None) -> None:
        self.model = model
        self.fallback: Responder | Planned = fallback if fallback is not None else _echo
        self._lock = threading.Lock()
        self._queue: deque[Planned | Responder] = deque()
        self._requests: list[RecordedRequest] = []
        self._stopping = threading.Event()
        self._counter = 0
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("loopback server is not running; call start() first")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self) -> LoopbackOpenAI:
        if self._httpd is not None:
            return self
        self._stopping.clear()
        httpd = _Server(("127.0.0.1", 0), _Handler)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="loopback-openai", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, release stalled handlers and join every thread."""
        httpd, thread = self._httpd, self._thread
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        httpd.server_close()
        if thread is not None:
            thread.join()
        self._httpd = None
        self._thread = None

    def __enter__(self) -> LoopbackOpenAI:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def enqueue(self, *plans: Planned | Responder) -> None:
        """Queue responses, served one per chat request in order."""
        with self._lock:
            self._queue.extend(plans)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def chat_bodies(self) -> list[Any]:
        """Bodies of the chat-completion requests received, oldest first."""
        return [r.body for r in self.requests if r.method == "POST"]

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _next_plan(self, body: Any) -> Planned:
        with self._lock:
            item = self._queue.popleft() if self._queue else self.fallback
        return item if isinstance(item, Planned) else item(body)

    def _completion_id(self) -> str:
        with self._lock:
            self._counter += 1
            return f"chatcmpl-loopback-{self._counter}"
