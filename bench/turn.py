"""Per-turn orchestration overhead with the scripted model (no model latency at all).

Two kinds of turn in one in-process ``ChatSession`` on trio: plain chat turns (no memory edit) and
turns that commit memory (a bash tool call running ``git commit`` through the installed hook). For
each: turns/s, wall p50/p99, and where the **CPU** of a turn goes, the figure P3 sets a target
for (in-process CPU <= 2 ms for a chat turn without memory edits):

* ``loop thread``: the event loop's own thread (turn loop, prompt cache, model, events), with the
  embedded model's own share (``ScriptedModel``'s reply and token estimate, which grow with the
  conversation) shown apart below it;
* ``sqlite lanes``: store jobs in the lane threads (``orchestrator.store.worker``);
* ``blocking git`` / ``blocking files``: work handed to ``orchestrator.base.blocking`` threads;
* ``other threads``: what is left of the process's CPU (anyio's default pool);
* ``git children``: CPU of the git processes the turn waited for (not in-process).

Round trips per turn are counted too: store jobs (each a hand-off to a SQLite lane thread and a
wake-up of the loop when it is done) and thread hops (``anyio.to_thread``: git, files, locks). Wall
time shares are printed as well (SQLite awaited, prompt resolution, post-turn sync, tools): they
overlap each other and the CPU figures, and say where a turn waits.

    .venv/bin/python bench/turn.py [--turns 100]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from thresholds import load_thresholds

_CPU_TARGET_MS = float(load_thresholds()["turn"]["max_chat_cpu_ms"])
_wall: defaultdict[str, float] = defaultdict(float)
_cpu: defaultdict[str, float] = defaultdict(float)
_trips: defaultdict[str, int] = defaultdict(int)
_model_cpu = [0.0]


def _timed_async(name: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return await fn(*args, **kwargs)
        finally:
            _wall[name] += time.perf_counter() - start

    return wrapper


def _instrument() -> None:
    import orchestrator.agent.prompt_cache as prompt_cache
    import orchestrator.agent.turn as turn
    from orchestrator.base import blocking
    from orchestrator.store import worker
    from orchestrator.store.store import Store

    Store._run = _timed_async("sqlite (awaited)", Store._run)  # type: ignore[method-assign]
    turn.resolve_system_prompt = _timed_async("prompt (HEAD + compile)", prompt_cache.resolve_system_prompt)
    turn.run_tool = _timed_async("tools (bash, git, hook)", turn.run_tool)
    original_after = turn.TurnRunner._after_turn
    turn.TurnRunner._after_turn = _timed_async("post-turn sync (git + audit)", original_after)  # type: ignore[method-assign]

    submit = worker.ConnectionWorker._submit

    async def counted_submit(self: Any, action: Any, *, last: bool = False) -> Any:
        _trips["store jobs"] += 1
        return await submit(self, action, last=last)

    worker.ConnectionWorker._submit = counted_submit  # type: ignore[method-assign]
    import anyio.to_thread

    to_thread = anyio.to_thread.run_sync

    async def counted_to_thread(*args: Any, **kwargs: Any) -> Any:
        _trips["thread hops"] += 1
        return await to_thread(*args, **kwargs)

    anyio.to_thread.run_sync = counted_to_thread  # type: ignore[assignment]
    from orchestrator.models.scripted import ScriptedModel

    respond = ScriptedModel._respond

    def timed_respond(self: Any, request: Any) -> Any:
        start = time.thread_time()
        try:
            return respond(self, request)
        finally:
            _model_cpu[0] += time.thread_time() - start

    ScriptedModel._respond = timed_respond  # type: ignore[method-assign]
    execute = worker._Job.execute

    def timed_execute(job: Any) -> None:
        start = time.thread_time()
        try:
            execute(job)
        finally:
            _cpu["sqlite lanes"] += time.thread_time() - start

    worker._Job.execute = timed_execute  # type: ignore[method-assign]
    run_sync = blocking.run_sync

    async def timed_run_sync(kind: Any, fn: Callable[[], Any]) -> Any:
        def job() -> Any:
            start = time.thread_time()
            try:
                return fn()
            finally:
                _cpu[f"blocking {kind}"] += time.thread_time() - start

        return await run_sync(kind, job)

    blocking.run_sync = timed_run_sync


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def _run(
    turns: int, kind: str
) -> tuple[list[float], dict[str, float], dict[str, float], dict[str, int], float]:
    from orchestrator.app.session import ChatSession

    durations: list[float] = []
    async with ChatSession.open(
        agent_id=f"bench-{kind}", workspace=Path.cwd(), cli={"reflection_trigger": "off"}
    ) as session:
        await session.send("warm up")
        _wall.clear()
        _cpu.clear()
        _trips.clear()
        _model_cpu[0] = 0.0
        process, loop, children = time.process_time(), time.thread_time(), _children()
        for i in range(turns):
            text = f"remember: fact number {i} is {i * 7}" if kind == "commit" else f"hello number {i}"
            start = time.perf_counter()
            outcome = await session.send(text)
            durations.append(time.perf_counter() - start)
            assert outcome.status == "end_turn", outcome
        cpu = dict(_cpu)
        cpu["loop thread"] = time.thread_time() - loop
        cpu["other threads"] = time.process_time() - process - sum(cpu.values())
        cpu["git children (not in-process)"] = _children() - children
        trips = dict(_trips)
        model = _model_cpu[0]
    return durations, dict(_wall), cpu, trips, model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--json", type=Path, default=None, help="also write each turn kind's figures here (bench/check.py)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        os.environ["REVERIE_HOME"] = home
        _instrument()
        rows = []
        for kind in ("chat", "commit"):
            durations, wall, cpu, trips, model = anyio.run(_run, args.turns, kind, backend="trio")
            rows.append((kind, durations, wall, cpu, trips, model))
    print(f"machine load {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(
        f"{'turn kind':<10} {'turns':>6} {'turns/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'in-process CPU ms':>18} "
        f"{'store jobs':>11} {'thread hops':>12}"
    )
    for kind, durations, _, cpu, trips, _model in rows:
        in_process = sum(v for k, v in cpu.items() if not k.startswith("git children"))
        n = len(durations)
        print(
            f"{kind:<10} {n:>6} {n / sum(durations):>8.1f} "
            f"{_pct(durations, 0.5) * 1000:>8.1f} {_pct(durations, 0.99) * 1000:>8.1f} "
            f"{in_process / n * 1000:>18.2f} {trips.get('store jobs', 0) / n:>11.1f} "
            f"{trips.get('thread hops', 0) / n:>12.1f}"
        )
    for kind, durations, wall, cpu, _, model in rows:
        n = len(durations)
        in_process = sum(v for k, v in cpu.items() if not k.startswith("git children"))
        print(f"\n{kind}: CPU per turn (ms, share of in-process CPU)")
        for name, seconds in sorted(cpu.items(), key=lambda kv: -kv[1]):
            share = "" if name.startswith("git children") else f"{seconds / in_process:>6.1%}"
            print(f"    {name:<32} {seconds / n * 1000:>8.2f}  {share}")
            if name == "loop thread":
                print(f"      {'of which the embedded model':<30} {model / n * 1000:>8.2f}  {model / in_process:>6.1%}")
        print(f"{kind}: wall per turn (ms, share of turn time; overlapping)")
        for name, seconds in sorted(wall.items(), key=lambda kv: -kv[1]):
            print(f"    {name:<32} {seconds / n * 1000:>8.2f}  {seconds / sum(durations):>6.1%}")
    if args.json is not None:
        figures = {
            kind: {
                "turns": len(durations),
                "p50_ms": _pct(durations, 0.5) * 1000,
                "p99_ms": _pct(durations, 0.99) * 1000,
                "cpu_ms": sum(v for k, v in cpu.items() if not k.startswith("git children")) / len(durations) * 1000,
            }
            for kind, durations, _, cpu, _, _ in rows
        }
        args.json.write_text(json.dumps(figures, indent=1))
    chat_cpu = sum(v for k, v in rows[0][3].items() if not k.startswith("git children")) / len(rows[0][1])
    print(f"\nratio commit-turn / chat-turn p50: {_pct(rows[1][1], 0.5) / _pct(rows[0][1], 0.5):.1f}x")
    print(f"chat turn in-process CPU {chat_cpu * 1000:.2f} ms (target <= {_CPU_TARGET_MS:g} ms: {'met' if chat_cpu * 1000 <= _CPU_TARGET_MS else 'MISSED'})")
    print(
        "before the lean turn (main e7e07e9, this bench, median of 3 interleaved runs): chat turn 4.14 ms CPU, "
        "17 store jobs and 8 thread hops per turn"
    )


if __name__ == "__main__":
    main()
