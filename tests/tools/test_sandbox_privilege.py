"""The sandbox holds against a command that tries to take it apart, run by whoever runs reverie (as
root here, the default in containers): no capability, mounts it cannot change, neither key readable;
and what one command may write is bounded (``[tools] write_limit_mb``). Real bubblewrap."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from orchestrator.tools import ToolContext, run_bash
from orchestrator.tools import sandbox as sandbox_module
from orchestrator.tools.sandbox import bwrap_problem

pytestmark = pytest.mark.anyio

KEY = "sk-test-privilege-0123456789-SECRET"


@pytest.fixture(autouse=True)
def _bwrap_runs() -> None:
    problem = bwrap_problem()
    assert problem is None, f"these tests need bubblewrap (make test installs it): {problem}"


def _ctx(tmp_path: Path, **kw: object) -> ToolContext:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    kw.setdefault("sandbox", "bwrap")
    return ToolContext(workspace=ws, agent_id="agent-1", conversation_id="c-1", **kw)  # type: ignore[arg-type]


@pytest.fixture
def config_with_key() -> Path:
    config = Path(os.environ["REVERIE_HOME"]) / "config.toml"
    config.write_text(f'[model]\napi_key = "{KEY}"\n')
    return config


@pytest.fixture
def process_with_key() -> Iterator[int]:
    """A process of the host holding the key in its environment, as reverie does with ``OPENAI_API_KEY``."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE, env={"OPENAI_API_KEY": KEY})
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


async def test_a_command_holds_no_capability(tmp_path: Path) -> None:
    """Empty effective, permitted, inheritable and ambient sets, and an empty bounding set too: not
    even a setuid program or a new user namespace can give one back."""
    result = await run_bash("grep ^Cap /proc/self/status", _ctx(tmp_path))
    assert result.ok, result.output
    caps = dict(line.split(":\t") for line in result.output.splitlines())
    assert caps == {name: "0000000000000000" for name in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}


async def test_the_config_mask_cannot_be_unmounted(tmp_path: Path, config_with_key: Path) -> None:
    result = await run_bash(f"umount {config_with_key}; umount -l {config_with_key}; cat {config_with_key}; echo end", _ctx(tmp_path))
    assert result.output.rstrip().endswith("end"), result.output
    assert KEY not in result.output


async def test_root_cannot_be_remounted_writable(tmp_path: Path) -> None:
    result = await run_bash("mount -o remount,rw /; mount -o remount,bind,rw /; grep ' / / ' /proc/self/mountinfo", _ctx(tmp_path))
    assert result.ok, result.output
    options = result.output.strip().splitlines()[-1].split()[5].split(",")
    assert "ro" in options and "rw" not in options, result.output


async def test_proc_cannot_be_unmounted_to_see_the_host(tmp_path: Path, process_with_key: int) -> None:
    """Under the sandbox's own ``/proc`` lies the host's (``/`` is bound recursively)."""
    command = f"umount /proc; umount -l /proc; cat /proc/{process_with_key}/environ; ls /proc; echo end"
    result = await run_bash(command, _ctx(tmp_path))
    assert result.output.rstrip().endswith("end"), result.output
    assert KEY not in result.output
    assert str(process_with_key) not in result.output.split()


async def test_no_new_namespace_to_mount_in(tmp_path: Path) -> None:
    result = await run_bash("unshare --user --map-root-user --mount true", _ctx(tmp_path))
    assert not result.ok, result.output


@pytest.fixture
def bwrap_before_0_8(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A bubblewrap without ``--size`` and ``--disable-userns`` (Ubuntu 22.04 ships 0.6), refusing
    them as it does; a fresh probe and a fresh memory of the version. Returns its start log."""
    real = shutil.which("bwrap")
    assert real is not None
    bindir = tmp_path / "bin-old-bwrap"
    bindir.mkdir()
    log = tmp_path / "bwrap.log"
    fake = bindir / "bwrap"
    fake.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do case "$a" in --size|--disable-userns)\n'
        f'  echo refused >> {log}; echo "bwrap: Unknown option $a" >&2; exit 1;;\n'
        "esac; done\n"
        f'echo start >> {log}\nexec {real} "$@"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setattr(sandbox_module, "_probe_result", [])
    monkeypatch.setattr(sandbox_module, "_before_0_8", [])
    yield log


async def test_a_bubblewrap_before_0_8_runs_commands_without_privilege_all_the_same(
    tmp_path: Path, bwrap_before_0_8: Path, config_with_key: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    ctx = _ctx(tmp_path, write_limit_mb=1)
    result = await run_bash("grep ^CapEff /proc/self/status", ctx)
    assert result.ok and result.output == "CapEff:\t0000000000000000", result.output
    log = anyio.Path(bwrap_before_0_8)
    assert (await log.read_text()).splitlines()[0] == "refused"
    await log.write_text("")
    attack = f"unshare --user --map-root-user --mount sh -c 'umount -l {config_with_key}; cat {config_with_key}'; echo end"
    result = await run_bash(attack, ctx)
    assert result.output.endswith("end") and KEY not in result.output, result.output
    result = await run_bash("head -c 3000000 /dev/zero > /tmp/big", ctx)
    assert result.output.startswith("Command stopped: a file was cut at the write limit, 1 MiB"), result.output
    assert (await log.read_text()).splitlines() == ["start", "start"], "the options are left out from then on"
    warnings = [line for line in capfd.readouterr().err.splitlines() if "older than 0.8" in line]
    assert len(warnings) == 1 and "no size limit" in warnings[0] and "install bubblewrap 0.8" in warnings[0]


async def test_a_normal_command_is_unaffected_by_the_write_limit(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, write_limit_mb=1)
    result = await run_bash("head -c 900000 /dev/zero > big; head -c 900000 /dev/zero > /tmp/t; wc -c < big", ctx)
    assert result.ok and result.output.strip() == "900000", result.output


@pytest.mark.parametrize("sandbox", ["bwrap", "off"])
async def test_a_file_written_past_the_limit_is_cut_and_its_writer_stopped(tmp_path: Path, sandbox: str) -> None:
    ctx = _ctx(tmp_path, write_limit_mb=1, sandbox=sandbox)
    result = await run_bash("head -c 3000000 /dev/zero > big; echo still-here $?", ctx)
    assert (await anyio.Path(ctx.workspace / "big").stat()).st_size == 1024 * 1024
    assert result.ok, "the shell goes on after its child was stopped"
    assert result.output.startswith("Note: a file was cut at the write limit, 1 MiB per file ([tools] write_limit_mb)")
    assert "still-here 153" in result.output
    result = await run_bash("printf %3000000s x > also", ctx)
    assert not result.ok and result.output.startswith("Command stopped: a file was cut at the write limit, 1 MiB"), result.output
    assert (await anyio.Path(ctx.workspace / "also").stat()).st_size == 1024 * 1024


@pytest.mark.parametrize("where", ["/tmp", "/dev/shm"])
async def test_the_private_tmp_holds_no_more_than_the_limit(tmp_path: Path, where: str) -> None:
    """Many files, each under the per-file limit, still fill no more than the limit in RAM."""
    ctx = _ctx(tmp_path, write_limit_mb=1)
    result = await run_bash(f"for i in 1 2 3 4; do head -c 400000 /dev/zero > {where}/f$i || exit; done", ctx)
    assert not result.ok
    assert result.output.startswith(
        "Command failed with exit code 1. Note: the sandbox's private /tmp and /dev/shm hold 1 MiB each ([tools] write_limit_mb)"
    ), result.output
    assert "No space left on device" in result.output


async def test_dev_is_read_only_but_its_devices_work(tmp_path: Path) -> None:
    result = await run_bash("echo x > /dev/null && head -c 3 /dev/zero | wc -c && touch /dev/file", _ctx(tmp_path))
    assert not result.ok and "Read-only file system" in result.output and "\n3\n" in result.output, result.output
