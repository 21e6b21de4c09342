"""This checkout against a reference checkout, interleaved in one invocation: the bench figures
that P1, P3 and P4 budget (``bench/startup.py``, ``bench/turn.py``, ``bench/scale.py`` N=64
and 1,000) for both,
with medians and this/reference ratios.

    .venv/bin/python bench/ab.py --reference ../reverie-90088e2 [--rounds 3] [--sizes 64 1000]

The reference is a checkout with its own venv (``git worktree add --detach DIR COMMIT && make -C DIR
.venv/.installed``). Each round runs every bench for both sides, the side that goes first
alternating, so load that comes and goes on a shared machine falls on both alike; figures from
different invocations do not compare. ``startup.py`` and ``scale.py`` are this checkout's scripts
run by the side's interpreter from the side's folder (they drive ``python -m orchestrator`` and the
venv's ``reverie`` as a user does, so they measure that side's reverie); ``turn.py`` is the side's
own (it instruments the turn's internals in-process, which differ between commits) and its table
line is read.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_TURN_ROW = re.compile(r"^(chat|commit)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", re.M)
_STARTUP = (
    "chat -p: reply's first byte",
    "chat -p: exit",
    "chat -p (server): first request",
    "reverie's own before the request",
    "own CPU before the request",
    "reverie --version",
)


def _python(side: Path) -> str:
    return str(side / ".venv" / "bin" / "python")


def _run(cmd: list[str], cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    print(f"  $ (cd {cwd} && {' '.join(cmd)})", flush=True)
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1):
        raise SystemExit(f"bench/ab.py: exit {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return done.stdout


def _figures(side: Path, args: argparse.Namespace, tmp: Path) -> dict[str, float]:
    found: dict[str, float] = {}
    out = tmp / "figures.json"
    _run([_python(side), str(ROOT / "bench" / "startup.py"), "--repeats", str(args.startup_repeats), "--json", str(out)], side)
    medians = json.loads(out.read_text())
    found.update({f"startup: {name}": medians[name] for name in _STARTUP})
    text = _run([_python(side), str(side / "bench" / "turn.py"), "--turns", str(args.turns)], side)
    for kind, _turns, _rate, p50, _p99, cpu in _TURN_ROW.findall(text):
        found[f"turn: {kind} turn CPU ms"] = float(cpu)
        found[f"turn: {kind} turn p50 ms"] = float(p50)
    _run([_python(side), str(ROOT / "bench" / "scale.py"), *map(str, args.sizes), "--json", str(out)], side)
    for row in json.loads(out.read_text()):
        n = row["n"]
        found[f"scale N={n}: elapsed s"] = row["elapsed"] or float("nan")
        found[f"scale N={n}: CPU per turn ms"] = row["cpu_per_turn_ms"]
        found[f"scale N={n}: tree RSS MiB"] = row["tree_rss_mib"]
        found[f"scale N={n}: passed"] = row["passed"]
    return found


def _table(seen: dict[str, dict[str, list[float]]], loads: list[float], reference: Path) -> str:
    lines = [
        f"\nload average {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} CPUs; medians over "
        f"{len(seen['this'].get('startup: chat -p: exit', []))} round(s); reference {reference}",
        "| figure | reference | this | this/reference | per round |",
        "|---|---|---|---|---|",
    ]
    for figure, new in seen["this"].items():
        ref = seen["reference"].get(figure, [])
        if not ref:
            continue
        a, b = statistics.median(ref), statistics.median(new)
        rounds = ", ".join(f"{y / x:.2f}" if x else "-" for x, y in zip(ref, new, strict=False))
        lines.append(f"| {figure} | {a:.4g} | {b:.4g} | {b / a if a else float('nan'):.2f}x | {rounds} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--reference", type=Path, required=True, help="the other checkout (with its .venv)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="*", default=[64, 1000])
    parser.add_argument("--startup-repeats", type=int, default=5)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--json", type=Path, default=None, help="also write every round's figures here")
    args = parser.parse_args()
    sides = {"reference": args.reference.resolve(), "this": ROOT}
    seen: dict[str, dict[str, list[float]]] = {name: defaultdict(list) for name in sides}
    loads = []
    with tempfile.TemporaryDirectory(prefix="reverie-ab-") as tmp:
        for round_ in range(args.rounds):
            order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
            for name in order:
                loads.append(os.getloadavg()[0])
                print(f"round {round_ + 1}/{args.rounds}, {name} (load {loads[-1]:.1f})", flush=True)
                for figure, value in _figures(sides[name], args, Path(tmp)).items():
                    seen[name][figure].append(value)
                if args.json is not None:
                    args.json.write_text(json.dumps({"loads": loads, **{k: dict(v) for k, v in seen.items()}}, indent=1))
            # the table so far after every round: a long comparison stopped early still says something
            print(_table(seen, loads, sides["reference"]), flush=True)


if __name__ == "__main__":
    main()
