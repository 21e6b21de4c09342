"""``reverie memory``: create, locate, inspect and validate an agent's memory repository; read its
history with who made each change and why, take changes back and restore a past tree (H2, H3).
The history commands are thin: ``app/memory_history.py`` answers, this module prints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.text import Text
from rich.tree import Tree

from orchestrator.app.memory_history import (
    LogFilter,
    kept_lines_notes,
    memory_changes,
    policy_resolver,
    restore_memory,
    undo_changes,
)
from orchestrator.base.config import load_settings
from orchestrator.base.paths import DEFAULT_AGENT_ID, agent_memory_dir
from orchestrator.cli.aio import run_async
from orchestrator.cli.errors import UserError
from orchestrator.cli.memory_log import change_json, format_change
from orchestrator.cli.options import AgentOption
from orchestrator.memfs.errors import GitError
from orchestrator.memfs.gitdir import is_repository
from orchestrator.memfs.history import blame as blame_lines
from orchestrator.memfs.history import (
    commit_message,
    first_parents,
    patch,
    resolve_commit,
    top_level,
    tracked_files,
)
from orchestrator.memfs.hook import install_hook as _install
from orchestrator.memfs.layout import MEMFS_V2, is_projected_memory_path, is_skills_path
from orchestrator.memfs.operations import present, started_by_reverie
from orchestrator.memfs.provenance import body, parse
from orchestrator.memfs.repo import head_revision, init_memory_repo, is_memory_repo, repo_status

if TYPE_CHECKING:
    from orchestrator.memfs.resolution import Resolver
    from orchestrator.memfs.undo import UndoOutcome

__all__ = [
    "AgentOption",
    "app",
    "blame",
    "diff",
    "init",
    "install_hook",
    "log",
    "path",
    "repo_in_trouble",
    "resolve_memory_dir",
    "restore",
    "show",
    "tree",
    "undo",
    "validate",
]

app = typer.Typer(help="Create, locate, inspect and validate memory repositories.", no_args_is_help=True)
_out = Console(highlight=False, soft_wrap=True)

_POLICIES = ("root-marker", "legacy-only", "shared-memory")


def resolve_memory_dir(directory: Path | None, agent: str) -> Path:
    """An explicit directory wins; otherwise the agent's repository. Either must be the top level of
    a git repository that git can read (a damaged ``.git`` is reported with git's own words)."""

    if directory is not None:
        if not directory.is_dir():
            raise UserError(f"{directory}: no such directory")
        path = directory
    else:
        path = agent_memory_dir(agent)
        if not is_repository(path):
            raise UserError(f"agent {agent!r} has no memory repository at {path}; run `reverie memory init --agent {agent}`")
    try:
        found = top_level(path)
    except GitError as error:
        said = [ln for ln in error.stderr.splitlines() if ln.strip()]
        reason = said[0] if said else f"git exit {error.returncode}"
        raise UserError(f"{path}: not a readable git repository ({reason})") from None
    if found != path.resolve():
        raise UserError(f"{path}: not the top level of a git repository")
    return path


def repo_in_trouble(repo: Path) -> str | None:
    """Why the checkout cannot be worked on now (a rebase or merge stopped half-way, unmerged files),
    with the git commands that finish or undo it; None when it is fine. Nothing is changed."""

    status = repo_status(repo)
    if not status.in_conflict:
        return None
    files = f" (unmerged: {', '.join(status.conflicted)})" if status.conflicted else ""
    found = present(repo / ".git")
    if found and not started_by_reverie(repo):
        # its state can name commands (an exec line, a branch to reset): never advise running it
        shown = ", ".join(f".git/{name}" for name in found)
        return (
            f"{repo}: {status.operation or 'an operation in progress'} that reverie did not start ({shown}){files}; "
            "its state can name commands, so reverie neither continues nor aborts it, and removes it at the "
            "agent's next turn"
        )
    if status.operation == "rebase in progress":
        how = f"finish it with `git -C {repo} rebase --continue` or undo it with `git -C {repo} rebase --abort`"
    elif status.operation == "merge in progress":
        how = f"finish it with `git -C {repo} commit` or undo it with `git -C {repo} merge --abort`"
    else:
        how = "resolve the files, `git add` them and commit"
    return f"{repo}: {status.operation or 'unresolved conflict'}{files}; {how}"


@app.command("init")
def init(agent: AgentOption = DEFAULT_AGENT_ID) -> None:
    """Create the agent's memory repository (v2 layout, hook installed, first commit)."""

    path = agent_memory_dir(agent)
    existed = is_repository(path)
    revision = init_memory_repo(path)
    verb = "already initialized" if existed else "initialized"
    _out.print(f"{verb} {path} at {revision[:7]}")


@app.command("path")
def path(agent: AgentOption = DEFAULT_AGENT_ID) -> None:
    """Print the agent's memory directory (whether or not it exists yet)."""
    print(agent_memory_dir(agent))


@app.command("validate")
def validate(
    directory: Annotated[Path | None, typer.Argument(help="Repository to check (default: the agent's).")] = None,
    head: Annotated[bool, typer.Option("--head", help="Audit the committed HEAD instead of the staged tree.")] = False,
    agent: AgentOption = DEFAULT_AGENT_ID,
) -> None:
    """Validate the staged tree (what `git commit` would check) and print the hook's report."""
    # lazy: `reverie --help` imports every command module (cli/app.py)
    from orchestrator.memfs.validator import audit_head, format_report, validate_staged

    repo = resolve_memory_dir(directory, agent)
    trouble = repo_in_trouble(repo)
    if trouble is not None:
        raise UserError(trouble)
    if head and head_revision(repo) is None:
        raise UserError(f"{repo}: no commits yet, so there is no HEAD to audit")
    result = audit_head(repo) if head else validate_staged(repo)
    if result.ok:
        _out.print(f"{'HEAD' if head else 'staged tree'} of {repo}: valid")
        return
    typer.echo(format_report(result), err=True, nl=False)
    raise typer.Exit(1)


@app.command("install-hook")
def install_hook(
    directory: Annotated[Path, typer.Argument(help="A git repository (its top level).")],
    policy: Annotated[str, typer.Option("--policy", "-p", help="root-marker, legacy-only or shared-memory.")] = "root-marker",
) -> None:
    """Install reverie's pre-commit validation hook into any git repository."""

    if policy not in _POLICIES:
        raise UserError(f"--policy {policy!r}: use one of {', '.join(_POLICIES)}")
    if not is_memory_repo(directory):
        raise UserError(f"{directory}: not the top level of a git repository")
    _install(directory, policy=policy)
    _out.print(f"installed the pre-commit hook in {directory} (policy {policy})")


@app.command("tree")
def tree(
    directory: Annotated[Path | None, typer.Argument(help="Repository (default: the agent's).")] = None,
    agent: AgentOption = DEFAULT_AGENT_ID,
) -> None:
    """Show the committed memory as a tree: core files, indexed folders, deferred files, skills."""

    repo = resolve_memory_dir(directory, agent)
    trouble = repo_in_trouble(repo)
    if trouble is not None:
        typer.echo(f"reverie: warning: {trouble}", err=True)
    revision = head_revision(repo)
    if revision is None:
        _out.print(f"{repo}: no commits yet")
        return
    paths = list(tracked_files(repo, revision) or ())
    all_paths = set(paths)
    # the root line folds onto more lines rather than lose its end (the HEAD) at the terminal's width
    root = Tree(Text.assemble((str(repo), "bold"), f" @ {revision[:7]}", overflow="fold"))
    nodes: dict[str, Tree] = {"": root}
    for rel in sorted(paths):
        parts = rel.split("/")
        for depth in range(1, len(parts)):
            key = "/".join(parts[:depth])
            if key not in nodes:
                nodes[key] = nodes["/".join(parts[: depth - 1])].add(
                    Text(f"{parts[depth - 1]}/", style="blue", overflow="fold")
                )
        nodes["/".join(parts[:-1])].add(Text.assemble(parts[-1], "  ", (_kind(rel, all_paths), "dim"), overflow="fold"))
    _out.print(root, soft_wrap=False)


def _kind(rel: str, all_paths: set[str]) -> str:
    if is_skills_path(rel):
        return "skill"
    if not rel.endswith(".md"):
        return "file"
    if rel == "MEMORY.md":
        return "root index"
    if "/" not in rel:
        return "core"
    if rel.endswith("/MEMORY.md"):
        return "index"
    return "deferred" if is_projected_memory_path(rel, all_paths, MEMFS_V2) else "not memory (no index)"


# ---------------------------------------------------------------------------------------------
# History: log, show, diff, blame (H2)
# ---------------------------------------------------------------------------------------------

_DirOption = Annotated[Path | None, typer.Option("--dir", "-C", help="Repository (default: the agent's).")]


@app.command("log")
def log(
    agent: AgentOption = DEFAULT_AGENT_ID,
    by_agent: Annotated[str | None, typer.Option("--by", help="Only changes made for this agent id.")] = None,
    source: Annotated[str | None, typer.Option("--source", help="agent, reflection, resolver, undo, restore, init, stress or outside.")] = None,
    file: Annotated[str | None, typer.Option("--file", help="Only changes touching this file.")] = None,
    since: Annotated[str | None, typer.Option("--since", help="Only changes since then (ISO 8601, @seconds, 'N hours ago').")] = None,
    count: Annotated[int | None, typer.Option("-n", help="At most this many changes.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON array of changes.")] = False,
    directory: _DirOption = None,
) -> None:
    """One entry per change, newest first: when, which writer (a commit reverie did not make is
    `outside`), its ids, subject and files; a reflection's merged commits as one."""

    repo = resolve_memory_dir(directory, agent)
    wanted = LogFilter(agent=by_agent, source=source, path=file, since=since, count=count)
    found = run_async(lambda: memory_changes(repo, wanted))
    if as_json:
        print(json.dumps([change_json(c) for c in found], ensure_ascii=False, indent=1))
        return
    if not found:
        _out.print(f"{repo}: no changes match")
    for change in found:
        print(format_change(change))


def _commit_or_fail(repo: Path, revision: str) -> str:
    sha = resolve_commit(repo, revision)
    if sha is None:
        raise UserError(f"{revision!r} names no commit in {repo}")
    return sha


@app.command("show")
def show(
    revision: Annotated[str, typer.Argument(help="A commit (id, HEAD~2, ...).")],
    agent: AgentOption = DEFAULT_AGENT_ID,
    directory: _DirOption = None,
) -> None:
    """One commit: its provenance and its diff."""

    repo = resolve_memory_dir(directory, agent)
    sha = _commit_or_fail(repo, revision)
    found = commit_message(repo, sha)
    message = found[1] if found else ""
    provenance = parse(message)
    parents = first_parents(repo, sha, 2)
    print(f"commit {sha}")
    print(f"source {provenance.source}")
    for key, value in provenance.as_dict().items():
        if key != "source":
            print(f"{key} {value}")
    print()
    print(body(message).rstrip("\n"))
    print()
    print(patch(repo, parents[1] if len(parents) > 1 else None, sha) or "", end="")


@app.command("diff")
def diff(
    before: Annotated[str, typer.Argument(help="From this revision.")],
    after: Annotated[str | None, typer.Argument(help="To this revision (default: HEAD).")] = None,
    agent: AgentOption = DEFAULT_AGENT_ID,
    directory: _DirOption = None,
) -> None:
    """The diff between two revisions of memory."""

    repo = resolve_memory_dir(directory, agent)
    old = _commit_or_fail(repo, before)
    new = _commit_or_fail(repo, after or "HEAD")
    print(patch(repo, old, new) or "", end="")


@app.command("blame")
def blame(
    file: Annotated[str, typer.Argument(help="A file of the memory repository.")],
    agent: AgentOption = DEFAULT_AGENT_ID,
    directory: _DirOption = None,
) -> None:
    """Each line of FILE with the commit and the writer that last changed it."""

    repo = resolve_memory_dir(directory, agent)
    found = blame_lines(repo, file)
    if found is None:
        raise UserError(f"{file}: no such file in HEAD of {repo}")
    for line in found:
        print(f"{line.commit[:7]} {line.provenance.source:<10} {line.subject[:30]:<30} {line.number:>4}| {line.text}")


# ---------------------------------------------------------------------------------------------
# Undo and restore: new commits, merged back like a reflection (H3)
# ---------------------------------------------------------------------------------------------


def _resolver(agent: str) -> Resolver | None:
    return policy_resolver(load_settings(), agent)


def _report(outcome: UndoOutcome, verb: str) -> None:
    if outcome.status == "dry-run":
        for span in outcome.spans:
            what = ", ".join(c[:7] for c in span.commits) or span.base[:7]
            print(f"would {verb}: {what} ({span.subject}); the files return to {span.base[:7]}")
        return
    for merged in outcome.merges:
        if merged.in_head:
            made = ", ".join(c[:7] for c in merged.commits) or "nothing"
            print(f"{verb}: new commit {made} ({merged.status}); HEAD is {(merged.new_head or '')[:7]}")
        else:
            files = f" ({', '.join(merged.files)})" if merged.files else ""
            typer.echo(
                f"reverie: {verb} kept on branch {merged.branch}{files}: {merged.reason or merged.status}; "
                f"see `reverie reflections list`",
                err=True,
            )
    for note in kept_lines_notes(outcome, verb):
        typer.echo(f"reverie: warning: {note}", err=True)
    if outcome.kept:
        raise typer.Exit(1)


@app.command("undo")
def undo(
    revision: Annotated[str | None, typer.Argument(help="The commit to take back.")] = None,
    reflection: Annotated[str | None, typer.Option("--reflection", help="Take back everything this reflection merged.")] = None,
    since: Annotated[str | None, typer.Option("--since", help="Take back every change since then.")] = None,
    run: Annotated[Path | None, typer.Option("--run", help="Take back the commits of this batch run directory.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what would be taken back.")] = False,
    agent: AgentOption = DEFAULT_AGENT_ID,
    directory: _DirOption = None,
) -> None:
    """Take changes back with new commits (history is never rewritten), through the same lock
    and validation as a reflection's merge-back; a conflict with later edits is resolved or kept."""

    repo = resolve_memory_dir(directory, agent)
    trouble = repo_in_trouble(repo)
    if trouble is not None:
        raise UserError(trouble)
    resolver = None if dry_run else _resolver(agent)
    outcome = run_async(
        lambda: undo_changes(
            repo, agent_id=agent, revision=revision, reflection=reflection, since=since, run_dir=run,
            dry_run=dry_run, resolver=resolver,
        )
    )
    _report(outcome, "undo")


@app.command("restore")
def restore(
    at: Annotated[str, typer.Option("--at", help="A revision, or a time (the last commit before it).")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say which revision would be restored.")] = False,
    agent: AgentOption = DEFAULT_AGENT_ID,
    directory: _DirOption = None,
) -> None:
    """Make the whole memory tree as it was then a new commit."""

    repo = resolve_memory_dir(directory, agent)
    trouble = repo_in_trouble(repo)
    if trouble is not None:
        raise UserError(trouble)
    resolver = None if dry_run else _resolver(agent)
    outcome = run_async(lambda: restore_memory(repo, at, agent_id=agent, dry_run=dry_run, resolver=resolver))
    _report(outcome, "restore")
