"""A loopback OpenTelemetry collector for tests: OTLP over HTTP, protobuf bodies, on 127.0.0.1.

Telemetry is checked where a user's collector would see it: reverie configured only through the
standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` (``endpoint``), its exporter's real HTTP requests decoded
with the OTLP protobuf messages the exporter package ships (``opentelemetry-proto``, a dependency of
the ``otel`` extra's ``opentelemetry-exporter-otlp-proto-http``). An in-memory exporter would skip
the exporter, its batching and the flush at exit, which is what a user depends on.

The server is ``http.server.ThreadingHTTPServer`` in a background thread on an ephemeral port;
start and stop it outside the event loop (a fixture, or a ``with`` block around a child process).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

__all__ = ["CollectedSpan", "LoopbackCollector"]


@dataclass(frozen=True)
class CollectedSpan:
    """One span as it arrived: ids in hex (``parent`` empty for a root), its attributes as Python
    values and its resource's."""

    name: str
    trace_id: str
    span_id: str
    parent: str
    attributes: dict[str, Any]
    resource: dict[str, Any]


def _value(value: Any) -> Any:
    """An OTLP ``AnyValue`` as Python (arrays as tuples)."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(item) for item in value.array_value.values)
    return getattr(value, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


class LoopbackCollector:
    """Accepts ``POST /v1/traces`` and ``POST /v1/metrics`` and keeps every decoded request."""

    def __init__(self) -> None:
        self.requests: dict[str, list[Any]] = {}
        self._lock = threading.Lock()
        messages: dict[str, type[Any]] = {"/v1/traces": ExportTraceServiceRequest, "/v1/metrics": ExportMetricsServiceRequest}
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                message_type = messages.get(self.path)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if message_type is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                message = message_type()
                message.ParseFromString(body)
                with collector._lock:
                    collector.requests.setdefault(self.path, []).append(message)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="otlp-collector", daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        """The base URL for ``OTEL_EXPORTER_OTLP_ENDPOINT``."""
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def spans(self) -> list[CollectedSpan]:
        """Every span received so far, in arrival order."""
        with self._lock:
            requests = list(self.requests.get("/v1/traces", ()))
        return [
            CollectedSpan(
                span.name, span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex(),
                _attributes(span.attributes), _attributes(resource.resource.attributes),
            )
            for request in requests
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]

    def metric_names(self) -> set[str]:
        """The names of every metric received so far."""
        with self._lock:
            requests = list(self.requests.get("/v1/metrics", ()))
        return {
            metric.name
            for request in requests
            for resource in request.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
        }

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    def __enter__(self) -> LoopbackCollector:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
