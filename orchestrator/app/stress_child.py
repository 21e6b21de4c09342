"""The processes ``reverie stress --faults`` kills: a merger, a writer's commit, a lock holder.

``python -m orchestrator.app.stress_child <verb> ...``, run by :mod:`orchestrator.app.stress_faults`
with ``REVERIE_FAULT`` naming the step to die at (:mod:`orchestrator.base.faults`). Each verb runs the
real code path, in a process of its own so that a ``SIGKILL`` leaves exactly what a crash leaves:

* ``merge <repo> <worktree> <branch> keep|resolve``: :func:`~orchestrator.memfs.merge.merge_back`
  (the scripted resolver for ``resolve``); prints the outcome as JSON;
* ``commit <checkout> <path> <message>`` (the file's text on stdin): writes the file
  (``stress.commit.staged``), commits it as the harness does (``stress.commit.made``), prints the id;
* ``hold-lock <repo>``: takes the repository lock and git's ``index.lock`` as a git writing the index
  would (``stress.lock.held``), so the kill leaves a *stale* lock: an owner record of a dead process
  and an ``index.lock`` nobody holds (its text, :data:`STALE_LOCK_TEXT`, tells it from a live git's).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio

from orchestrator.base.faults import fault_point_sync
from orchestrator.memfs.locks import common_dir_sync, merge_lock_sync
from orchestrator.memfs.merge import merge_back
from orchestrator.memfs.provenance import Provenance
from orchestrator.memfs.repo import harness_commit_tracked
from orchestrator.models.scripted import ScriptedModel
from subagents.resolver import make_resolver

__all__ = ["STALE_LOCK_TEXT", "main"]

STALE_LOCK_TEXT = b"left by a killed reverie stress lock holder\n"


async def _merge(repo: Path, worktree: Path, branch: str, policy: str) -> None:
    resolver = make_resolver(ScriptedModel(), agent_id="stress", agent_name="stress") if policy == "resolve" else None
    outcome = await merge_back(repo, worktree, branch, resolver=resolver)
    print(
        json.dumps(
            {
                "status": outcome.status,
                "reason": outcome.reason,
                "reason_code": outcome.reason_code,
                "commits": list(outcome.commits),
                "files": list(outcome.files),
                "new_head": outcome.new_head,
                "rewritten": [list(pair) for pair in outcome.rewritten],
                "retried": outcome.retried,
            }
        ),
        flush=True,
    )


async def _commit(checkout: Path, rel: str, message: str, text: str) -> None:
    (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
    (checkout / rel).write_text(text, encoding="utf-8")
    fault_point_sync("stress.commit.staged")
    sha = await harness_commit_tracked(checkout, message, provenance=Provenance("stress"))
    fault_point_sync("stress.commit.made")
    print(sha, flush=True)


def _hold_lock(repo: Path) -> None:
    common = common_dir_sync(repo)
    with merge_lock_sync(repo, common_dir=common):
        lock = common / "index.lock"
        lock.write_bytes(STALE_LOCK_TEXT)
        fault_point_sync("stress.lock.held")
        lock.unlink()


def main(argv: list[str]) -> int:
    """Run one verb; the exit status is 0 unless the step's fault (or a bug) ends the process."""
    verb, *args = argv
    if verb == "merge":
        anyio.run(_merge, Path(args[0]), Path(args[1]), args[2], args[3])
    elif verb == "commit":
        text = sys.stdin.read()
        anyio.run(_commit, Path(args[0]), args[1], args[2], text)
    elif verb == "hold-lock":
        _hold_lock(Path(args[0]))
    else:
        print(f"stress_child: unknown verb {verb!r}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
