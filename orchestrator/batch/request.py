"""What a run or a sweep is asked to do, as one value.

The library's ``run_suite`` and ``sweep`` build a ``BatchRequest`` from their parameters once
(docs/api.md keeps their signatures), the command line builds the same one from its options, and
planning (``batch/plan.py``) and preparing (``batch/launch.py``) take it whole. Before, every
option was spelled again at each of the three steps, so a new one touched three parameter lists
and two calls, and a forgotten pass-through dropped it silently.

A field left ``None`` means "not given": a resumed or retried run then reuses what it recorded
(``run.json``, ``sweep.json``), a new one takes the default. The request holds values as given;
checking them is the planner's (each refusal a one-line ``UsageError``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BatchRequest", "triggers_given"]


@dataclass(frozen=True)
class BatchRequest:
    """A run's or a sweep's options as given. ``out`` is the run (or sweep) directory; for a retry
    it is ``retry_failed``, the run whose failed tasks rerun in place, and ``suite`` may be None
    (the run's own). ``latency`` is the scripted model's (``--scripted-latency``); ``config_file``
    the configuration the tasks read. ``max_*``/``on_limit`` are a run's limits (B1), or a whole
    sweep's (docs/design.md L3). ``triggers``,
    ``epochs`` and ``override_pinned`` are a sweep's; ``triggers_name`` is what a refused trigger is
    called (the library's ``triggers``, the command line's ``--trigger``)."""

    suite: Path | None
    out: Path | None = None
    concurrency: int | None = None
    executor: str | None = None
    processes: int | str | None = None
    resume: bool = False
    tasks: tuple[str, ...] | None = None
    limit: int | None = None
    model: str | None = None
    context_window: int | None = None
    price_in: float | None = None
    price_out: float | None = None
    latency: float | None = None
    ray_address: str | None = None
    config_file: Path | None = None
    judge_model: str | None = None
    judge_base_url: str | None = None
    estimate: bool = False
    retry_failed: Path | None = None
    max_tokens: int | None = None
    max_cost: float | None = None
    max_seconds: float | None = None
    on_limit: str | None = None
    triggers: str | tuple[str, ...] | None = None
    epochs: int | None = None
    override_pinned: bool = False
    triggers_name: str = "triggers"


def triggers_given(triggers: str | Sequence[str] | None) -> str | tuple[str, ...] | None:
    """``triggers`` as a request holds it: one string stays one trigger, a sequence becomes a tuple,
    and none (or an empty list) means the sweep's recorded settings."""
    if not triggers:
        return None
    return triggers if isinstance(triggers, str) else tuple(triggers)
