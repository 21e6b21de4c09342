"""OpenTelemetry spans for finished tasks, following the GenAI semantic conventions, when
``opentelemetry-sdk`` is installed (optional: without it nothing happens and nothing is imported).

Spans are built after the fact from a task's event log, in the driver, so both executors give the
same spans: ``invoke_agent <task>`` (the task), ``chat <model>`` per model call (timed by its
latency), ``execute_tool <name>`` per tool call. A global SDK tracer provider configured by the
user receives them; otherwise they are written as JSON lines to ``RUN_DIR/otel-spans.jsonl``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.batch.eventlog import EventRecord

__all__ = ["SPANS_FILE", "SpanEmitter", "otel_available"]

SPANS_FILE = "otel-spans.jsonl"


def otel_available() -> bool:
    try:
        # optional: opentelemetry comes with the dev extra; spans are written only when it is installed
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        return False
    return True


def _ns(at: str) -> int:
    return int(datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp() * 1e9)


class SpanEmitter:
    """Emits spans for tasks of one run (blocking calls; use from a thread)."""

    def __init__(self, run_dir: Path) -> None:
        # optional: opentelemetry comes with the dev extra; spans are written only when it is installed
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

        self._handle: Any = None
        provider = trace.get_tracer_provider()
        if not isinstance(provider, TracerProvider):
            self._handle = (run_dir / SPANS_FILE).open("a", encoding="utf-8")
            provider = TracerProvider()
            exporter = ConsoleSpanExporter(
                out=self._handle, formatter=lambda span: span.to_json(indent=None) + "\n"
            )
            provider.add_span_processor(SimpleSpanProcessor(exporter))
        self._provider = provider
        self._tracer = provider.get_tracer("reverie.batch")

    def close(self) -> None:
        if self._handle is not None:
            self._provider.shutdown()
            self._handle.close()
            self._handle = None

    def emit_task(self, task_id: str, records: Sequence[EventRecord], *, status: str) -> None:
        # optional: opentelemetry comes with the dev extra; spans are written only when it is installed
        from opentelemetry import trace
        from opentelemetry.trace import Status, StatusCode

        if not records:
            return
        start, end = _ns(records[0].at), _ns(records[-1].at)
        root = self._tracer.start_span(
            f"invoke_agent {task_id}",
            start_time=start,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.id": task_id,
                "gen_ai.agent.name": task_id,
                "reverie.task.status": status,
            },
        )
        context = trace.set_span_in_context(root)
        tools: dict[str, EventRecord] = {}
        for record in records:
            p = record.payload
            if record.kind == "model.call":
                finish = _ns(record.at)
                attributes: dict[str, Any] = {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": str(p.get("model", "")),
                    "gen_ai.response.model": str(p.get("model", "")),
                    "gen_ai.usage.input_tokens": int(p.get("prompt_tokens", 0)),
                    "gen_ai.usage.output_tokens": int(p.get("completion_tokens", 0)),
                    "reverie.purpose": str(p.get("purpose", "chat")),
                }
                if record.conversation_id:
                    attributes["gen_ai.conversation.id"] = record.conversation_id
                span = self._tracer.start_span(
                    f"chat {p.get('model', '')}",
                    context=context,
                    kind=trace.SpanKind.CLIENT,
                    start_time=finish - int(float(p.get("latency_ms", 0.0)) * 1e6),
                    attributes=attributes,
                )
                span.end(end_time=finish)
            elif record.kind == "tool.start":
                tools[str(p.get("call_id"))] = record
            elif record.kind == "tool.end":
                begun = tools.pop(str(p.get("call_id")), record)
                span = self._tracer.start_span(
                    f"execute_tool {p.get('name', '')}",
                    context=context,
                    start_time=_ns(begun.at),
                    attributes={
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": str(p.get("name", "")),
                        "gen_ai.tool.call.id": str(p.get("call_id", "")),
                    },
                )
                if not p.get("ok", True):
                    span.set_status(Status(StatusCode.ERROR))
                span.end(end_time=_ns(record.at))
        if status == "error":
            root.set_status(Status(StatusCode.ERROR))
        root.end(end_time=max(end, start))
