"""reverie as a library, through ``orchestrator``'s public names only (docs/api.md): a chat session
(send, stream, reflect, compact, set_model, usage), a suite run interrupted and resumed, a sweep, a
stress run, a report, settings with their sources, and a batch beside a chat in one process."""

from __future__ import annotations

import gc
import json
import os
from pathlib import Path

import anyio
import pytest

import orchestrator
from orchestrator import (
    Home,
    Settings,
    load_effective_settings,
    open_session,
    report,
    run_suite,
    stress,
    sweep,
)

pytestmark = pytest.mark.anyio

TASKS = [
    {"id": f"t{i}", "turns": ["remember: I live in Lisbon", "ok"],
     "checks": [{"where": "memory", "file": "human.md", "contains": "Lisbon"}]}
    for i in range(4)
]


def _suite(path: Path) -> Path:
    path.write_text("".join(json.dumps(t) + "\n" for t in TASKS), encoding="utf-8")
    return path


def test_the_package_exports_exactly_its_public_names() -> None:
    for name in orchestrator.__all__:
        assert getattr(orchestrator, name) is not None
    with pytest.raises(AttributeError):
        _ = orchestrator.ChatSession  # type: ignore[attr-defined]


async def test_a_chat_session_sends_streams_reflects_compacts_and_switches_model(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    async with open_session("ada", home=home, settings={"context_window": 4000}, price_in=1.0, price_out=2.0) as chat:
        first = await chat.send("remember: I live in Lisbon")
        assert first.status == "end_turn" and first.text
        kinds = [event.kind async for event in chat.stream("hello there")]
        assert kinds[0] == "turn.start" and kinds[-1] == "turn.end" and "text.delta" in kinds
        assert chat.last_result is not None and chat.last_result.status == "end_turn"
        await chat.set_model("second-model")
        assert chat.settings.model == "second-model"
        assert ("model.name", "second-model", "set_model") in chat.settings.explain()
        reflected = await chat.reflect()
        assert reflected is not None and reflected.status in {"merged", "no_changes"}
        compacted = await chat.compact()
        assert compacted.status in {"done", "skipped"}
        usage = chat.usage
        assert usage.calls >= 2 and usage.prompt_tokens > 0 and usage.cost is not None and usage.cost > 0
        assert await chat.cost() == usage.cost  # what the store recorded, priced as counted live
    assert (home.root / "agents" / "ada" / "memory" / ".git").is_dir()


async def test_a_suite_run_interrupted_and_resumed_records_every_task_once(tmp_path: Path) -> None:
    suite, out = _suite(tmp_path / "suite.jsonl"), tmp_path / "run"
    with anyio.CancelScope() as scope:

        async def stop_after_first(task_id: str, kind: str, payload: object) -> None:
            if kind == "task.end":
                scope.cancel()

        await run_suite(suite, out, concurrency=1, processes=1, progress=stop_after_first)
    assert scope.cancelled_caught
    done = (out / "results.jsonl").read_text(encoding="utf-8").splitlines()
    assert 1 <= len(done) < len(TASKS)
    resumed = await run_suite(suite, out, resume=True)
    assert len(resumed.skipped) == len(done)
    assert sorted(r.id for r in resumed.results) == [t["id"] for t in TASKS]
    assert resumed.summary["passed"] == len(TASKS)
    lines = (out / "results.jsonl").read_text(encoding="utf-8").splitlines()
    assert sorted(json.loads(line)["id"] for line in lines) == [t["id"] for t in TASKS]
    page = await report(out)
    assert page == out / "report.html" and page.stat().st_size > 0


async def test_a_suite_run_takes_the_run_limits_and_the_estimate_the_command_takes(tmp_path: Path) -> None:
    suite = _suite(tmp_path / "suite.jsonl")
    estimated = await run_suite(suite, tmp_path / "est", limit=1, processes=1, estimate=True)
    assert [r.id for r in estimated.results] == ["t0"]
    rows = json.loads((tmp_path / "est" / "estimate.json").read_text(encoding="utf-8"))
    assert "run" in json.dumps(rows) and not (tmp_path / "est" / "results.jsonl").exists()
    limited = await run_suite(suite, tmp_path / "run", concurrency=1, processes=1, max_tokens=1, on_limit="finish")
    assert limited.summary["run_limit"]["limit"] == "run.tokens"
    assert 1 <= len(limited.results) < len(TASKS)


async def test_a_sweep_compares_its_settings(tmp_path: Path) -> None:
    result = await sweep(_suite(tmp_path / "suite.jsonl"), ["off", "step-count:2"], tmp_path / "sweep", processes=1)
    assert [row["setting"] for row in result.rows] == ["off", "step-count-2"]
    assert all(row["tasks"] == len(TASKS) for row in result.rows)


async def test_a_sweep_runs_epochs_leaves_pinned_tasks_out_and_resumes_with_what_it_recorded(tmp_path: Path) -> None:
    suite = tmp_path / "suite.jsonl"
    pinned = {"id": "pinned", "turns": ["hello"], "checks": [{"contains": "hello"}], "settings": {"reflection_trigger": "off"}}
    suite.write_text("".join(json.dumps(t) + "\n" for t in [*TASKS[:2], pinned]), encoding="utf-8")
    out = tmp_path / "sweep"
    first = await sweep(suite, ["off"], out, processes=1, epochs=2, price_in=1.0, price_out=2.0)
    assert first.summary["epochs"] == 2 and first.summary["pinned"] == {"pinned": "off"}
    assert {r.id for r in first.runs[0].results} == {f"t{i}.epoch-{k}" for i in range(2) for k in (1, 2)}
    assert first.summary["cost_unit"] == "cost" and first.summary["recommendation"]["setting"] == "off"
    again = await sweep(suite, None, out, resume=True)  # settings, epochs and prices as recorded
    assert again.summary["epochs"] == 2 and again.summary["cost_unit"] == "cost"
    assert again.runs[0].skipped and not again.runs[0].ran
    with pytest.raises(orchestrator.ReverieError, match="nothing to compare"):
        await sweep(suite, ["off"], tmp_path / "none", tasks=["pinned"])
    assert not (tmp_path / "none").exists()


async def test_a_sweep_under_a_budget_that_stops_keeps_the_settings_paired_and_resumes_with_a_raised_one(
    tmp_path: Path,
) -> None:
    """docs/design.md L3: the budget is the sweep's; with ``on_limit="stop"`` a setting the stop
    reaches before it starts runs nothing more, and the decision compares only paired tasks."""
    suite, out = _suite(tmp_path / "suite.jsonl"), tmp_path / "sweep"
    first = await sweep(suite, ["off", "step-count:2"], out, processes=1, max_tokens=1, on_limit="stop")
    stopped = first.summary["sweep_limit"]
    assert stopped["limit"] == "sweep.tokens" and stopped["on_limit"] == "stop" and stopped["cap"] == 1
    assert stopped["ran"] == {"off": 1, "step-count-2": 0} and stopped["of"] == len(TASKS)
    assert [row["samples"] for row in first.summary["settings"]] == [0, 0], "an unpaired task is not compared"
    assert "Stopped at the sweep's tokens limit" in (out / "summary.md").read_text(encoding="utf-8")
    recorded = json.loads((out / "sweep.json").read_text(encoding="utf-8"))
    assert (recorded["run_limits"], recorded["on_limit"]) == ({"tokens": 1}, "stop")
    held = await sweep(suite, None, out, resume=True)  # the recorded budget still holds
    assert held.summary["sweep_limit"]["ran"] == {"off": 1, "step-count-2": 0}
    done = await sweep(suite, None, out, resume=True, max_tokens=10**9)
    assert done.summary["sweep_limit"] is None
    assert [row["samples"] for row in done.summary["settings"]] == [len(TASKS)] * 2
    with pytest.raises(orchestrator.ReverieError, match="--on-limit 'later'"):
        await sweep(suite, ["off"], tmp_path / "bad", max_tokens=5, on_limit="later")


async def test_a_stress_run_loses_nothing(tmp_path: Path) -> None:
    result = await stress(2, 3, workdir=tmp_path / "stress")
    assert result.lost == 0 and result.merged + result.kept >= 1


async def test_a_stress_run_under_the_resolve_policy_resolves_as_the_command_does(tmp_path: Path) -> None:
    """``merge_policy="resolve"`` brings the scripted resolver, as ``reverie stress`` (a thin call
    into this function) always has: conflicts on the hot file are resolved, not kept."""
    result = await stress(3, 5, conflict_rate=0.3, seed=1, merge_policy="resolve", workdir=tmp_path / "stress")
    assert result.lost == 0 and result.resolved > 0


async def test_a_batch_beside_a_chat_leaves_the_chat_home_and_the_process_alone(tmp_path: Path) -> None:
    chat_home = Home(tmp_path / "chat-home")
    environ, thresholds = dict(os.environ), gc.get_threshold()
    async with open_session("ada", home=chat_home, settings={"model": "chat-model"}) as chat:
        await chat.send("hello")
        report_ = await run_suite(_suite(tmp_path / "suite.jsonl"), tmp_path / "run", concurrency=2, processes=1)
        assert report_.summary["passed"] == len(TASKS)
        after = await chat.send("still here?")
        assert after.status == "end_turn"
        assert chat.home == chat_home and chat.settings.model == "chat-model"
        assert dict(os.environ) == environ and gc.get_threshold() == thresholds
    assert sorted(p.name for p in (chat_home.root / "agents").iterdir()) == ["ada"]
    assert sorted(p.name for p in (tmp_path / "run" / "home" / "agents").iterdir()) == [t["id"] for t in TASKS]


def test_settings_name_each_value_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = Home(tmp_path / "home")
    home.root.mkdir()
    home.config_path.write_text('[model]\nname = "from-file"\n[turn]\nmax_steps = 7\n', encoding="utf-8")
    monkeypatch.setenv("REVERIE_MODEL", "from-env")
    settings = load_effective_settings({"context_window": 9000}, home=home, agent={"max_steps": 9})
    assert isinstance(settings, Settings)
    rows = {key: (value, source) for key, value, source in settings.explain()}
    assert rows["model.name"] == ("from-env", "REVERIE_MODEL")
    assert rows["turn.max_steps"] == ("9", "agent setting max_steps")
    assert rows["compaction.context_window"] == ("9000", "context_window")  # a library parameter, not a flag
    assert rows["turn.bash_timeout"] == ("120.0", "default")


async def test_closing_a_stream_early_interrupts_its_turn(tmp_path: Path) -> None:
    from contextlib import aclosing

    async with open_session("ada", home=Home(tmp_path / "home"), settings={"reflection_trigger": "off"}) as chat:
        async with aclosing(chat.stream("tell me a story")) as events:
            async for event in events:
                if event.kind == "turn.start":
                    break
        again = await chat.send("are you there?")
        assert again.status == "end_turn"
    async with open_session("ada", home=Home(tmp_path / "home")) as chat:
        turns = await chat.chat.runtime.store.turns(chat.conversation_id)
        assert [t.status for t in turns][:1] == ["interrupted"]


async def test_paths_may_be_strings_as_python_users_pass_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _suite(tmp_path / "suite.jsonl")
    result = await run_suite("suite.jsonl", "runs/x", limit=1)
    assert [r.id for r in result.results] == ["t0"] and (tmp_path / "runs" / "x" / "results.jsonl").is_file()
    page = await report(os.fspath(tmp_path / "runs" / "x"))
    assert page.is_file()
    async with open_session("a", home="h", workspace=str(tmp_path)) as chat:
        assert (await chat.send("hello")).status == "end_turn"
        assert chat.home == Home(Path("h"))
    assert (tmp_path / "h" / "reverie.sqlite3").is_file()


@pytest.mark.parametrize(
    ("call", "parameter"),
    [
        (lambda: open_session(3), "agent"),  # type: ignore[arg-type]
        (lambda: open_session("a", 7), "conversation"),  # type: ignore[arg-type]
        (lambda: open_session("a", home=4.5), "home"),  # type: ignore[arg-type]
        (lambda: open_session("a", workspace=[1]), "workspace"),  # type: ignore[arg-type]
        (lambda: Home(12), "root"),  # type: ignore[arg-type]
    ],
)
def test_a_wrong_type_is_a_type_error_naming_the_parameter_at_the_call(call: object, parameter: str) -> None:
    with pytest.raises(TypeError, match=rf"^{parameter} must be"):
        call()  # type: ignore[operator]


@pytest.mark.parametrize(
    ("make", "parameter"),
    [
        (lambda: run_suite(5, "out"), "suite"),  # type: ignore[arg-type]
        (lambda: run_suite("s.jsonl", 5), "out"),  # type: ignore[arg-type]
        (lambda: sweep(b"s.jsonl", ["off"]), "suite"),  # type: ignore[arg-type]
        (lambda: report(None), "run_dir"),  # type: ignore[arg-type]
        (lambda: stress(1, 1, workdir=3), "workdir"),  # type: ignore[arg-type]
    ],
)
async def test_a_batch_function_refuses_a_wrong_type_naming_the_parameter(make: object, parameter: str) -> None:
    with pytest.raises(TypeError, match=rf"^{parameter} must be"):
        await make()  # type: ignore[operator]


async def test_events_name_the_model_that_answered_not_the_name_requested(tmp_path: Path) -> None:
    calls: list[tuple[str, str]] = []

    async def observe(event: orchestrator.Event) -> None:
        if event.kind == "model.call":
            calls.append((event.model, event.request_model))  # type: ignore[attr-defined]

    async with open_session("ada", home=tmp_path / "home", observer=observe) as chat:
        await chat.set_model("other-model")
        await chat.send("hello")
    assert calls and set(calls) == {("scripted", "other-model")}


async def test_a_person_decides_on_held_reflections_through_the_session(tmp_path: Path) -> None:
    """V1 as a library: under ``reflection_merge = review`` the session's reflection waits; the
    session shows it, merges one and discards another, and the records say who and why."""
    settings = {"reflection_trigger": "off", "reflection_merge": "review"}
    async with open_session("rev", home=Home(tmp_path / "home"), settings=settings) as chat:
        await chat.send("I like the number 5")
        first = await chat.reflect()
        await chat.send("I prefer oolong")
        second = await chat.reflect()
        held = [r for r in await chat.reflections() if r.status == "kept_review"]
        assert first is not None and second is not None and [r.id for r in held] == [first.id, second.id]
        shown = await chat.show_reflection(held[0].id)
        assert shown.held is not None and "+- I like the number 5" in shown.patch
        merged = await chat.merge_reflection(held[0].id, by="grace", why="correct")
        assert merged.outcome in {"merged", "resolved"} and merged.revision
        dropped = await chat.discard_reflection(held[1].id, by="grace", why="duplicate")
        assert dropped.outcome == "discarded"
        records = {r.id: r for r in await chat.reflections()}
    assert (records[held[0].id].decided_by, records[held[0].id].decision) == ("grace", "merge")
    assert (records[held[1].id].decided_why, records[held[1].id].status) == ("duplicate", "discarded")
