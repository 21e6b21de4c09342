"""The bash sandbox with real bubblewrap and real git: environment allowlist, what is writable, the
memory repo's hooks and config, worktrees, network, and the auto/bwrap/off modes (D11)."""

from __future__ import annotations

import os
import shutil
import site
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from orchestrator.memfs import hook_service
from orchestrator.memfs.git import GitRepo
from orchestrator.memfs.repo import init_memory_repo
from orchestrator.memfs.worktrees import create_worktree
from orchestrator.tools import ToolContext, run_bash, run_tool
from orchestrator.tools import sandbox as sandbox_module
from orchestrator.tools.sandbox import bwrap_problem, tool_environment
from tests.support import none_left_within

pytestmark = pytest.mark.anyio

KEY = "sk-test-0123456789abcdef-SECRET"


@pytest.fixture(autouse=True)
def _bwrap_runs() -> None:
    problem = bwrap_problem()
    assert problem is None, f"these tests need bubblewrap (make test installs it): {problem}"


def _ctx(tmp_path: Path, memory: Path | None = None, **kw: object) -> ToolContext:
    ws = tmp_path / "project" / "ws"
    ws.mkdir(parents=True, exist_ok=True)
    if memory is None:
        memory = tmp_path / "mem"
        memory.mkdir(exist_ok=True)
    kw.setdefault("sandbox", "bwrap")
    kw.setdefault("workspace", ws)
    return ToolContext(memory_dir=memory, agent_id="agent-1", agent_name="Ada", conversation_id="c-1", **kw)  # type: ignore[arg-type]


async def _memory(tmp_path: Path) -> Path:
    repo = tmp_path / "memory"
    await anyio.to_thread.run_sync(init_memory_repo, repo)
    return repo


async def _git(repo: Path, *args: str) -> str:
    done = await anyio.to_thread.run_sync(lambda: GitRepo(repo).run(*args))
    return done.stdout.strip()


async def test_environment_is_an_allowlist_without_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("SOME_SECRETISH", "not-passed")
    monkeypatch.setenv("MY_TOOL_SETTING", "passed")
    monkeypatch.setenv("COPY_OF_KEY", KEY)
    ctx = _ctx(tmp_path, env_names=("MY_TOOL_SETTING", "COPY_OF_KEY"), extra_env={"PARENT_AGENT_ID": "p-1"})
    result = await run_bash("env; cat /proc/1/environ /proc/$PPID/environ 2>/dev/null | tr '\\0' '\\n'", ctx)
    assert result.ok, result.output
    assert KEY not in result.output
    names = {line.split("=", 1)[0] for line in result.output.splitlines() if "=" in line}
    assert "SOME_SECRETISH" not in names
    assert {"PATH", "HOME", "AGENT_ID", "AGENT_NAME", "CONVERSATION_ID", "MEMORY_DIR", "PARENT_AGENT_ID", "MY_TOOL_SETTING"} <= names
    assert "COPY_OF_KEY" not in names


def test_unconfined_environment_is_the_same_allowlist(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, sandbox="off", env_names=("FROM_CONFIG",), secrets=("sk-from-config.toml",))
    source = {"OPENAI_API_KEY": KEY, "PATH": "/usr/bin", "HOME": "/h", "EDITOR": "vi", "FROM_CONFIG": "sk-from-config.toml"}
    env = tool_environment(ctx, source)
    assert env["PATH"] == "/usr/bin" and env["HOME"] == "/h"
    assert "OPENAI_API_KEY" not in env and "EDITOR" not in env
    assert "FROM_CONFIG" not in env, "a value equal to the configured key never passes, whatever its name"


async def test_writes_land_only_in_workspace_and_memory(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    home = Path(os.environ["HOME"])
    result = await run_bash("echo pwned > ../outside.txt", ctx)
    assert not result.ok and "Read-only file system" in result.output
    for target in (f"{home}/pwned.txt", f"{tmp_path}/pwned.txt", f"{os.environ['REVERIE_HOME']}/pwned.txt"):
        assert not (await run_bash(f"echo pwned > {target}", ctx)).ok
    ok = await run_bash('echo a > in-ws.txt && echo b > "$MEMORY_DIR/in-mem.txt" && echo c > /tmp/private.txt && cat /tmp/private.txt', ctx)
    assert ok.ok and ok.output == "c"
    assert (ctx.workspace / "in-ws.txt").read_text() == "a\n"
    assert ctx.memory_dir is not None and (ctx.memory_dir / "in-mem.txt").read_text() == "b\n"
    for absent in (Path("/tmp/private.txt"), tmp_path / "project" / "outside.txt", home / "pwned.txt", tmp_path / "pwned.txt"):
        assert not await anyio.Path(absent).exists(), absent


async def test_reverie_config_file_is_hidden(tmp_path: Path) -> None:
    config = Path(os.environ["REVERIE_HOME"]) / "config.toml"
    config.write_text(f'[model]\napi_key = "{KEY}"\n')
    result = await run_bash(f"cat {config}; echo end", _ctx(tmp_path))
    assert result.ok and KEY not in result.output


async def test_memory_git_works_but_hooks_and_config_are_read_only(tmp_path: Path) -> None:
    repo = await _memory(tmp_path)
    hook = repo / ".git" / "hooks" / "pre-commit"
    before, config_before = hook.read_bytes(), (repo / ".git" / "config").read_bytes()
    ctx = _ctx(tmp_path, memory=repo)
    for attack in (
        'echo "exit 0" > "$MEMORY_DIR/.git/hooks/pre-commit"',
        'rm -f "$MEMORY_DIR/.git/hooks/pre-commit"',
        'echo x > "$MEMORY_DIR/.git/hooks/post-commit"',
        'git -C "$MEMORY_DIR" config core.hooksPath /tmp',
        'mv "$MEMORY_DIR/.git/hooks" "$MEMORY_DIR/.git/hooks-old"',
    ):
        assert not (await run_bash(attack, ctx)).ok, attack
    assert hook.read_bytes() == before and (repo / ".git" / "config").read_bytes() == config_before
    assert not (repo / ".git" / "hooks" / "post-commit").exists()
    commit = await run_bash(
        'cd "$MEMORY_DIR" && printf -- "---\\nname: sandboxed\\ndescription: notes\\n---\\nhello\\n" > sandboxed.md '
        '&& git add sandboxed.md && git commit -q -m "from the sandbox" && git log -1 --format=%s',
        ctx,
    )
    assert commit.ok, commit.output
    assert commit.output.endswith("from the sandbox")
    assert await _git(repo, "log", "-1", "--format=%s") == "from the sandbox"
    rejected = await run_bash(
        'cd "$MEMORY_DIR" && printf "no frontmatter\\n" > bad.md && git add bad.md && git commit -q -m bad',
        ctx,
    )
    assert not rejected.ok and "frontmatter" in rejected.output.lower()


async def test_worktree_commits_write_the_common_dir(tmp_path: Path) -> None:
    repo = await _memory(tmp_path)
    worktree = await create_worktree(repo, agent_id="agent-1", root=tmp_path / "worktrees")
    hook = repo / ".git" / "hooks" / "pre-commit"
    before = hook.read_bytes()
    ctx = _ctx(tmp_path, memory=worktree.path, workspace=worktree.path)
    assert not (await run_bash(f'echo "exit 0" > {hook}', ctx)).ok
    commit = await run_bash(
        'printf -- "---\\nname: wt\\ndescription: wt\\n---\\nfrom worktree\\n" > wt.md && git add wt.md '
        '&& git commit -q -m "worktree commit"',
        ctx,
    )
    assert commit.ok, commit.output
    assert hook.read_bytes() == before
    assert await _git(repo, "rev-parse", worktree.branch) != await _git(repo, "rev-parse", "HEAD")
    assert await _git(repo, "log", "-1", "--format=%s", worktree.branch) == "worktree commit"


async def test_sandboxed_commits_are_validated_by_this_process(tmp_path: Path) -> None:
    repo = await _memory(tmp_path)
    worktree = await create_worktree(repo, agent_id="agent-1", root=tmp_path / "worktrees")
    for memory in (repo, worktree.path):
        ctx = _ctx(tmp_path, memory=memory, workspace=memory)
        assert (await run_bash("true", ctx)).ok
        service = hook_service._service
        assert service is not None
        before = service.answered
        good = await run_bash(
            'printf -- "---\\nname: served\\ndescription: notes\\n---\\nhello\\n" > served.md '
            '&& git add served.md && git commit -q -m served -- served.md',
            ctx,
        )
        assert good.ok, good.output
        bad = await run_bash('printf "no frontmatter\\n" > bad.md && git add bad.md && git commit -q -m bad', ctx)
        assert not bad.ok and "frontmatter" in bad.output.lower()
        assert service.answered == before + 2
        assert await _git(memory, "log", "-1", "--format=%s") == "served"


async def test_what_git_reads_as_a_path_is_read_only_and_the_wrapper_cannot_move(tmp_path: Path) -> None:
    """A1 and A4: inside the sandbox only what a commit writes is writable in .git."""
    repo = await _memory(tmp_path)
    ctx = _ctx(tmp_path, memory=repo)
    assert (await run_bash("git -C \"$MEMORY_DIR\" status --short", ctx)).ok
    listing_before = sorted(p.name for p in (repo / ".git").iterdir())
    for attack in (
        'echo "* filter=evil" > "$MEMORY_DIR/.git/info/attributes"',
        'echo /tmp > "$MEMORY_DIR/.git/objects/info/alternates"',
        'mv "$MEMORY_DIR/.git/reverie" "$MEMORY_DIR/.git/reverie-moved"',
        'rm -rf "$MEMORY_DIR/.git/reverie"',
        'rm -f "$MEMORY_DIR/.git/reverie-merge.lock"',
    ):
        assert not (await run_bash(attack, ctx)).ok, attack
    assert sorted(p.name for p in (repo / ".git").iterdir()) == listing_before
    assert not (repo / ".git" / "objects" / "info" / "alternates").exists()
    commit = await run_bash(
        'cd "$MEMORY_DIR" && printf -- "---\\nname: p\\ndescription: d\\n---\\nx\\n" > p.md && git add p.md '
        '&& git commit -q -m "pathspec" -- p.md && git log -1 --format=%s',
        ctx,
    )
    assert commit.ok and commit.output.endswith("pathspec"), commit.output


async def test_a_worktree_sandbox_cannot_repoint_its_own_record(tmp_path: Path) -> None:
    repo = await _memory(tmp_path)
    worktree = await create_worktree(repo, agent_id="agent-1", root=tmp_path / "worktrees")
    ctx = _ctx(tmp_path, memory=worktree.path, workspace=worktree.path)
    record = Path(await _git(worktree.path, "rev-parse", "--absolute-git-dir"))
    pointer = (record / "commondir").read_text()
    for attack in (f'echo /tmp/evil > "{record}/commondir"', 'echo "gitdir: /tmp/evil" > .git', f'echo x > "{repo}/.git/config"'):
        assert not (await run_bash(attack, ctx)).ok, attack
    assert (record / "commondir").read_text() == pointer


async def test_a_protected_path_that_vanishes_after_planning_does_not_fail_the_command(tmp_path: Path) -> None:
    """git prunes an empty ``.git/worktrees`` when a worktree goes, which can fall between the
    sandbox's look-up of what to protect and bubblewrap's start."""
    repo = await _memory(tmp_path)
    worktree = await create_worktree(repo, agent_id="agent-1", root=tmp_path / "worktrees")
    ctx = _ctx(tmp_path, memory=repo)
    argv, env = sandbox_module.plan_command(ctx, ["bash", "-c", "echo ran"])
    assert str(repo / ".git" / "worktrees") in argv
    shutil.rmtree(worktree.path)
    shutil.rmtree(repo / ".git" / "worktrees")
    done = await anyio.to_thread.run_sync(lambda: subprocess.run(argv, env=env, capture_output=True, text=True))
    assert done.returncode == 0 and done.stdout == "ran\n", done.stderr


@pytest.fixture
def listener() -> Iterator[int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.sendall(b"hello-from-loopback\n")
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


async def test_network_on_by_default_and_off_when_asked(tmp_path: Path, listener: int) -> None:
    probe = f"{sys.executable} -c \"import socket; s=socket.create_connection(('127.0.0.1', {listener}), 3); print(s.recv(64).decode().strip())\""
    on = await run_bash(probe, _ctx(tmp_path))
    assert on.ok and on.output == "hello-from-loopback"
    off = await run_bash(probe, _ctx(tmp_path, network=False))
    assert not off.ok and "hello-from-loopback" not in off.output


@pytest.fixture
def no_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A PATH without bubblewrap, and a fresh probe, as on a machine that lacks it."""
    bindir = tmp_path / "bin-without-bwrap"
    bindir.mkdir()
    for tool in ("bash", "env", "echo", "cat"):
        found = subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip()
        if found:
            (bindir / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(bindir))
    saved = list(sandbox_module._probe_result), list(sandbox_module._warned)
    sandbox_module._probe_result.clear()
    sandbox_module._warned.clear()
    yield
    sandbox_module._probe_result[:] = saved[0]
    sandbox_module._warned[:] = saved[1]


async def test_required_sandbox_refuses_in_one_line(tmp_path: Path, no_bwrap: None) -> None:
    result = await run_tool("bash", '{"command": "echo ran > ran.txt"}', _ctx(tmp_path, sandbox="bwrap"))
    assert not result.ok and "\n" not in result.output
    assert "sandbox = bwrap" in result.output and "bwrap is not installed" in result.output
    assert not (tmp_path / "project" / "ws" / "ran.txt").exists()


async def test_auto_without_bubblewrap_refuses_in_one_line_naming_both_ways_on(tmp_path: Path, no_bwrap: None) -> None:
    """A6: never silently unconfined."""
    result = await run_tool("bash", '{"command": "echo ran > ran.txt"}', _ctx(tmp_path, sandbox="auto"))
    assert not result.ok and "\n" not in result.output
    assert "bwrap is not installed" in result.output and 'sandbox = "off"' in result.output
    assert not (tmp_path / "project" / "ws" / "ran.txt").exists()


@pytest.fixture
def broken_bwrap(no_bwrap: None, tmp_path: Path) -> None:
    """A bubblewrap that is installed but cannot set up here (no user namespaces, as in some
    containers): it fails the way bwrap does, before running anything."""
    fake = tmp_path / "bin-without-bwrap" / "bwrap"
    fake.write_text('#!/bin/sh\necho "bwrap: No permissions to create new namespace" >&2\nexit 1\n')
    fake.chmod(0o755)


async def test_a_bubblewrap_that_cannot_run_refuses_in_one_line_without_a_probe_first(
    tmp_path: Path, broken_bwrap: None
) -> None:
    """The probe runs only once a command failed as bubblewrap fails (not before every first command)."""
    assert not sandbox_module._probe_result
    result = await run_tool("bash", '{"command": "echo ran > ran.txt"}', _ctx(tmp_path, sandbox="auto"))
    assert not result.ok and "\n" not in result.output
    assert "bwrap fails here: bwrap: No permissions to create new namespace" in result.output
    assert 'sandbox = "off"' in result.output
    assert not (tmp_path / "project" / "ws" / "ran.txt").exists()
    again = await run_tool("bash", '{"command": "echo ran > ran.txt"}', _ctx(tmp_path, sandbox="bwrap"))
    assert not again.ok and "sandbox = bwrap" in again.output and "No permissions" in again.output


async def test_the_first_command_starts_bubblewrap_once(tmp_path: Path, no_bwrap: None) -> None:
    real = shutil.which("bwrap", path=os.defpath + ":/usr/bin:/bin")
    assert real is not None, "this test needs bubblewrap (make test installs it)"
    log = tmp_path / "bwrap.log"
    fake = tmp_path / "bin-without-bwrap" / "bwrap"
    fake.write_text(f'#!/bin/sh\necho start >> {log}\nexec {real} "$@"\n')
    fake.chmod(0o755)
    result = await run_bash("echo ran", _ctx(tmp_path))
    assert result.ok and result.output == "ran"
    assert log.read_text().splitlines() == ["start"]


async def test_off_runs_unconfined_with_one_warning_naming_what_is_not_protected(
    tmp_path: Path, no_bwrap: None, capfd: pytest.CaptureFixture[str]
) -> None:
    ctx = _ctx(tmp_path, sandbox="off")
    first = await run_bash("echo one", ctx)
    second = await run_bash("echo two", ctx)
    assert first.ok and second.ok
    err = capfd.readouterr().err
    assert err.count("sandbox = off: bash commands run unconfined") == 1
    assert "config.toml" in err and "hooks and config" in err


# its sleeps are found by a fixed argument: both backends' runs on one worker, one after the other
@pytest.mark.xdist_group("sleep-30.071")
async def test_children_end_with_the_call(tmp_path: Path) -> None:
    """D11: the PID namespace ends every background child when bash exits; that is intended."""
    result = await run_bash("(sleep 30.0714 &) ; sleep 30.0715 & echo started", _ctx(tmp_path))
    assert result.ok and result.output == "started"
    assert await anyio.to_thread.run_sync(none_left_within, "30.071", 3.0)


async def test_the_git_wrapper_is_first_on_path_and_read_only(tmp_path: Path) -> None:
    """D1's wrapper lives in the git common dir, which commits must write; its folder stays read-only."""
    repo = await _memory(tmp_path)
    ctx = _ctx(tmp_path, memory=repo)
    found = await run_bash("command -v git", ctx)
    assert found.ok and found.output.startswith(str(repo / ".git")), found.output
    wrapper = Path(found.output)
    before = await anyio.Path(wrapper).read_bytes()
    for attack in ('echo "exit 0" > "$(command -v git)"', 'rm -f "$(command -v git)"', 'rm -rf "$(dirname "$(command -v git)")"'):
        assert not (await run_bash(attack, ctx)).ok, attack
    assert await anyio.Path(wrapper).read_bytes() == before


def test_an_interpreter_installed_under_tmp_stays_visible_inside_the_sandbox(tmp_path: Path) -> None:
    """A checkout cloned under /tmp has its venv there too: the pre-commit hook's interpreter must
    not vanish behind the sandbox's private /tmp (it did, so every commit from bash failed)."""
    top = Path(tempfile.mkdtemp(prefix="reverie-venv-", dir="/tmp"))  # apart from tmp_path's /tmp entry
    try:
        _run_probe_in_venv(top / "venv", tmp_path)
    finally:
        shutil.rmtree(top)


def _run_probe_in_venv(venv: Path, tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    probe = (
        "import sys, anyio\n"
        "from pathlib import Path\n"
        "from orchestrator.tools import ToolContext, run_bash\n"
        "ws = Path(sys.argv[1]); ws.mkdir()\n"
        "ctx = ToolContext(memory_dir=None, agent_id='a', agent_name='A', conversation_id='c', sandbox='bwrap', workspace=ws)\n"
        "result = anyio.run(run_bash, f'{sys.executable} -c \"print(40 + 2)\"', ctx)\n"
        "print(result.ok, result.output)\n"
    )
    paths = [str(Path(__file__).resolve().parents[2]), *site.getsitepackages()]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    done = subprocess.run([str(python), "-c", probe, str(tmp_path / "ws")], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("True") and "42" in done.stdout, done.stdout


def _plant_rebase(git_dir: str, marker: Path, orig_head: str) -> str:
    """A shell line that writes a rebase-in-progress folder of its own: an ``exec`` line to run and
    a branch to reset, for whoever continues or aborts it."""
    return (
        f'mkdir -p {git_dir}/rebase-merge && cd {git_dir}/rebase-merge && printf "exec touch {marker}\\n" > git-rebase-todo '
        f'&& echo refs/heads/main > head-name && echo {orig_head} > orig-head && echo {orig_head} > onto '
        "&& : > interactive && echo planted"
    )


async def test_a_rebase_planted_in_the_main_checkout_is_removed_after_the_command(tmp_path: Path) -> None:
    from orchestrator.memfs.guard import drain_findings

    repo = await _memory(tmp_path)
    first = await _git(repo, "rev-list", "--max-parents=0", "HEAD")
    head = await _git(repo, "rev-parse", "HEAD")
    marker = tmp_path / "pwned"
    drain_findings()
    planted = await run_bash(_plant_rebase('"$MEMORY_DIR/.git"', marker, first), _ctx(tmp_path, memory=repo))
    assert planted.ok and planted.output.endswith("planted"), planted.output
    assert not (repo / ".git" / "rebase-merge").exists()
    found = [f.message for f in drain_findings(repo)]
    assert any("did not start" in line and ".git/rebase-merge" in line for line in found), found
    assert await _git(repo, "rev-parse", "HEAD") == head and not marker.exists()


async def test_a_subagent_moves_nothing_of_the_parent_but_commits_on_its_own_branch(tmp_path: Path) -> None:
    repo = await _memory(tmp_path)
    first = await _git(repo, "rev-list", "--max-parents=0", "HEAD")
    (repo / "human.md").write_text("---\nname: human\ndescription: d\n---\nthe agent's own\n")
    await _git(repo, "commit", "-qam", "the main agent's commit")
    head = await _git(repo, "rev-parse", "HEAD")
    other = await create_worktree(repo, agent_id="agent-1", root=tmp_path / "worktrees")
    worktree = await create_worktree(repo, agent_id="agent-1", root=tmp_path / "worktrees")
    git_dir = repo / ".git"
    index, reflog = (git_dir / "index").read_bytes(), (git_dir / "logs" / "refs" / "heads" / "main").read_bytes()
    ctx = _ctx(tmp_path, memory=worktree.path, workspace=worktree.path)
    for attack in (
        f"git update-ref refs/heads/main {first}",
        f"/usr/bin/git update-ref refs/heads/main {first}",
        f"git update-ref refs/heads/{other.branch} {first}",
        f"git update-ref -d refs/heads/{other.branch}",
        "git pack-refs --all",
        f"echo {first} > {git_dir}/refs/heads/main",
        f"printf '{first} refs/heads/main\\n' >> {git_dir}/packed-refs",
        f"cp {git_dir}/index /dev/null && : > {git_dir}/index",
        "git reflog expire --expire=now --all && test ! -s " + str(git_dir / "logs" / "refs" / "heads" / "main"),
        f"git --git-dir={git_dir} --work-tree={repo} reset -q --hard {first}",
    ):
        assert not (await run_bash(attack, ctx)).ok, attack
    assert await _git(repo, "rev-parse", "main") == head
    assert await _git(repo, "rev-parse", other.branch) == head
    assert (git_dir / "index").read_bytes() == index
    assert (git_dir / "logs" / "refs" / "heads" / "main").read_bytes() == reflog
    commit = await run_bash(
        'printf -- "---\\nname: own\\ndescription: own\\n---\\nmine\\n" > own.md && git add own.md && git commit -q -m own '
        "&& git commit -q --amend -m own2 && git log -1 --format=%s",
        ctx,
    )
    assert commit.ok and commit.output.endswith("own2"), commit.output
    assert await _git(repo, "log", "-1", "--format=%s", worktree.branch) == "own2"


async def test_a_rebase_stopped_in_a_worktree_is_read_only_to_its_commands(tmp_path: Path) -> None:
    repo = await _memory(tmp_path)
    worktree = await create_worktree(repo, agent_id="agent-1", root=tmp_path / "worktrees")
    for checkout, side in ((worktree.path, "branch"), (repo, "main")):
        (checkout / "human.md").write_text(f"---\nname: human\ndescription: d\n---\n{side}\n")
        await _git(checkout, "commit", "-qam", side)
    stopped = await anyio.to_thread.run_sync(lambda: GitRepo(worktree.path).run("rebase", "main", check=False, harness=True))
    assert not stopped.ok
    todo = await _git(worktree.path, "rev-parse", "--path-format=absolute", "--git-path", "rebase-merge/git-rebase-todo")
    before = await anyio.Path(todo).read_bytes()
    ctx = _ctx(tmp_path, memory=worktree.path, workspace=worktree.path)
    appended = await run_bash(f"printf 'exec touch {tmp_path}/pwned\\n' >> {todo}", ctx)
    assert not appended.ok and "Read-only file system" in appended.output, appended.output
    assert not (await run_bash(f"rm -rf {Path(todo).parent}", ctx)).ok
    assert await anyio.Path(todo).read_bytes() == before
    resolved = await run_bash(
        'printf -- "---\\nname: human\\ndescription: d\\n---\\nmain\\nbranch\\n" > human.md && git add human.md', ctx
    )
    assert resolved.ok, resolved.output
