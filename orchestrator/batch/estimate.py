"""What a run or sweep will cost before it runs (``--estimate``), and the estimate beside the actual.

An estimate runs the same plan (tasks, settings, epochs, the replayed history) on the embedded model,
which costs nothing, and counts what the configured model would be sent: the requests and their prompt
tokens (the embedded model counts a quarter of the request's characters, as the loopback test server
does), and what the embedded model answered. The history replayed before each question is the same
whatever the model, and so are the compaction summaries it triggers; how many calls a real model's
turns and subagents make depends on the model (a reflection may read more files, a question may take
more searches), so the call counts are the embedded model's, and the totals are a floor for those
calls. The figures go to ``OUT/estimate.json``; a real run into the same ``OUT`` later reports them
next to what it spent (``summary.json``: ``estimate``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from orchestrator.app.usage import cost_usd

__all__ = ["ESTIMATE_DIR", "ESTIMATE_FILE", "estimate_row", "read_estimate", "write_estimate"]

ESTIMATE_FILE: Final = "estimate.json"
ESTIMATE_DIR: Final = "estimate"
"""Where an estimate's own run (or sweep) lives, under the real one's directory."""


def estimate_row(summary: Mapping[str, Any], price_in: float | None, price_out: float | None) -> dict[str, Any]:
    """One run's estimate from its summary: calls and tokens, the main agent's and the subagents', in
    USD when priced."""
    row: dict[str, Any] = {
        "calls": int(summary.get("model_calls") or 0),
        "subagent_calls": int(summary.get("subagent_calls") or 0),
        "prompt_tokens": int(summary.get("tokens_in") or 0),
        "completion_tokens": int(summary.get("tokens_out") or 0),
        "subagent_prompt_tokens": int(summary.get("subagent_tokens_in") or 0),
        "replayed_tokens": int(summary.get("replayed_tokens") or 0),
    }
    row["cost"] = cost_usd(row["prompt_tokens"], row["completion_tokens"], price_in, price_out)
    return row


def write_estimate(out_dir: Path, rows: Mapping[str, Mapping[str, Any]]) -> Path:
    """``OUT/estimate.json``: setting (``run`` for a plain run) -> its row, and the total. Blocking."""
    total: dict[str, Any] = {
        k: sum(int(r[k]) for r in rows.values()) for k in ("calls", "subagent_calls", "prompt_tokens", "completion_tokens")
    }
    costs = [r["cost"] for r in rows.values() if r.get("cost") is not None]
    total["cost"] = round(sum(costs), 6) if costs else None
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / ESTIMATE_FILE
    path.write_text(json.dumps({"settings": dict(rows), "total": total}, indent=2) + "\n", encoding="utf-8")
    return path


def read_estimate(out_dir: Path) -> dict[str, Any] | None:
    """What an earlier ``--estimate`` into ``out_dir`` said, or None. Blocking."""
    try:
        raw = json.loads((out_dir / ESTIMATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return raw if isinstance(raw, dict) and isinstance(raw.get("settings"), dict) else None
