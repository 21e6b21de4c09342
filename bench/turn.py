"""Per-turn orchestration overhead with the scripted model (no model latency at all).

Prints turns/s, p50 and p99 per turn for plain chat turns and for turns that commit memory (a bash
tool call running `git commit` through the installed pre-commit hook), and where the time goes:
SQLite (awaiting store jobs), prompt resolution (HEAD lookup + compile), post-turn sync (git status
+ HEAD audit), tools (the bash tool, including git and the hook). Times are wall-clock inside one
process on trio. Prompt resolution and the sync include their own SQLite jobs, which are also
counted under "sqlite"; the remainder of a turn is the loop itself and the scripted model.

    .venv/bin/python bench/turn.py [--turns 100]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

_spent: defaultdict[str, float] = defaultdict(float)


def _timed_async(name: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return await fn(*args, **kwargs)
        finally:
            _spent[name] += time.perf_counter() - start

    return wrapper


def _instrument() -> None:
    import orchestrator.agent.prompt_cache as prompt_cache
    import orchestrator.agent.turn as turn
    from orchestrator.store.store import Store

    Store._run = _timed_async("sqlite", Store._run)  # type: ignore[method-assign]
    turn.resolve_system_prompt = _timed_async("prompt (HEAD + compile)", prompt_cache.resolve_system_prompt)
    turn.run_tool = _timed_async("tools (bash, git, hook)", turn.run_tool)
    original_after = turn.TurnRunner._after_turn
    turn.TurnRunner._after_turn = _timed_async("post-turn sync (git + audit)", original_after)  # type: ignore[method-assign]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _run(turns: int, kind: str) -> tuple[list[float], dict[str, float]]:
    from orchestrator.app.session import ChatSession

    _spent.clear()
    durations: list[float] = []
    async with ChatSession.open(agent_id=f"bench-{kind}", workspace=Path.cwd()) as session:
        await session.send("warm up")
        _spent.clear()
        for i in range(turns):
            text = f"remember: fact number {i} is {i * 7}" if kind == "commit" else f"hello number {i}"
            start = time.perf_counter()
            outcome = await session.send(text)
            durations.append(time.perf_counter() - start)
            assert outcome.status == "end_turn", outcome
    return durations, dict(_spent)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        os.environ["REVERIE_HOME"] = home
        _instrument()
        rows = []
        for kind in ("chat", "commit"):
            durations, spent = anyio.run(_run, args.turns, kind, backend="trio")
            rows.append((kind, durations, spent))
    print(f"{'turn kind':<10} {'turns':>6} {'turns/s':>8} {'p50 ms':>8} {'p99 ms':>8}")
    for kind, durations, _ in rows:
        print(
            f"{kind:<10} {len(durations):>6} {len(durations) / sum(durations):>8.1f} "
            f"{_pct(durations, 0.5) * 1000:>8.1f} {_pct(durations, 0.99) * 1000:>8.1f}"
        )
    print()
    print("where the time goes (ms per turn, share of turn time)")
    for kind, durations, spent in rows:
        total = sum(durations)
        print(f"  {kind}:")
        for name, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
            print(f"    {name:<32} {seconds / len(durations) * 1000:>8.2f} ms  {seconds / total:>6.1%}")
    chat = rows[0][1]
    commit = rows[1][1]
    print(f"\nratio commit-turn / chat-turn p50: {_pct(commit, 0.5) / _pct(chat, 0.5):.1f}x")


if __name__ == "__main__":
    main()
