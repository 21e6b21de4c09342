"""``reverie reflections``: list, show, merge or discard kept reflection branches (R2, V1).

Git is the truth about branches; the conversation store adds why a branch was kept, and is told
when the user merges or discards one. The decisions themselves are the library's
(``orchestrator.app.review``): this module parses, prints, and says who decided (``--by``, the
login name by default) and why (``--why``; a discard needs one).
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from orchestrator.base.config import load_settings
from orchestrator.base.paths import DEFAULT_AGENT_ID, agent_memory_dir, store_path
from orchestrator.cli.aio import run_async
from orchestrator.cli.errors import UserError
from orchestrator.cli.memory import AgentOption, repo_in_trouble, resolve_memory_dir
from orchestrator.memfs.names import BRANCH_PREFIX
from orchestrator.memfs.resolution import Resolver
from orchestrator.memfs.worktrees import list_reflections
from orchestrator.store import ReflectionRecord, Store

if TYPE_CHECKING:
    from orchestrator.app.review import Decision, ReflectionReview

__all__ = ["MemoryDirOption", "app", "discard", "list_", "merge", "reflections_table", "register", "show"]

app = typer.Typer(
    help="List, show, merge or discard reflection branches kept after conflicts or held for review.",
    no_args_is_help=True,
)
_out = Console(highlight=False, soft_wrap=True)
_T = TypeVar("_T")

MemoryDirOption = Annotated[
    Path | None, typer.Option("--memory-dir", help="A memory repository (default: the agent's).")
]
_ByOption = Annotated[str | None, typer.Option("--by", help="Who decides (recorded; default: your login name).")]


@app.command("list")
def list_(
    agent: AgentOption = DEFAULT_AGENT_ID,
    memory_dir: MemoryDirOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON array: every reflection with its record.")] = False,
) -> None:
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
    items: list[dict[str, Any]] = []
    for b in branches:
        record = records.pop(b.branch, None)
        state = _state(record, merged_in_git=b.merged)
        why = _why(record) + (f"\nworktree left: {b.worktree}" if b.worktree else "")
        rows.append((b.id, b.branch, str(b.ahead), state, why))
        items.append(_item(b.id, b.branch, b.ahead, state, record, str(b.worktree) if b.worktree else None))
    for record in records.values():
        rows.append((record.id, record.branch, "0", _state(record, merged_in_git=True), _why(record)))
        items.append(_item(record.id, record.branch, 0, _state(record, merged_in_git=True), record, None))
    if as_json:
        print(json.dumps(sorted(items, key=_launch_order), ensure_ascii=False, indent=2))
        return
    if not rows:
        _out.print("No reflections.")
        return
    _out.print(reflections_table([row for _, row in sorted(zip(items, rows, strict=True), key=lambda p: _launch_order(p[0]))]))


def reflections_table(rows: Sequence[tuple[str, str, str, str, str]]) -> Table:
    """Rows of (id, branch, commits, outcome, why) as a table that fits an 80-column terminal with
    no name cut: the id and the outcome never wrap and take their full width, the reason (and a
    worktree left behind, under it) wraps in what remains. A branch is ``reverie/<kind>/<id>``: the
    caption says so and a kind other than ``reflection`` (a compaction's worktree left by a crash)
    is shown under its id. Rows keep the order given. The full branch names took 44 columns and cut the outcomes
    (``no_chang…``)."""
    shown = [(rid, _kind(branch, rid), commits, outcome, why) for rid, branch, commits, outcome, why in rows]
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
    if record.status == "kept_review":
        return "review"
    if record.kept:
        return f"kept ({record.reason_code or record.status.removeprefix('kept_')})"
    return record.outcome


def _launch_order(item: dict[str, Any]) -> tuple[str, str, str]:
    """Launch order: the store's millisecond start time (an id names only its second, so two
    launches in one second would sort by their random suffix), then the id."""
    return (item["created_at"] or "", item["id"], item["branch"])


def _item(
    rid: str, branch: str, ahead: int, state: str, record: ReflectionRecord | None, worktree: str | None
) -> dict[str, Any]:
    """One reflection for ``list --json``: git's view, then the store's record (null fields without one)."""
    return {
        "id": rid,
        "branch": branch,
        "commits_not_in_head": ahead,
        "outcome": state,
        "status": record.status if record else None,
        "reason": record.reason if record else None,
        "reason_code": record.reason_code if record else None,
        "error": record.error if record else None,
        "files": list(record.files) if record else [],
        "conversation_id": record.conversation_id if record else None,
        "trigger": record.trigger if record else None,
        "created_at": record.created_at if record else None,
        "decision": record.decision if record else None,
        "decided_by": record.decided_by if record else None,
        "decided_why": record.decided_why if record else None,
        "decided_at": record.decided_at if record else None,
        "worktree": worktree,
    }


def _why(record: ReflectionRecord | None) -> str:
    if record is None:
        return "no record: an interrupted or crashed run left it (merge --all)"
    return record.error or record.reason or "-"


@app.command("show")
def show(
    id: Annotated[str, typer.Argument(help="Reflection id or branch name.")],
    agent: AgentOption = DEFAULT_AGENT_ID,
    memory_dir: MemoryDirOption = None,
) -> None:
    """Print a reflection branch's diff and the transcript span it drew on, to decide on it."""
    repo = resolve_memory_dir(memory_dir, agent)
    review = run_async(lambda: _with_store(agent, repo, lambda store: _show(store, agent, repo, id)))
    record = review.record
    head = f"{review.branch}"
    if record is not None:
        head += f"  ({_state(record, merged_in_git=review.held is None)}; {record.trigger}, {record.created_at})"
    _out.print(head, markup=False)
    if record is not None and record.decided_by:
        said = f": {record.decided_why}" if record.decided_why else ""
        _out.print(f"decided: {record.decision} by {record.decided_by} at {record.decided_at}{said}", markup=False)
    if review.held is None:
        _out.print("nothing to merge: the branch is in HEAD", markup=False)
    else:
        held = review.held
        _out.print(f"{len(held.commits)} commit(s) not in HEAD; {held.summary}", markup=False)
        for path, added, removed in held.files:
            _out.print(f"  {path} +{added} -{removed}", markup=False)
        print()
        print(review.patch, end="" if review.patch.endswith("\n") else "\n")
    if review.transcript:
        assert record is not None
        print(f"\ntranscript it drew on (messages {record.from_seq + 1}-{record.through_seq}):")
        print(review.transcript, end="")
    elif record is None:
        print("\nno record in the store: the transcript span is unknown")


async def _show(store: Store | None, agent: str, repo: Path, id: str) -> ReflectionReview:
    # lazy: `reverie --help` imports every command module; only a decision needs the library's review
    from orchestrator.app.review import show_reflection

    return await show_reflection(store, agent, repo, id)


@app.command("merge")
def merge(
    id: Annotated[str | None, typer.Argument(help="Reflection id or branch name (or --all).")] = None,
    agent: AgentOption = DEFAULT_AGENT_ID,
    memory_dir: MemoryDirOption = None,
    all_: Annotated[bool, typer.Option("--all", help="Merge every reflection branch not in HEAD, oldest first.")] = False,
    resolve: Annotated[
        bool | None,
        typer.Option(
            "--resolve/--keep-conflicts",
            help="Hand a conflict to the resolver subagent instead of keeping the branch "
            "(default: only under [reflection] merge = review).",
        ),
    ] = None,
    by: _ByOption = None,
    why: Annotated[str, typer.Option("--why", help="Why it is merged (recorded).")] = "",
) -> None:
    """Merge a branch through merge-back (the lock, validation; rebase onto HEAD and fast-forward);
    keep it on a conflict (or resolve it). Who merged and why is recorded."""
    if (id is None) == (not all_):
        raise UserError("name one reflection to merge, or pass --all (not both)")
    repo = resolve_memory_dir(memory_dir, agent)
    trouble = repo_in_trouble(repo)
    if trouble is not None:
        raise UserError(f"{trouble}; then retry the merge (the branch is kept)")
    if resolve is None:
        resolve = load_settings().reflection_merge == "review"
    resolver = _resolver(agent) if resolve else None
    who = by or _login()
    if id is not None:
        decision = run_async(lambda: _with_store(agent, repo, lambda st: _merge(st, agent, repo, id, who, why, resolver)))
        _report_one(decision, strict=True)
        return
    names = [b.branch for b in run_async(lambda: list_reflections(repo, kind=None)) if not b.merged]
    if not names:
        _out.print("No reflection branches to merge.")
        return
    settled = 0
    for name in names:
        decision = run_async(
            lambda name=name: _with_store(agent, repo, lambda st: _merge(st, agent, repo, name, who, why, resolver))  # type: ignore[misc]
        )
        settled += _report_one(decision, strict=False)
    if settled == len(names):
        _out.print(f"All {settled} branch(es) merged.")
        return
    _out.print(f"{settled} of {len(names)} branch(es) merged; the rest are kept (nothing was lost).")
    raise typer.Exit(1)


async def _merge(
    store: Store | None, agent: str, repo: Path, id: str, by: str, why: str, resolver: Resolver | None
) -> Decision:
    # lazy: `reverie --help` imports every command module; only a decision needs the library's review
    from orchestrator.app.review import merge_reflection

    return await merge_reflection(store, agent, repo, id, by=by, why=why, resolver=resolver)


def _report_one(decision: Decision, *, strict: bool) -> bool:
    """Print one merge's outcome (a one-line error when ``strict``); whether it is in HEAD."""
    if decision.outcome in {"kept", "pending", "failed"}:
        files = decision.record.files if decision.record is not None else ()
        detail = (
            f"{decision.outcome} ({decision.reason}); files: {', '.join(files) or '-'}"
            if decision.outcome != "failed"
            else f"merge failed: {decision.reason or 'git failed'}"
        )
        if strict:
            raise UserError(f"{decision.branch} {detail}; nothing was lost")
        _out.print(f"{decision.branch}: {detail}")
        return False
    if decision.outcome == "no_changes":
        _out.print(f"{decision.branch}: nothing to merge; branch removed.")
    else:
        _out.print(f"Merged {decision.commits} commit(s) from {decision.branch}; HEAD is {decision.revision}.")
    return True


def _resolver(agent: str) -> Resolver:
    """D3's resolver subagent on the configured model (the scripted one offline)."""
    # lazy: `reverie --help` imports every command module; only --resolve needs the model and subagent
    from orchestrator.runtime.runtime import build_model
    from subagents.resolver import make_resolver

    settings = load_settings()
    return make_resolver(build_model(settings), agent_id=agent, settings=settings)


@app.command("discard")
def discard(
    id: Annotated[str, typer.Argument(help="Reflection id or branch name.")],
    agent: AgentOption = DEFAULT_AGENT_ID,
    memory_dir: MemoryDirOption = None,
    why: Annotated[str, typer.Option("--why", help="Why it is discarded (required; recorded).")] = "",
    by: _ByOption = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete a reflection branch and its commits (only on your explicit request, with a reason)."""
    if not why.strip():
        raise UserError("discard needs --why TEXT: the reason is recorded with the decision")
    repo = resolve_memory_dir(memory_dir, agent)
    if not yes and not typer.confirm(f"Discard reflection {id} and its unmerged commits?"):
        raise typer.Exit(1)
    who = by or _login()
    decision = run_async(lambda: _with_store(agent, repo, lambda st: _discard(st, agent, repo, id, who, why)))
    _out.print(f"Discarded {id}: {decision.commits} unmerged commit(s) dropped.")


async def _discard(store: Store | None, agent: str, repo: Path, id: str, by: str, why: str) -> Decision:
    # lazy: `reverie --help` imports every command module; only a decision needs the library's review
    from orchestrator.app.review import discard_reflection

    return await discard_reflection(store, agent, repo, id, by=by, why=why)


async def _records(agent: str) -> list[ReflectionRecord]:
    async with Store.opened() as store:
        return await store.reflections(agent)


async def _with_store(agent: str, repo: Path, job: Callable[[Store | None], Awaitable[_T]]) -> _T:
    """``job`` with the agent's store when ``repo`` is the agent's and a store exists, else None
    (another repository's branches have no records here)."""
    if not (_is_agents_repo(repo, agent) and store_path().exists()):
        return await job(None)
    async with Store.opened() as store:
        return await job(store)


def _login() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def register(main: typer.Typer) -> None:
    """Add the ``reflections`` group to the main app."""
    main.add_typer(app, name="reflections")
