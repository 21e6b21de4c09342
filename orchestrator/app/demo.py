"""``make demo``: the life of one memory, told by running the real ``reverie`` command, offline.

Each step is a separate process, as a user would type it, against a fresh ``REVERIE_HOME`` under
``runs/demo``: a rule is stated, the scripted model commits it with git through the bash tool, the
same turn's reply already follows it, later turns still do, the conversation's cached prompt does
not contain it, while ``reverie prompt --fresh`` and a new conversation do. When the batch runner
is installed the demo ends with the example suite.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["main"]

_RULE = "回答末尾总是加上 🦉"


def _run(args: list[str], env: dict[str, str], *, grep: str | None = None) -> str:
    shown = "reverie " + " ".join(shlex.quote(a) for a in args)
    if grep:
        shown += f" | grep {'-c ' if grep.startswith('-c') else ''}{shlex.quote(grep.removeprefix('-c '))}"
    print(f"\n$ {shown}", flush=True)
    proc = subprocess.run([sys.executable, "-m", "orchestrator", *args], env=env, capture_output=True, text=True)
    if proc.stderr:
        sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"demo step failed: {shown}")
    out = proc.stdout
    if grep is None:
        sys.stdout.write(out)
    elif grep.startswith("-c "):
        print(sum(grep[3:] in line for line in out.splitlines()))
    else:
        print("\n".join(line for line in out.splitlines() if grep in line))
    sys.stdout.flush()
    return out


def main() -> None:
    root = Path.cwd() / "runs" / "demo"
    shutil.rmtree(root, ignore_errors=True)
    env = dict(os.environ, REVERIE_HOME=str(root / "home"))
    env.pop("REVERIE_BASE_URL", None)
    print("reverie demo — the life of one memory (offline, scripted model)")
    print(f"REVERIE_HOME={env['REVERIE_HOME']}")
    _run(["chat", "-p", "你好"], env)
    _run(["chat", "-p", f"设定：{_RULE}"], env)
    _run(["chat", "-p", "你好"], env)
    _run(["chat", "-p", "再说一次"], env)
    _run(["prompt"], env, grep="-c 🦉")
    _run(["prompt", "--fresh"], env, grep="🦉")
    _run(["chat", "--new", "-p", "新的对话"], env)
    _run(["memory", "tree"], env)
    suite = Path("examples/suite.jsonl")
    if suite.exists():
        _run(["run", str(suite), "--concurrency", "4", "--out", str(root / "suite")], env)
    print("\nThe rule was committed mid-turn and followed from that reply on; the conversation's cached")
    print("system prompt stayed byte-identical (0 owls), while a fresh compile and a new conversation carry it.")


if __name__ == "__main__":
    main()
