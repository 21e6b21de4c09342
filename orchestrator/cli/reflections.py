"""``reverie reflections``: list, merge or discard kept reflection branches (DECISIONS R2).

Git is the truth about branches; the conversation store adds why a branch was kept, and is told
when the user merges or discards one.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from orchestrator.base.paths import DEFAULT_AGENT_ID, store_path
from orchestrator.cli.errors import UserError
from orchestrator.cli.memory import AgentOption, repo_in_trouble, resolve_memory_dir
from orchestrator.memfs.merge import discard_branch, merge_branch
from orchestrator.memfs.worktrees import list_reflections
from orchestrator.store import ReflectionRecord, Store

__all__ = ["app", "register"]

app = typer.Typer(help="List, merge or discard reflection branches kept after conflicts.", no_args_is_help=True)
_out = Console(highlight=False, soft_wrap=True)

MemoryDirOption = Annotated[
    Path | None, typer.Option("--memory-dir", help="A memory repository (default: the agent's).")
]


@app.command("list")
def list_(agent: AgentOption = DEFAULT_AGENT_ID, memory_dir: MemoryDirOption = None) -> None:
    """Show reverie's branches: id, commits not in HEAD, and whether a worktree is left."""
    from orchestrator.cli.commands import run_async

    repo = resolve_memory_dir(memory_dir, agent)
    branches = run_async(lambda: list_reflections(repo, kind=None))
    records = {r.branch: r for r in run_async(lambda: _records(agent))} if store_path().exists() else {}
    if not branches:
        _out.print("No reflection branches.")
        return
    table = Table(show_header=True)
    table.add_column("id", no_wrap=True)
    table.add_column("branch", overflow="fold")
    table.add_column("commits", justify="right")
    table.add_column("state")
    table.add_column("why", overflow="fold")
    table.add_column("worktree", overflow="fold")
    for b in branches:
        state = "merged" if b.merged else "kept"
        record = records.get(b.branch)
        why = f"{record.status}: {record.reason}" if record and record.reason else (record.status if record else "-")
        table.add_row(b.id, b.branch, str(b.ahead), state, why, str(b.worktree) if b.worktree else "-")
    _out.print(table)


@app.command("merge")
def merge(
    id: Annotated[str, typer.Argument(help="Reflection id or branch name.")],
    agent: AgentOption = DEFAULT_AGENT_ID,
    memory_dir: MemoryDirOption = None,
) -> None:
    """Retry merge-back: rebase the branch onto HEAD and fast-forward; keep it on conflict."""
    from orchestrator.cli.commands import run_async

    repo = resolve_memory_dir(memory_dir, agent)
    trouble = repo_in_trouble(repo)
    if trouble is not None:
        raise UserError(f"{trouble}; then retry the merge (the branch is kept)")
    outcome = run_async(lambda: merge_branch(repo, id))
    status = "merged" if outcome.status == "merged" else ("no_changes" if outcome.status == "no_changes" else None)
    if status is not None:
        _mark_if_stored(agent, outcome.branch, status)
    if outcome.status == "kept":
        files = ", ".join(outcome.files) or "-"
        raise UserError(f"{outcome.branch} kept ({outcome.reason}); files: {files}; nothing was lost")
    if outcome.status == "no_changes":
        _out.print(f"{outcome.branch}: nothing to merge; branch removed.")
    else:
        _out.print(f"Merged {outcome.commit_count} commit(s) from {outcome.branch}; HEAD is {outcome.new_head}.")


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
    from orchestrator.cli.commands import run_async

    dropped = run_async(lambda: discard_branch(repo, id))
    _mark_if_stored(agent, id, "discarded")
    _out.print(f"Discarded {id}: {len(dropped)} unmerged commit(s) dropped.")


async def _records(agent: str) -> list[ReflectionRecord]:
    async with Store.opened() as store:
        return await store.reflections(agent)


def _mark_if_stored(agent: str, branch_or_id: str, status: str) -> None:
    from orchestrator.cli.commands import run_async

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
