"""OpenTelemetry GenAI spans and metrics for chat sessions, live (O10), on the maintained
libraries: ``opentelemetry-sdk`` and ``opentelemetry-util-genai`` (the optional extra
``reverie[otel]``), which emit the GenAI semantic conventions as Langfuse, Phoenix, Logfire and
Grafana read them. The spans a session emits and the variables that turn them on are listed in the
README ("OpenTelemetry"); batch runs, sweeps and each batch task add ``invoke_workflow`` spans, and a
program embedding reverie hands its own providers over with ``installed(...)``.

Why events and a model wrapper, not context variables: spans are opened and closed from the events
the session already publishes (``turn.start``, ``tool.end``, ``compaction.start`` and its one end,
``reflection.launch`` and its ``reflection.outcome``), and the parent of each span is named
explicitly. A background subagent runs in a task spawned long after its turn's context was left,
on trio or asyncio alike; an explicit parent is right on both, where an ambient one would depend on
which task spawned which. Only the model call is wrapped (``TracedModel``), because no event says
when a request starts and a failed request publishes none.

Spans and metrics export from the SDK's own threads, so a slow or absent collector never blocks a
turn; at the session's end they are flushed off the event loop, for at most ``FLUSH_SECONDS``.
Without the extra nothing is imported, and a configured ``OTEL_*`` gets one line on stderr. These
live spans are the only ones (``docs/suite-format.md`` says why batch runs no longer write spans
after the fact): a user who configured nothing expects telemetry off, and one trace shape per run.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio

from orchestrator.base import blocking
from orchestrator.base.events import Event
from orchestrator.models.types import ModelClient, ModelError, ModelRequest, ModelResponse, TextSink

__all__ = [
    "FLUSH_SECONDS",
    "SCOPE",
    "Providers",
    "Telemetry",
    "TracedModel",
    "installed",
    "open_telemetry",
    "otel_configured",
    "workflow",
]

SCOPE = "reverie"
FLUSH_SECONDS = 3.0
"""How long a session's end waits for its exporters: an unreachable collector (whose exporter
retries for ``OTEL_EXPORTER_OTLP_TIMEOUT``, 10 s) costs the exit at most this; what it had not
sent by then is dropped."""


@dataclass(frozen=True)
class Providers:
    """The SDK providers spans and metrics go to; ``owned`` ones (built from ``OTEL_*``) are flushed
    at each session's end."""

    tracer_provider: Any
    meter_provider: Any = None
    owned: bool = False


_installed: list[Providers] = []
_from_env: dict[tuple[tuple[str, str], ...], Providers | None] = {}
"""One set of providers per process and configuration: a batch process runs many sessions, each
flushing at its end, not each building exporters and their threads."""


@contextmanager
def installed(tracer_provider: Any, meter_provider: Any = None) -> Iterator[None]:
    """Sessions opened inside use these providers (an embedding program's or a test's), whatever
    ``OTEL_*`` says; nothing global of OpenTelemetry's is set."""
    _installed.append(Providers(tracer_provider, meter_provider))
    try:
        yield
    finally:
        _installed.pop()


def otel_configured(environ: Mapping[str, str]) -> bool:
    """True when the standard variables ask for telemetry (the check imports nothing)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return True
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    return bool(exporter) and exporter != "none"


def _providers_from_env(environ: Mapping[str, str]) -> Providers | None:
    # optional: the reverie[otel] extra; imported only when OTEL_* asks for telemetry
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        print("reverie: OTEL_* is set but OpenTelemetry is not installed: pip install 'reverie[otel]'", file=sys.stderr)
        return None
    traces = environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    # flushed by each session (bounded), never shut down by an atexit hook that would wait for a dead collector
    provider = TracerProvider(resource=Resource.create(), shutdown_on_exit=False)
    for name in (n.strip() for n in traces.split(",")):
        if name == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
        elif name == "otlp":
            provider.add_span_processor(BatchSpanProcessor(_otlp("trace")))
    meter_provider = None
    if environ.get("OTEL_METRICS_EXPORTER", "otlp").strip().lower() == "otlp":
        # optional: as above
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        meter_provider = MeterProvider(
            resource=provider.resource,
            metric_readers=[PeriodicExportingMetricReader(_otlp("metric"))],
            shutdown_on_exit=False,
        )
    return Providers(provider, meter_provider, owned=True)


def _otlp(signal: str) -> Any:
    """The OTLP/HTTP exporter, which reads its endpoint, headers and timeout from ``OTEL_*``."""
    if signal == "trace":
        # optional: the reverie[otel] extra
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    # optional: as above
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter()


def open_telemetry(
    agent_name: str,
    *,
    provider: str,
    request_model: Callable[[], str],
    conversation: Callable[[], str],
    environ: Mapping[str, str] | None = None,
) -> Telemetry | None:
    """The session's telemetry, or None when it is off (the common case costs one dict lookup)."""
    providers = _providers(os.environ if environ is None else environ)
    if providers is None:
        return None
    return Telemetry(providers, agent_name, provider, request_model, conversation)


def _providers(env: Mapping[str, str]) -> Providers | None:
    if _installed:
        return _installed[-1]
    if not otel_configured(env):
        return None
    key = tuple(sorted((k, v) for k, v in env.items() if k.startswith("OTEL_")))
    if key not in _from_env:
        _from_env[key] = _providers_from_env(env)
    return _from_env[key]


_parent: ContextVar[Any] = ContextVar("reverie_otel_parent", default=None)
"""The context of the workflow span around what runs now (a batch task, a run, a sweep)."""
_workflow: ContextVar[Any] = ContextVar("reverie_otel_workflow", default=None)
"""The workflow invocation itself (a batch task's), which a limit that stops its turn marks too."""


@asynccontextmanager
async def workflow(name: str, attributes: Mapping[str, Any] | None = None) -> AsyncIterator[None]:
    """An ``invoke_workflow <name>`` span around the body when telemetry is on: sessions opened
    inside make their turns its children, workflows inside nest. The outermost one flushes the
    exporters at its end (bounded, off the loop). Parents do not cross processes: a batch task run
    by a worker process is the root of its own trace."""
    providers = _providers(os.environ)
    if providers is None:
        yield
        return
    # optional: the reverie[otel] extra (providers exist only when it is installed)
    from opentelemetry.trace import set_span_in_context

    outer = _parent.get()
    invocation = _handler(providers).workflow(name, context=outer, _attach_to_context=False)
    invocation.attributes.update(attributes or {})
    token = _parent.set(set_span_in_context(invocation.span))
    marker = _workflow.set(invocation)
    try:
        yield
    except BaseException as exc:
        _fail_invocation(invocation, "cancelled" if _cancelled(exc) else type(exc).__name__, str(exc) or "cancelled")
        raise
    else:
        invocation.stop()
    finally:
        _workflow.reset(marker)
        _parent.reset(token)
        if outer is None and providers.owned:
            with anyio.CancelScope(shield=True):
                await _flush(providers)


_handlers: weakref.WeakKeyDictionary[Providers, Any] = weakref.WeakKeyDictionary()
"""Keyed by the providers themselves, never their ``id()``: a new set of providers can reuse a freed
one's id and would be handed the old handler, whose spans go to the old exporter."""


def _handler(providers: Providers) -> Any:
    """One ``TelemetryHandler`` per set of providers (it holds the instruments)."""
    handler = _handlers.get(providers)
    if handler is None:
        # optional: the reverie[otel] extra
        from opentelemetry.util.genai.handler import TelemetryHandler

        handler = _handlers[providers] = TelemetryHandler(
            tracer_provider=providers.tracer_provider,
            meter_provider=providers.meter_provider,
            instrumentation_scope_name=SCOPE,
        )
    return handler


async def _flush(providers: Providers) -> None:
    """Export what is queued, waiting at most ``FLUSH_SECONDS`` (an abandoned flush thread is a daemon)."""
    done = threading.Event()

    def flush() -> None:
        millis = int(FLUSH_SECONDS * 1000)
        try:
            providers.tracer_provider.force_flush(millis)
            if providers.meter_provider is not None:
                providers.meter_provider.force_flush(millis)
        finally:
            done.set()

    threading.Thread(target=flush, name="reverie-otel-flush", daemon=True).start()
    await blocking.run_sync("files", partial(done.wait, FLUSH_SECONDS))


class _Span:
    """One open invocation of the GenAI utilities, with what its children need."""

    def __init__(self, invocation: Any, conversation_id: str) -> None:
        self.invocation = invocation
        self.conversation_id = conversation_id
        self.input_tokens = 0
        self.output_tokens = 0

    def context(self) -> Any:
        # optional: the reverie[otel] extra (this class exists only when it is installed)
        from opentelemetry.trace import set_span_in_context

        return set_span_in_context(self.invocation.span)


class Telemetry:
    """The spans of one session (see the module docstring); an ``Observer`` of its events."""

    def __init__(
        self,
        providers: Providers,
        agent_name: str,
        provider: str,
        request_model: Callable[[], str],
        conversation: Callable[[], str],
    ) -> None:
        self.providers = providers
        self.handler = _handler(providers)
        self.root = _parent.get()
        """The workflow the session runs in (a batch task's), parent of its turns; None for a chat."""
        self.workflow = _workflow.get()
        """That workflow's invocation, marked with a limit that stops one of its turns (a batch task)."""
        self.agent_name = agent_name
        self.provider = provider
        self.request_model = request_model
        self.conversation = conversation
        self.capture = self.handler.should_capture_content()
        self._turn: _Span | None = None
        self._last_turn: dict[str, _Span] = {}
        self._tools: dict[str, _Span] = {}
        self._compactions: dict[str, _Span] = {}
        self._reflections: dict[str, _Span] = {}
        self._merges: dict[str, _Span] = {}
        self._last_bash: _Span | None = None
        self.memory_store = ""
        """The memory repository (``gen_ai.memory.store.id`` of the memory spans; the session sets it)."""

    # -- the observer -------------------------------------------------------------------------------

    async def __call__(self, event: Event) -> None:
        handle = _HANDLERS.get(event.kind)
        if handle is not None:
            handle(self, event)

    def _turn_started(self, event: Any) -> None:
        invocation = self.handler.invoke_local_agent(
            agent_name=self.agent_name,
            request_model=self.request_model(),
            conversation_id=event.conversation_id,
            context=self.root,
            _attach_to_context=False,
        )
        invocation.attributes["reverie.turn.id"] = event.turn_id
        self._turn = self._last_turn[event.conversation_id] = _Span(invocation, event.conversation_id)

    def _turn_ended(self, event: Any) -> None:
        span, self._turn = self._turn, None
        self._last_bash = None
        if span is None:
            return
        span.invocation.input_tokens = span.input_tokens
        span.invocation.output_tokens = span.output_tokens
        span.invocation.attributes["reverie.turn.status"] = event.status
        if event.status in ("error", "interrupted", "cancelled"):
            _fail(span, event.status, event.error or event.status)
        else:
            span.invocation.stop()

    def _model_called(self, event: Any) -> None:
        if event.purpose == "chat" and self._turn is not None:
            self._turn.input_tokens += event.prompt_tokens
            self._turn.output_tokens += event.completion_tokens

    def _tool_started(self, event: Any) -> None:
        parent = self._turn
        if parent is None:
            return
        invocation = self.handler.tool(event.name, context=parent.context(), _attach_to_context=False)
        invocation.tool_call_id = event.call_id
        invocation.attributes["gen_ai.conversation.id"] = parent.conversation_id
        if self.capture:
            invocation.attributes["gen_ai.tool.call.arguments"] = event.arguments
        self._tools[event.call_id] = _Span(invocation, parent.conversation_id)

    def _tool_finished(self, event: Any) -> None:
        span = self._tools.pop(event.call_id, None)
        if span is None:
            return
        if event.name == "bash":
            self._last_bash = span
        if self.capture:
            span.invocation.attributes["gen_ai.tool.call.result"] = event.output
        if event.ok:
            span.invocation.stop()
        else:
            _fail(span, "tool_error", event.output)

    def _subagent(self, name: str, key: str, into: dict[str, _Span], attributes: Mapping[str, Any]) -> None:
        conversation_id = self.conversation()
        parent = self._turn or self._last_turn.get(conversation_id)
        invocation = self.handler.invoke_local_agent(
            agent_name=name,
            request_model=self.request_model(),
            conversation_id=conversation_id,
            context=parent.context() if parent is not None else self.root,
            _attach_to_context=False,
        )
        invocation.attributes.update(attributes)
        into[key] = _Span(invocation, conversation_id)

    def _compaction_started(self, event: Any) -> None:
        if event.compaction_id:
            attributes = {"reverie.compaction.id": event.compaction_id, "reverie.compaction.background": event.background}
            self._subagent("compaction", event.compaction_id, self._compactions, attributes)

    def _compaction_ended(self, event: Any) -> None:
        span = self._compactions.pop(getattr(event, "compaction_id", ""), None)
        if span is None:
            return
        outcome = event.kind.removeprefix("compaction.")
        span.invocation.attributes["reverie.compaction.outcome"] = outcome
        if outcome == "done":
            span.invocation.attributes["reverie.compaction.evicted"] = event.evicted
        if outcome in ("failed", "cancelled"):
            _fail(span, f"compaction_{outcome}", getattr(event, "error", "") or getattr(event, "reason", ""))
        else:
            span.invocation.stop()

    def _reflection_launched(self, event: Any) -> None:
        attributes = {"reverie.reflection.id": event.reflection_id, "reverie.reflection.trigger": event.trigger}
        self._subagent("reflection", event.reflection_id, self._reflections, attributes)

    def _merge_started(self, event: Any) -> None:
        parent = self._reflections.get(event.reflection_id)
        if parent is None:
            return
        invocation = self.handler.workflow(
            "merge_back", context=parent.context(), _attach_to_context=False, conversation_id=parent.conversation_id
        )
        self._merges[event.reflection_id] = _Span(invocation, parent.conversation_id)

    def _merge_ended(self, event: Any) -> None:
        span = self._merges.pop(event.reflection_id, None)
        if span is not None:
            span.invocation.attributes["reverie.merge.outcome"] = event.kind.removeprefix("reflection.")
            span.invocation.stop()

    def _reflection_settled(self, event: Any) -> None:
        self._merge_ended(event)
        span = self._reflections.pop(event.reflection_id, None)
        if span is None:
            return
        span.invocation.attributes["reverie.reflection.outcome"] = event.outcome
        if event.outcome == "failed":
            _fail(span, "reflection_failed", event.error)
        else:
            span.invocation.stop()

    def _limit_reached(self, event: Any) -> None:
        """B1: the span a limit stopped carries it (``reverie.limit``: ``reflection.calls``, with its
        cap, what was spent and what the refused request needed) and ends as the stop it is, not as
        an error (L1): a reflection's or resolver's launch (``subject``: its id or branch), a
        compaction, else the turn, and the batch task the turn belongs to."""
        attributes = {
            "reverie.limit": event.limit,
            "reverie.limit.cap": float(event.cap),
            "reverie.limit.spent": float(event.spent),
            "reverie.limit.needed": float(event.needed),
        }
        spans: list[Any] = []
        if event.scope == "compaction":
            spans = [s.invocation for s in list(self._compactions.values())[-1:]]
        elif event.scope == "resolver":
            spans = [s.invocation for key, s in self._merges.items() if key in event.subject]
        elif event.subject:
            spans = [s.invocation for s in (self._reflections.get(event.subject),) if s is not None]
        else:
            turn = self._turn or self._last_turn.get(self.conversation())
            spans = [s.invocation for s in (turn,) if s is not None]
            if self.workflow is not None:
                spans.append(self.workflow)
        for invocation in spans:
            invocation.attributes.update(attributes)

    def _memory_committed(self, event: Any) -> None:
        """V2: one GenAI memory span per change, under the span that made it (the bash call of the
        turn that committed, the reflection that merged, else the turn that saw it), ended at once:
        the commit is the record (``gen_ai.memory.record.id``) in the repository (``store.id``)."""
        # optional: the reverie[otel] extra (Telemetry exists only when it is installed)
        from opentelemetry.trace import SpanKind

        turn = self._turn or self._last_turn.get(self.conversation())
        parent: _Span | None = turn
        if event.source == "turn" and self._last_bash is not None:
            parent = self._last_bash
        elif event.source == "reflection":
            parent = self._reflections.get(event.by) or turn
        operation = "delete_memory" if event.operation == "delete" else "update_memory"
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": operation,
            "gen_ai.memory.store.id": self.memory_store,
            "gen_ai.memory.record.id": event.revision,
            "reverie.memory.source": event.source,
            "reverie.memory.by": event.by,
            "reverie.memory.files": list(event.files),
        }
        if event.previous_revision:
            attributes["reverie.memory.previous_revision"] = event.previous_revision
        for key, value in (event.provenance or {}).items():
            attributes[f"reverie.memory.provenance.{key}"] = value
        if parent is not None:
            attributes["gen_ai.conversation.id"] = parent.conversation_id
        tracer = self.providers.tracer_provider.get_tracer(SCOPE)
        context = parent.context() if parent is not None else self.root
        tracer.start_span(operation, context=context, kind=SpanKind.CLIENT, attributes=attributes).end()

    # -- model calls ----------------------------------------------------------------------------------

    def parent_for(self, purpose: str) -> _Span | None:
        """The span a model call of ``purpose`` belongs to: its subagent's, else the turn's."""
        if purpose == "summarize" and self._compactions:
            return list(self._compactions.values())[-1]
        if purpose == "resolve" and self._merges:
            return list(self._merges.values())[-1]
        if purpose in ("reflect", "resolve") and self._reflections:
            return list(self._reflections.values())[-1]
        return self._turn or self._last_turn.get(self.conversation())

    def model(self, inner: ModelClient) -> TracedModel:
        return TracedModel(inner, self)

    # -- the end --------------------------------------------------------------------------------------

    async def close(self) -> None:
        """End what is still open (the session ended under it), then flush owned exporters off the loop."""
        for spans in (self._tools, self._merges, self._compactions, self._reflections):
            for span in spans.values():
                _fail(span, "cancelled", "the session ended first")
            spans.clear()
        if self._turn is not None:
            _fail(self._turn, "cancelled", "the session ended first")
            self._turn = None
        if self.providers.owned and self.root is None:
            await _flush(self.providers)


def _fail(span: _Span, kind: str, message: str) -> None:
    _fail_invocation(span.invocation, kind, message)


def _fail_invocation(invocation: Any, kind: str, message: str) -> None:
    # optional: the reverie[otel] extra (an invocation exists only when it is installed)
    from opentelemetry.util.genai.types import Error

    invocation.fail(Error(message=" ".join(message.split())[:300], type=kind))


_HANDLERS: dict[str, Callable[[Telemetry, Any], None]] = {
    "turn.start": Telemetry._turn_started,
    "turn.end": Telemetry._turn_ended,
    "model.call": Telemetry._model_called,
    "tool.start": Telemetry._tool_started,
    "tool.end": Telemetry._tool_finished,
    "compaction.start": Telemetry._compaction_started,
    "compaction.done": Telemetry._compaction_ended,
    "compaction.failed": Telemetry._compaction_ended,
    "compaction.cancelled": Telemetry._compaction_ended,
    "compaction.superseded": Telemetry._compaction_ended,
    "reflection.launch": Telemetry._reflection_launched,
    "reflection.merging": Telemetry._merge_started,
    "reflection.merged": Telemetry._merge_ended,
    "reflection.kept": Telemetry._merge_ended,
    "reflection.pending": Telemetry._merge_ended,
    "reflection.outcome": Telemetry._reflection_settled,
    "memory.commit": Telemetry._memory_committed,
    "limit.reached": Telemetry._limit_reached,
}


class TracedModel:
    """A ``ModelClient`` whose every call is a ``chat`` span under ``telemetry.parent_for(purpose)``;
    other attributes are the inner client's (as ``MeteredModel``)."""

    def __init__(self, inner: ModelClient, telemetry: Telemetry) -> None:
        self.inner = inner
        self.telemetry = telemetry

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def complete(self, request: ModelRequest, *, on_text: TextSink | None = None) -> ModelResponse:
        # optional: the reverie[otel] extra (a TracedModel exists only when it is installed)
        from opentelemetry.util.genai.types import Error

        telemetry = self.telemetry
        parent = telemetry.parent_for(request.purpose)
        invocation = telemetry.handler.inference(
            telemetry.provider,
            request_model=request.model or telemetry.request_model(),
            context=parent.context() if parent is not None else None,
            _attach_to_context=False,
        )
        conversation_id = parent.conversation_id if parent is not None else telemetry.conversation()
        invocation.attributes["gen_ai.conversation.id"] = conversation_id
        invocation.attributes["reverie.purpose"] = request.purpose
        if telemetry.capture:
            invocation.input_messages = _input_messages(request)
        try:
            response = await self.inner.complete(request, on_text=on_text)
        except ModelError as exc:
            kind = str(exc.status) if getattr(exc, "status", None) else type(exc).__name__
            invocation.fail(Error(message=str(exc)[:300], type=kind))
            raise
        except BaseException as exc:
            invocation.fail(Error(message="cancelled", type="cancelled" if _cancelled(exc) else type(exc).__name__))
            raise
        invocation.response_model_name = response.model or request.model
        invocation.finish_reasons = [response.finish_reason]
        invocation.input_tokens = response.usage.prompt_tokens
        invocation.output_tokens = response.usage.completion_tokens
        if telemetry.capture:
            invocation.output_messages = _output_messages(response)
        invocation.stop()
        return response


def _cancelled(exc: BaseException) -> bool:
    return isinstance(exc, anyio.get_cancelled_exc_class())


def _input_messages(request: ModelRequest) -> list[Any]:
    # optional: the reverie[otel] extra
    from opentelemetry.util.genai.types import InputMessage, Text

    messages = [InputMessage(role="system", parts=[Text(content=request.system)])] if request.system else []
    messages += [InputMessage(role=m.role, parts=[Text(content=m.content)]) for m in request.messages]
    return messages


def _output_messages(response: ModelResponse) -> list[Any]:
    # optional: the reverie[otel] extra
    from opentelemetry.util.genai.types import OutputMessage, Text, ToolCallRequestPart

    parts: list[Any] = [Text(content=response.message.content)] if response.message.content else []
    parts += [ToolCallRequestPart(arguments=c.arguments, name=c.name, id=c.id) for c in response.message.tool_calls]
    return [OutputMessage(role="assistant", parts=parts, finish_reason=response.finish_reason)]

