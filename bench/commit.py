"""Where the agent's edit-and-commit tool step goes (P6).

    .venv/bin/python bench/commit.py [--reps 7]

The step is the time between the model's request that asks for a ``bash`` call which appends a line
to ``human.md`` and commits it, and the next request: reverie runs the command under bubblewrap,
``git add`` and ``git commit`` go through reverie's git wrapper (the D1 lock), the commit runs the
pre-commit hook (validation of the whole staged tree), then reverie notices the new HEAD. This
prints the whole step (through the real path: ``reverie chat -p`` against the loopback OpenAI
server) and each part on its own, as the median wall time and the CPU of the processes involved:

* interpreter start, with and without ``site`` (the hook is a Python program; the wrapper is a
  ``/bin/sh`` script that starts Python only for uncommon commands);
* bubblewrap's start (the sandbox's namespaces) against a bare ``true``;
* the git wrapper against the real git, on a read-only command;
* the pre-commit hook on its own, on a staged change;
* ``git commit`` through the wrapper and hook against a bare ``git commit`` without hooks.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from orchestrator.memfs.gitwrap import ensure_wrapper
from orchestrator.testing.openai_server import LoopbackOpenAI, Planned, text_reply, tool_call_reply

REAL_GIT = shutil.which("git", path=os.defpath) or "/usr/bin/git"


def timed(argv: Sequence[str], *, cwd: Path, env: dict[str, str], reps: int,
          before: Callable[[int], None] | None = None) -> tuple[float, float]:
    """Median wall and median child CPU (user + system) in milliseconds over ``reps`` runs."""
    walls, cpus = [], []
    for rep in range(reps):
        if before is not None:
            before(rep)
        start = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        walls.append(time.perf_counter() - t0)
        end = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(end.ru_utime - start.ru_utime + end.ru_stime - start.ru_stime)
    return statistics.median(walls) * 1000, statistics.median(cpus) * 1000


def edit_command(rep: int) -> str:
    return (
        f'cd "$MEMORY_DIR" && printf "\\n- Fact {rep}.\\n" >> human.md && git add human.md && '
        f'git commit -q -m "note {rep}" -- human.md && git log --oneline -1'
    )


def whole_step(home: Path, env: dict[str, str], reps: int, command: Callable[[int], str]) -> tuple[float, float]:
    """Median first-to-second request gap (ms) and median CPU of the whole ``chat -p`` (ms)."""
    arrivals: list[float] = []
    plans: list[Planned] = []

    def respond(body: object) -> Planned:
        arrivals.append(time.perf_counter())
        return plans.pop(0) if plans else text_reply("Noted.")

    gaps, cpus = [], []
    with LoopbackOpenAI(fallback=respond) as server:
        run_env = dict(env, REVERIE_BASE_URL=server.base_url, REVERIE_MODEL="loopback-model",
                       OPENAI_API_KEY="sk-local")
        for rep in range(reps):
            plans[:] = [tool_call_reply("bash", json.dumps({"command": command(rep)})), text_reply("Noted.")]
            arrivals.clear()
            start = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run([str(Path(sys.executable).with_name("reverie")), "chat", "-p", "note it", "--new"],
                           env=run_env, check=True, stdout=subprocess.DEVNULL, cwd=home)
            end = resource.getrusage(resource.RUSAGE_CHILDREN)
            gaps.append(arrivals[1] - arrivals[0])
            cpus.append(end.ru_utime - start.ru_utime + end.ru_stime - start.ru_stime)
    return statistics.median(gaps) * 1000, statistics.median(cpus) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="reverie-bench-commit-"))
    env = dict(os.environ, REVERIE_HOME=str(home / "reverie"), HOME=str(home))
    for name in ("REVERIE_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        env.pop(name, None)
    subprocess.run([str(Path(sys.executable).with_name("reverie")), "chat", "-p", "hello"], env=env,
                   check=True, stdout=subprocess.DEVNULL, cwd=home)
    memory = next((home / "reverie").rglob("memory"))
    common = memory / ".git"
    wrapper = ensure_wrapper(common) / "git"
    rows: list[tuple[str, tuple[float, float]]] = []
    rows.append(("whole step, chat -p (gap; CPU of the process)", whole_step(home, env, args.reps, edit_command)))
    rows.append(("the same step running `true`", whole_step(home, env, args.reps, lambda rep: "true")))
    rows.append(("the step's command alone (wrapper on PATH, no sandbox)", timed(
        ["sh", "-c", edit_command(10_000)], cwd=memory,
        env=dict(env, MEMORY_DIR=str(memory), PATH=f"{wrapper.parent}{os.pathsep}{env['PATH']}"), reps=args.reps)))
    rows.append(("python -c pass (site)", timed([sys.executable, "-c", "pass"], cwd=home, env=env, reps=args.reps)))
    rows.append(("python -I -S -c pass", timed([sys.executable, "-I", "-S", "-c", "pass"], cwd=home, env=env,
                                                reps=args.reps)))
    rows.append(("true", timed(["true"], cwd=home, env=env, reps=args.reps)))
    if shutil.which("bwrap"):
        rows.append(("bwrap (ro /, pid ns) true", timed(
            ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid",
             "--die-with-parent", "true"], cwd=home, env=env, reps=args.reps)))
    rows.append(("git --version (real)", timed([REAL_GIT, "--version"], cwd=memory, env=env, reps=args.reps)))
    rows.append(("git status via wrapper", timed([str(wrapper), "status", "--short"], cwd=memory, env=env,
                                                 reps=args.reps)))
    rows.append(("git status (real)", timed([REAL_GIT, "status", "--short"], cwd=memory, env=env, reps=args.reps)))

    def stage(rep: int) -> None:
        with (memory / "human.md").open("a", encoding="utf-8") as out:
            out.write(f"\n- Staged {rep} {time.time_ns()}.\n")
        subprocess.run([REAL_GIT, "add", "human.md"], cwd=memory, env=env, check=True)

    rows.append(("pre-commit hook alone", timed([str(common / "hooks" / "pre-commit")], cwd=memory, env=env,
                                                reps=args.reps, before=stage)))
    rows.append(("git commit via wrapper + hook", timed([str(wrapper), "commit", "-q", "-m", "bench"], cwd=memory,
                                                        env=env, reps=args.reps, before=stage)))
    rows.append(("git commit (real, no hook)", timed([REAL_GIT, "-c", "core.hooksPath=/dev/null", "commit", "-q",
                                                      "-m", "bench"], cwd=memory, env=env, reps=args.reps,
                                                     before=stage)))
    print(f"| part ({args.reps} runs, medians) | wall ms | CPU ms |")
    print("|---|---|---|")
    for label, (wall, cpu) in rows:
        print(f"| {label} | {wall:.1f} | {cpu:.1f} |")
    shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
