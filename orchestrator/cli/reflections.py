"""``reverie reflections``: list, merge or discard kept reflection branches (R2).

Git is the truth about branches; the conversation store adds why a branch was kept, and is told
when the user merges or discards one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from orchestrator.base.config import load_settings
from orchestrator.base.paths import DEFAULT_AGENT_ID, agent_memory_dir, store_path
from orchestrator.cli.aio import run_async
from orchestrator.cli.errors import UserError
from orchestrator.cli.memory import AgentOption, repo_in_trouble, resolve_memory_dir
from orchestrator.memfs.merge import MergeOutcome, discard_branch, merge_branch
from orchestrator.memfs.names import BRANCH_PREFIX
from orchestrator.memfs.resolution import Resolver
from orchestrator.memfs.worktrees import list_reflections
from orchestrator.store import ReflectionRecord, Store

__all__ = ["MemoryDirOption", "app", "discard", "list_", "merge", "reflections_table", "register"]

app = typer.Typer(help="List, merge or discard reflection branches kept after conflicts.", no_args_is_help=True)
_out = Console(highlight=False, soft_wrap=True)

MemoryDirOption = Annotated[
    Path | None, typer.Option("--memory-dir", help="A memory repository (default: the agent's).")
]


@app.command("list")
def list_(agent: AgentOption = DEFAULT_AGENT_ID, memory_dir: MemoryDirOption = None) -> None:
    """Show every reflection: its outcome, why, commits not in HEAD, and any worktree left.

    Branches come from git (the truth about commits); launches whose branch is gone (merged, no
    changes, failed) come from the store, so a failed run is listed as failed, not as merged. The
    store's records are the agent's: with --memory-dir naming another repository they are not
    that repository's, so only its branches are listed.
    """
    repo = resolve_memory_dir(memory_dir, agent)
    branches = run_async(lambda: list_reflections(repo, kind=None))
    records: dict[str, ReflectionRecord] = {}
    if _is_agents_repo(repo, agent) and store_path().exists():
        records = {r.branch: r for r in run_async(lambda: _records(agent))}
    rows: list[tuple[str, str, str, str, str]] = []
    for b in branches:
        record = records.pop(b.branch, None)
        state = _state(record, merged_in_git=b.merged)
        why = _why(record) + (f"\nworktree left: {b.worktree}" if b.worktree else "")
        rows.append((b.id, b.branch, str(b.ahead), state, why))
    for record in records.values():
        rows.append((record.id, record.branch, "0", _state(record, merged_in_git=True), _why(record)))
    if not rows:
        _out.print("No reflections.")
        return
    _out.print(reflections_table(rows))


def reflections_table(rows: Sequence[tuple[str, str, str, str, str]]) -> Table:
    """Rows of (id, branch, commits, outcome, why) as a table that fits an 80-column terminal with
    no name cut: the id and the outcome never wrap and take their full width, the reason (and a
    worktree left behind, under it) wraps in what remains. A branch is ``reverie/<kind>/<id>``: the
    caption says so and a kind other than ``reflection`` (a compaction's worktree left by a crash)
    is shown under its id. The full branch names took 44 columns and cut the outcomes
    (``no_chang…``)."""
    shown = sorted((rid, _kind(branch, rid), commits, outcome, why) for rid, branch, commits, outcome, why in rows)
    table = Table(show_header=True, caption=f"branches: {BRANCH_PREFIX}<kind>/<id> (kind: reflection unless shown)",
                  caption_justify="left")
    for name, at in (("id", 0), ("commits", 2), ("outcome", 3)):
        longest = max(len(name), *(len(row[at]) for row in shown))
        table.add_column(name, justify="right" if name == "commits" else "left", no_wrap=True, min_width=longest)
    table.add_column("why", overflow="fold", ratio=1, min_width=10)
    for rid, kind, commits, outcome, why in shown:
        table.add_row(rid if kind == "reflection" else f"{rid}\n({kind})", commits, outcome, Text(why))
    return table


def _kind(branch: str, rid: str) -> str:
    """``<kind>`` of ``reverie/<kind>/<id>``; the whole branch name when it is not one."""
    name = branch.removeprefix("refs/heads/")
    kind = name.removeprefix(BRANCH_PREFIX).removesuffix(f"/{rid}")
    return kind if name.startswith(BRANCH_PREFIX) and "/" not in kind else branch


def _is_agents_repo(repo: Path, agent: str) -> bool:
    """Whether ``repo`` is ``agent``'s own memory repository (whose reflections the store records)."""
    return repo.resolve() == agent_memory_dir(agent).resolve()


def _state(record: ReflectionRecord | None, *, merged_in_git: bool) -> str:
    """The outcome to show (one of the README's): the store's (D2), corrected by git when the branch is
    in HEAD by now. A branch with no record (left by an interrupted or crashed run, or another tool)
    is ``pending``, as start-up recovery re-queues it."""
    if record is None:
        return "merged" if merged_in_git else "pending"
    if merged_in_git and (record.kept or record.waiting):
        return "merged"
    if record.kept:
        return f"kept ({record.reason_code or record.status.removeprefix('kept_')})"
    return record.outcome


def _why(record: ReflectionRecord | None) -> str:
    if record is None:
        return "no record: an interrupted or crashed run left it (merge --all)"
    return record.error or record.reason or "-"


@app.command("merge")
def merge(
    id: Annotated[str | None, typer.Argument(help="Reflection id or branch name (or --all).")] = None,
    agent: AgentOption = DEFAULT_AGENT_ID,
    memory_dir: MemoryDirOption = None,
    all_: Annotated[bool, typer.Option("--all", help="Merge every reflection branch not in HEAD, oldest first.")] = False,
    resolve: Annotated[
        bool, typer.Option("--resolve", help="Hand a conflict to the resolver subagent instead of keeping the branch.")
    ] = False,
) -> None:
    """Retry merge-back: rebase the branch onto HEAD and fast-forward; keep it on conflict (or resolve it)."""
    if (id is None) == (not all_):
        raise UserError("name one reflection to merge, or pass --all (not both)")
    repo = resolve_memory_dir(memory_dir, agent)
    trouble = repo_in_trouble(repo)
    if trouble is not None:
        raise UserError(f"{trouble}; then retry the merge (the branch is kept)")
    resolver = _resolver(agent) if resolve else None
    if id is not None:
        outcome = run_async(lambda: merge_branch(repo, id, resolver=resolver))
        _report_one(agent, repo, outcome, strict=True)
        return
    names = [b.branch for b in run_async(lambda: list_reflections(repo, kind=None)) if not b.merged]
    if not names:
        _out.print("No reflection branches to merge.")
        return
    settled = 0
    for name in names:
        outcome = run_async(partial(merge_branch, repo, name, resolver=resolver))
        settled += _report_one(agent, repo, outcome, strict=False)
    if settled == len(names):
        _out.print(f"All {settled} branch(es) merged.")
        return
    _out.print(f"{settled} of {len(names)} branch(es) merged; the rest are kept (nothing was lost).")
    raise typer.Exit(1)


def _report_one(agent: str, repo: Path, outcome: MergeOutcome, *, strict: bool) -> bool:
    """Print one merge's outcome (a one-line error when ``strict``); whether it is in HEAD."""
    if outcome.in_head and _is_agents_repo(repo, agent):
        _mark_if_stored(agent, outcome.branch, outcome.status)
    if outcome.status in {"kept", "pending", "failed"}:
        detail = (
            f"{outcome.status} ({outcome.reason}); files: {', '.join(outcome.files) or '-'}"
            if outcome.status != "failed"
            else f"merge failed: {'; '.join(outcome.errors) or 'git failed'}"
        )
        if strict:
            raise UserError(f"{outcome.branch} {detail}; nothing was lost")
        _out.print(f"{outcome.branch}: {detail}")
        return False
    if outcome.status == "no_changes":
        _out.print(f"{outcome.branch}: nothing to merge; branch removed.")
    else:
        _out.print(f"Merged {outcome.commit_count} commit(s) from {outcome.branch}; HEAD is {outcome.new_head}.")
    return True


def _resolver(agent: str) -> Resolver:
    """D3's resolver subagent on the configured model (the scripted one offline)."""
    # lazy: `reverie --help` imports every command module; only --resolve needs the model and subagent
    from orchestrator.runtime.runtime import build_model
    from subagents.resolver import make_resolver

    settings = load_settings()
    return make_resolver(
        build_model(settings),
        agent_id=agent,
        model_name=settings.model,
        instructions=settings.reflection_merge_instructions,
        bash_timeout=settings.bash_timeout,
    )


@app.command("discard")
def discard(
    id: Annotated[str, typer.Argument(help="Reflection id or branch name.")],
    agent: AgentOption = DEFAULT_AGENT_ID,
    memory_dir: MemoryDirOption = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete a reflection branch and its commits (only on your explicit request)."""
    repo = resolve_memory_dir(memory_dir, agent)
    if not yes and not typer.confirm(f"Discard reflection {id} and its unmerged commits?"):
        raise typer.Exit(1)
    dropped = run_async(lambda: discard_branch(repo, id))
    if _is_agents_repo(repo, agent):
        _mark_if_stored(agent, id, "discarded")
    _out.print(f"Discarded {id}: {len(dropped)} unmerged commit(s) dropped.")


async def _records(agent: str) -> list[ReflectionRecord]:
    async with Store.opened() as store:
        return await store.reflections(agent)


def _mark_if_stored(agent: str, branch_or_id: str, status: str) -> None:
    if store_path().exists():
        run_async(lambda: _mark(agent, branch_or_id, status))


async def _mark(agent: str, branch_or_id: str, status: str) -> None:
    async with Store.opened() as store:
        for record in await store.reflections(agent):
            if branch_or_id in (record.branch, record.id):
                await store.save_reflection(replace(record, status=status))


def register(main: typer.Typer) -> None:
    """Add the ``reflections`` group to the main app."""
    main.add_typer(app, name="reflections")
