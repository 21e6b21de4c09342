"""GenAI spans and metrics of a real chat session (scripted model, real git and SQLite): the span tree
of one turn with a tool call and a reflection through the SDK's in-memory exporter, content only
when asked for, off when not configured, and a one-shot's OTLP/HTTP export as a collector on
127.0.0.1 decodes it (``orchestrator/testing/otlp_collector.py``), memory spans checked against git."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.util.genai", reason="the reverie[otel] extra is not installed")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from orchestrator.app import telemetry as telemetry_module
from orchestrator.app.session import ChatSession
from orchestrator.app.telemetry import installed, open_telemetry, otel_configured
from orchestrator.testing.otlp_collector import LoopbackCollector

pytestmark = pytest.mark.anyio


class _Traced:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.metrics = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.metrics])

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def metric_names(self) -> set[str]:
        data = self.metrics.get_metrics_data()
        assert data is not None
        return {m.name for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}


@pytest.fixture
def traced() -> Iterator[_Traced]:
    t = _Traced()
    with installed(t.tracer_provider, t.meter_provider):
        yield t


def _one(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


def _parent(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


async def test_one_turn_with_a_tool_call_and_a_reflection_is_one_span_tree(traced: _Traced, tmp_path: Path) -> None:
    cli = {"reflection_trigger": "step-count:1"}
    async with ChatSession.open(agent_id="traced", workspace=tmp_path, cli=cli) as session:
        outcome = await session.send("remember that I like owls")
        await session.supervisor.drain(30)
        conversation = session.conversation_id
        agent_name = session.agent.name
    spans = traced.finished()
    turn = _one(spans, f"invoke_agent {agent_name}")
    assert turn.parent is None
    attrs = dict(turn.attributes or {})
    assert attrs["gen_ai.operation.name"] == "invoke_agent" and attrs["reverie.turn.id"] == outcome.turn_id
    assert attrs["gen_ai.usage.input_tokens"] == outcome.usage.prompt_tokens > 0
    turn_id = turn.context.span_id

    tool = _one(spans, "execute_tool bash")
    assert _parent(tool) == turn_id and (tool.attributes or {})["gen_ai.tool.call.id"]
    chats = [s for s in spans if s.name == "chat scripted" and _parent(s) == turn_id]
    assert len(chats) == outcome.steps == 2, "one chat span per request of the turn"
    first = dict(chats[0].attributes or {})
    assert first["gen_ai.provider.name"] == "reverie.scripted" and first["gen_ai.request.model"] == "scripted"
    assert first["gen_ai.response.model"] == "scripted" and first["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert first["gen_ai.usage.input_tokens"] > 0 and first["gen_ai.usage.output_tokens"] > 0
    assert "gen_ai.input.messages" not in first, "no content unless OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

    reflection = _one(spans, "invoke_agent reflection")
    assert _parent(reflection) == turn_id
    assert (reflection.attributes or {})["reverie.reflection.outcome"] in ("merged", "no_changes")
    reading = [s for s in spans if _parent(s) == reflection.context.span_id and s.name.startswith("chat ")]
    assert reading and all((s.attributes or {})["reverie.purpose"] == "reflect" for s in reading)
    merge = _one(spans, "invoke_workflow merge_back")
    assert _parent(merge) == reflection.context.span_id

    assert {(s.attributes or {}).get("gen_ai.conversation.id") for s in spans} == {conversation}
    assert {"gen_ai.client.operation.duration", "gen_ai.client.token.usage"} <= traced.metric_names()


async def test_a_failed_model_call_is_a_chat_span_with_its_error_type(traced: _Traced, tmp_path: Path) -> None:
    from orchestrator.models.scripted import ScriptedModel
    from orchestrator.models.types import ModelError, ModelRequest, ModelResponse

    def fail(request: ModelRequest) -> ModelResponse:
        raise ModelError("model error: upstream said 503", status=503)

    async with ChatSession.open(agent_id="traced", workspace=tmp_path, model=ScriptedModel(script=[fail])) as session:
        outcome = await session.send("hi")
    assert outcome.status == "error"
    spans = traced.finished()
    chat = _one(spans, "chat scripted")
    assert (chat.attributes or {})["error.type"] == "503" and chat.status.status_code.name == "ERROR"
    turn = next(s for s in spans if s.name.startswith("invoke_agent"))
    assert (turn.attributes or {})["error.type"] == "error" and (turn.attributes or {})["reverie.turn.status"] == "error"


async def test_message_content_only_when_asked_for(
    traced: _Traced, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    async with ChatSession.open(agent_id="traced", workspace=tmp_path) as session:
        await session.send("the word is heron")
    chat = _one(traced.finished(), "chat scripted")
    attrs = dict(chat.attributes or {})
    assert "heron" in str(attrs["gen_ai.input.messages"]) and "I heard" in str(attrs["gen_ai.output.messages"])


def test_telemetry_is_off_unless_otel_variables_ask_for_it() -> None:
    def made(env: dict[str, str]) -> object:
        return open_telemetry("a", provider="p", request_model=lambda: "m", conversation=lambda: "c", environ=env)

    assert made({}) is None and not otel_configured({})
    assert not otel_configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"})
    assert not otel_configured({"OTEL_TRACES_EXPORTER": "none"})
    assert otel_configured({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"})


def _one_shot(collector: LoopbackCollector, home: Path, text: str, **extra: str) -> subprocess.CompletedProcess[str]:
    """``reverie chat -p TEXT`` in a child process, exporting to ``collector`` as a user would."""
    env = dict(
        os.environ,
        REVERIE_HOME=str(home),
        OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint,
        OTEL_SERVICE_NAME="reverie-under-test",
        **extra,
    )
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", "chat", "-p", text], env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_an_otlp_http_export_reaches_a_loopback_receiver(tmp_path: Path) -> None:
    with LoopbackCollector() as collector:
        proc = _one_shot(collector, tmp_path, "remember that I like owls")
    assert proc.returncode == 0, proc.stderr
    spans = collector.spans()
    names = {span.name for span in spans}
    assert {"invoke_agent agent-default", "chat scripted", "execute_tool bash"} <= names, names
    assert {span.resource.get("service.name") for span in spans} == {"reverie-under-test"}
    assert {"gen_ai.client.operation.duration", "gen_ai.client.token.usage"} <= collector.metric_names()


def _trailer_sources(memory: Path) -> dict[str, str]:
    """commit -> its ``Reverie-Source`` as git itself reads the trailers."""
    said = subprocess.run(
        ["git", "log", "--format=%H%x1f%(trailers:key=Reverie-Source,valueonly,separator=)%x1e"],
        cwd=memory, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    pairs = (record.strip("\n").split("\x1f") for record in said.split("\x1e") if record.strip())
    return {sha: source.strip() or "outside" for sha, source in pairs}


def test_each_memory_change_reaches_an_otlp_collector_as_an_update_memory_span(tmp_path: Path) -> None:
    """V2 over the wire: two one-shots that commit (the agent's edit, then a reflection's) export
    each commit as an ``update_memory`` span whose record id is the commit (git is the oracle), in
    the repository it names, under the span that made it; nothing but OTEL_* configures it."""
    with LoopbackCollector() as collector:
        edit = _one_shot(collector, tmp_path, "remember that I like owls", REVERIE_REFLECTION_TRIGGER="off")
        assert edit.returncode == 0, edit.stderr
        fact = _one_shot(collector, tmp_path, "my name is Ada", REVERIE_REFLECTION_TRIGGER="step-count:1")
        assert fact.returncode == 0, fact.stderr
    memory = tmp_path / "agents" / "agent-default" / "memory"
    truth = {sha: source for sha, source in _trailer_sources(memory).items() if source != "init"}
    assert set(truth.values()) >= {"agent", "reflection"}, truth
    spans = collector.spans()
    by_id = {span.span_id: span for span in spans}
    updates = [span for span in spans if span.name == "update_memory"]
    assert sorted(span.attributes["gen_ai.memory.record.id"] for span in updates) == sorted(truth)
    for span in updates:
        commit = span.attributes["gen_ai.memory.record.id"]
        assert span.attributes["gen_ai.operation.name"] == "update_memory"
        assert Path(span.attributes["gen_ai.memory.store.id"]).resolve() == memory.resolve()
        assert span.attributes["reverie.memory.provenance.source"] == truth[commit]
        parent = by_id[span.parent]
        made_by = "execute_tool bash" if truth[commit] == "agent" else "invoke_agent reflection"
        assert parent.name == made_by and parent.trace_id == span.trace_id, (truth[commit], parent.name)


async def test_a_batch_run_and_its_tasks_are_workflows_around_the_turns(traced: _Traced, tmp_path: Path) -> None:
    import anyio

    from orchestrator.batch.executors import LocalExecutor
    from orchestrator.batch.run import run_suite
    from orchestrator.batch.runner import RunOptions
    from orchestrator.batch.suite import load_suite
    from tests.batch.helpers import write_suite

    tasks = await anyio.to_thread.run_sync(load_suite, write_suite(tmp_path / "s.jsonl"))
    await run_suite(tasks[:2], RunOptions(out_dir=tmp_path / "out"), LocalExecutor(1), suite_name="tiny")
    spans = traced.finished()
    run = _one(spans, "invoke_workflow run tiny")
    assert run.parent is None
    task_spans = [s for s in spans if s.name.startswith("invoke_workflow task ")]
    assert {s.name for s in task_spans} == {f"invoke_workflow task {t.id}" for t in tasks[:2]}
    assert all(_parent(s) == run.context.span_id for s in task_spans)
    for task_span in task_spans:
        turns = [s for s in spans if s.name.startswith("invoke_agent ") and _parent(s) == task_span.context.span_id]
        assert turns, f"{task_span.name} has its turns as children"


async def test_each_memory_change_is_an_update_memory_span_under_what_made_it(traced: _Traced, tmp_path: Path) -> None:
    """V2: the turn's commit is an ``update_memory`` span under its bash call, a merged reflection's
    under the reflection; each carries the repository and its commit id, as the event log does."""
    cli = {"reflection_trigger": "step-count:1"}
    async with ChatSession.open(agent_id="mem", workspace=tmp_path, cli=cli) as session:
        await session.send("remember that I like owls")
        await session.supervisor.drain(30)
        await session.send("I prefer green tea")
        await session.supervisor.drain(30)
        memory = str(session.agent.memory_dir)
        logged = await session.runtime.store.events(agent_id="mem", kinds=["memory.commit"])
    spans = traced.finished()
    updates = [s for s in spans if s.name == "update_memory"]
    assert logged and len(updates) == len(logged)
    by_commit = {(s.attributes or {})["gen_ai.memory.record.id"]: s for s in updates}
    assert set(by_commit) == {e.payload["revision"] for e in logged}
    for event in logged:
        attrs = dict(by_commit[event.payload["revision"]].attributes or {})
        assert attrs["gen_ai.operation.name"] == "update_memory" and attrs["gen_ai.memory.store.id"] == memory
        assert attrs["reverie.memory.source"] == event.payload["source"]
    sources = {e.payload["source"] for e in logged}
    assert {"turn", "reflection"} <= sources, sources
    tool_ids = {s.context.span_id for s in spans if s.name == "execute_tool bash"}
    reflection_ids = {s.context.span_id for s in spans if s.name == "invoke_agent reflection"}
    for span in updates:
        source = (span.attributes or {})["reverie.memory.source"]
        assert _parent(span) in (tool_ids if source == "turn" else reflection_ids), source


def _limit_of(span: ReadableSpan) -> tuple[Any, ...]:
    attrs = dict(span.attributes or {})
    return attrs.get("reverie.limit"), attrs.get("reverie.limit.cap"), attrs.get("reverie.limit.spent")


async def test_a_turn_stopped_at_a_limit_carries_it_and_is_no_error(traced: _Traced, tmp_path: Path) -> None:
    from opentelemetry.trace import StatusCode

    async with ChatSession.open(agent_id="capped", workspace=tmp_path, cli={"limit_session_tokens": 6000}) as session:
        first = await session.send("hello")
        assert first.status == "end_turn"
        second = await session.send("again " * 3000)
        assert second.status == "limit"
        agent_name = session.agent.name
    turns = {dict(s.attributes or {})["reverie.turn.id"]: s for s in traced.finished() if s.name == f"invoke_agent {agent_name}"}
    assert _limit_of(turns[first.turn_id]) == (None, None, None)
    stopped = turns[second.turn_id]
    limit, cap, spent = _limit_of(stopped)
    assert (limit, cap) == ("session.tokens", 6000.0) and 0 < spent <= 6000
    assert dict(stopped.attributes or {})["reverie.limit.needed"] > cap - spent
    assert dict(stopped.attributes or {})["reverie.turn.status"] == "limit"
    assert stopped.status.status_code != StatusCode.ERROR, "a limit is a clean stop (B1)"


async def test_a_reflection_stopped_at_its_limit_carries_it(traced: _Traced, tmp_path: Path) -> None:
    cli = {"reflection_trigger": "step-count:1", "limit_reflection_calls": 1}
    async with ChatSession.open(agent_id="refl", workspace=tmp_path, cli=cli) as session:
        await session.send("remember: I live in Lisbon")
        assert await session.supervisor.drain(30)
        records = await session.runtime.store.reflections("refl")
    assert [r.status for r in records] == ["limit"]
    reflection = _one(traced.finished(), "invoke_agent reflection")
    assert _limit_of(reflection) == ("reflection.calls", 1.0, 1.0)
    attrs = dict(reflection.attributes or {})
    assert attrs["reverie.reflection.outcome"] == "limit" and attrs["reverie.reflection.id"] == records[0].id
    turn = next(s for s in traced.finished() if s.name.startswith("invoke_agent ") and s.name != "invoke_agent reflection")
    assert _limit_of(turn) == (None, None, None), "the turn it ran after was not stopped"


async def test_a_batch_task_stopped_at_its_limit_carries_it_on_its_workflow_span(traced: _Traced, tmp_path: Path) -> None:
    import anyio

    from orchestrator.batch.executors import LocalExecutor
    from orchestrator.batch.run import run_suite
    from orchestrator.batch.runner import RunOptions
    from orchestrator.batch.suite import load_suite
    from tests.batch.helpers import write_suite

    suite = write_suite(tmp_path / "s.jsonl", [
        {"id": "long", "turns": ["one", "two", "three"], "settings": {"reflection_trigger": "off"}, "checks": [{"contains": "x"}]},
    ])  # fmt: skip
    tasks = await anyio.to_thread.run_sync(load_suite, suite)
    options = RunOptions(out_dir=tmp_path / "out", overrides={"limit_task_tokens": 10})
    report = await run_suite(tasks, options, LocalExecutor(1), suite_name="capped")
    assert [r.status for r in report.results] == ["limit"]
    task = _one(traced.finished(), "invoke_workflow task long")
    assert _limit_of(task) == ("task.tokens", 10.0, 0.0)
    run = _one(traced.finished(), "invoke_workflow run capped")
    assert _limit_of(run) == (None, None, None)



def test_a_new_set_of_providers_never_gets_a_freed_sets_handler() -> None:
    """Providers installed one after another (an embedding program's, each test's) each get their
    own handler: a freed set's address is soon reused, and a handler found by ``id()`` sent a new
    set's spans to the old exporter (no span reached the new one)."""
    tracers = [TracerProvider() for _ in range(20)]
    handlers: list[Any] = []
    for tracer in tracers:
        handler = telemetry_module._handler(telemetry_module.Providers(tracer))
        assert all(handler is not old for old in handlers)
        handlers.append(handler)
