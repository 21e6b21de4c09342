"""``reverie memory``: create, locate, inspect and validate an agent's memory repository."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text
from rich.tree import Tree

from orchestrator.base.paths import DEFAULT_AGENT_ID, agent_memory_dir
from orchestrator.cli.errors import UserError
from orchestrator.cli.options import AgentOption

__all__ = [
    "AgentOption",
    "app",
    "init",
    "install_hook",
    "path",
    "repo_in_trouble",
    "resolve_memory_dir",
    "tree",
    "validate",
]

app = typer.Typer(help="Create, locate, inspect and validate memory repositories.", no_args_is_help=True)
_out = Console(highlight=False, soft_wrap=True)

_POLICIES = ("root-marker", "legacy-only", "shared-memory")


def resolve_memory_dir(directory: Path | None, agent: str) -> Path:
    """An explicit directory wins; otherwise the agent's repository. Either must be the top level of
    a git repository that git can read (a damaged ``.git`` is reported with git's own words)."""
    # lazy: `reverie --help` imports every command module (cli/app.py)
    from orchestrator.memfs.git import GitError
    from orchestrator.memfs.history import top_level

    if directory is not None:
        if not directory.is_dir():
            raise UserError(f"{directory}: no such directory")
        path = directory
    else:
        path = agent_memory_dir(agent)
        if not (path / ".git").exists():
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
    # lazy: `reverie --help` imports every command module (cli/app.py)
    from orchestrator.memfs.operations import present, started_by_reverie
    from orchestrator.memfs.repo import repo_status

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
    # lazy: `reverie --help` imports every command module (cli/app.py)
    from orchestrator.memfs.repo import init_memory_repo

    path = agent_memory_dir(agent)
    existed = (path / ".git").exists()
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
    from orchestrator.memfs.repo import head_revision
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
    # lazy: `reverie --help` imports every command module (cli/app.py)
    from orchestrator.memfs.hook import install_hook as _install
    from orchestrator.memfs.repo import is_memory_repo

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
    # lazy: `reverie --help` imports every command module (cli/app.py)
    from orchestrator.memfs.history import tracked_files
    from orchestrator.memfs.repo import head_revision

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
    # lazy: `reverie --help` imports every command module (cli/app.py)
    from orchestrator.memfs.layout import MEMFS_V2, is_projected_memory_path, is_skills_path

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
