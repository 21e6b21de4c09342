"""Benchmark compaction's pure planner and the scripted summarizer's identifier retention.

* Planner: ``plan_compaction`` on generated conversations of 1k, 10k and 100k messages (users,
  assistants with tool calls, tool results of random size; window set so the context is over the
  trigger and the sliding search has to walk several fractions). Median of several runs; prints the
  time per message. Target (exit status 1 when missed): the time per message at 100k is under 3x the
  time per message at 1k, i.e. planning is linear.
* Retention: ``compact`` with the scripted model (``purpose="summarize"``) over generated
  conversations seeded with DECISIONS S22 identifiers (paths, URLs, issue/PR refs, ticket ids,
  commit hashes); prints the mean identifier retention ratio and how many compactions needed the
  C6 re-prompt.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.compaction import CompactionSettings, compact, estimate_messages, plan_compaction
from orchestrator.models.scripted import ScriptedModel
from orchestrator.models.types import Message, ToolCall

SIZES = (1_000, 10_000, 100_000)
RUNS = 5
RETENTION_CONVERSATIONS = 20


def conversation(n: int, rng: random.Random) -> list[Message]:
    messages: list[Message] = []
    call = 0
    while len(messages) < n:
        messages.append(Message("user", "u" * rng.randint(10, 400)))
        for _ in range(rng.randint(0, 3)):
            call += 1
            cid = f"c{call}"
            messages.append(
                Message("assistant", "a" * rng.randint(0, 200), (ToolCall(cid, "Bash", '{"command":"ls"}'),))
            )
            messages.append(Message("tool", "t" * rng.randint(0, 3000), tool_call_id=cid))
        messages.append(Message("assistant", "a" * rng.randint(10, 600)))
    return messages[:n]


def bench_planner() -> bool:
    print("planner (plan_compaction, sliding_window, p = 0.3)")
    print(f"{'messages':>10} {'median ms':>10} {'us/message':>11} {'cutoff':>8}")
    per_message: dict[int, float] = {}
    for n in SIZES:
        messages = conversation(n, random.Random(n))
        window = int(estimate_messages(messages) * 0.4)
        settings = CompactionSettings(context_window=window, sliding_percentage=0.3)
        times = []
        plan = None
        for _ in range(RUNS):
            start = time.perf_counter()
            plan = plan_compaction(messages, settings, system_prompt_tokens=2000, tool_tokens=1500)
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        per_message[n] = median / n
        assert plan is not None
        print(f"{n:>10,} {median * 1000:>10.2f} {median / n * 1e6:>11.3f} {plan.cutoff:>8,}")
    ratio = per_message[SIZES[-1]] / per_message[SIZES[0]]
    ok = ratio < 3
    print(f"time per message, 100k vs 1k: {ratio:.2f}x (target < 3x: {'met' if ok else 'MISSED'})")
    return ok


_WORDS = ["fixed", "checked", "looked at", "updated", "reviewed", "reverted"]


def _identifier(rng: random.Random) -> str:
    kind = rng.randrange(5)
    if kind == 0:
        return f"src/{rng.choice(['auth', 'api', 'db'])}/{rng.choice(['login', 'models', 'views'])}{rng.randint(1, 99)}.py"
    if kind == 1:
        return f"https://github.com/acme/app/pull/{rng.randint(1, 9999)}"
    if kind == 2:
        return f"#{rng.randint(1, 9999)}"
    if kind == 3:
        return f"{rng.choice(['AUTH', 'OPS', 'WEB'])}-{rng.randint(1, 999)}"
    return "".join(rng.choice("0123456789abcdef") for _ in range(7)) + rng.choice("abcdef") + "1"


def identifier_conversation(rng: random.Random) -> list[Message]:
    messages: list[Message] = []
    for turn in range(30):
        ident = _identifier(rng)
        messages.append(Message("user", f"please look at {ident} and tell me what changed"))
        cid = f"c{turn}"
        messages.append(Message("assistant", "", (ToolCall(cid, "Bash", '{"command":"git log"}'),)))
        messages.append(Message("tool", "commit log " + "x" * rng.randint(100, 2000), tool_call_id=cid))
        messages.append(
            Message("assistant", f"I {rng.choice(_WORDS)} {ident}; " + "details " * rng.randint(5, 60))
        )
    return messages


async def bench_retention() -> None:
    print()
    print(
        f"identifier retention, scripted summarizer, {RETENTION_CONVERSATIONS} conversations of 120 messages"
    )
    ratios, reprompts, counts = [], 0, []
    for seed in range(RETENTION_CONVERSATIONS):
        messages = identifier_conversation(random.Random(seed))
        settings = CompactionSettings(context_window=int(estimate_messages(messages) * 1.1))
        outcome = await compact(
            messages, settings, ScriptedModel(), system_prompt_tokens=500, tool_tokens=500, model="scripted"
        )
        ratios.append(outcome.retention)
        reprompts += outcome.reprompted
        counts.append(len(outcome.plan.summarized))
    print(f"mean retention {statistics.mean(ratios):.3f}, min {min(ratios):.3f}")
    print(
        f"re-prompted {reprompts} of {RETENTION_CONVERSATIONS}; messages summarised per compaction: median {statistics.median(counts)}"
    )


def main() -> int:
    ok = bench_planner()
    anyio.run(bench_retention)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
