"""``reverie reflections list`` fits an 80-column terminal and cuts no name: ids, outcomes and a
branch's kind stay whole, the reason wraps and is all there; the review gate's commands (V1) run
end to end."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from orchestrator.cli.reflections import reflections_table

WHY = "the branch and HEAD both changed persona.md in the same lines; merge --resolve hands it to the resolver"


def _rows(kind: str = "reflection") -> list[tuple[str, str, str, str, str]]:
    ids = [f"20261207T2201{n:02d}Z-0000a{n:03d}" for n in range(4)]
    outcomes = ["no_changes", "kept (invalid-combined)", "failed", "merged"]
    return [
        (rid, f"reverie/{kind if n == 1 else 'reflection'}/{rid}", str(n), outcome, WHY if n == 1 else "-")
        for n, (rid, outcome) in enumerate(zip(ids, outcomes, strict=True))
    ]


def _render(rows: list[tuple[str, str, str, str, str]], width: int = 80) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=width, force_terminal=False).print(reflections_table(rows))
    return out.getvalue().splitlines()


def test_names_are_whole_in_80_columns_and_the_reason_wraps() -> None:
    rows = _rows()
    lines = _render(rows)
    assert max(len(line) for line in lines) <= 80
    text = "\n".join(lines)
    assert "…" not in text
    for rid, _, _, outcome, _ in rows:
        assert any(rid in line and outcome in line for line in lines), (rid, outcome, text)
    assert _words(lines) >= set(WHY.split()), text
    assert "branches: reverie/<kind>/<id>" in text


def test_a_branch_of_another_kind_shows_its_kind_and_keeps_its_reason() -> None:
    lines = _render(_rows(kind="compaction"))
    assert max(len(line) for line in lines) <= 80
    at = next(i for i, line in enumerate(lines) if "20261207T220101Z-0000a001" in line)
    assert "(compaction)" in lines[at + 1], "\n".join(lines)
    assert "kept (invalid-combined)" in lines[at] and _words(lines) >= set(WHY.split())


def _words(lines: list[str]) -> set[str]:
    return {word for line in lines for cell in line.split("│") for word in cell.split()}


def _reverie(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, REVERIE_HOME=str(home))
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_review_gate_from_the_command_line(tmp_path: Path) -> None:
    """V1 end to end: a held reflection is said in the text output with its diff summary, listed as
    JSON, shown with its diff and transcript, merged and discarded with who and why recorded."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[reflection]\ntrigger = "step-count:1"\nmerge = "review"\n', encoding="utf-8")
    said = []
    for n in (3, 4):
        chat = _reverie(home, "chat", "--agent", "rv", "-p", f"I like the number {n}", "--output-format", "text")
        assert chat.returncode == 0, chat.stderr
        said.append(chat.stderr)
    assert all("awaits review" in err and "human.md +1 -0" in err for err in said), said
    listed = _reverie(home, "reflections", "list", "--agent", "rv", "--json")
    assert listed.returncode == 0, listed.stderr
    items = json.loads(listed.stdout)
    assert [(i["outcome"], i["status"], i["commits_not_in_head"]) for i in items] == [("review", "kept_review", 1)] * 2
    first, second = items[0]["id"], items[1]["id"]
    shown = _reverie(home, "reflections", "show", first, "--agent", "rv")
    assert shown.returncode == 0, shown.stderr
    assert "+- I like the number 3" in shown.stdout
    assert "[user] I like the number 3" in shown.stdout and "number 4" not in shown.stdout
    refused = _reverie(home, "reflections", "discard", second, "--agent", "rv", "-y")
    assert refused.returncode != 0 and "--why" in refused.stderr and "Traceback" not in refused.stderr
    merged = _reverie(home, "reflections", "merge", first, "--agent", "rv", "--by", "ada", "--why", "true")
    assert merged.returncode == 0, merged.stderr
    gone = _reverie(home, "reflections", "discard", second, "--agent", "rv", "-y", "--by", "ada", "--why", "not so")
    assert gone.returncode == 0, gone.stderr
    after = {i["id"]: i for i in json.loads(_reverie(home, "reflections", "list", "--agent", "rv", "--json").stdout)}
    assert (after[first]["outcome"], after[first]["decided_by"], after[first]["decided_why"]) == ("merged", "ada", "true")
    assert (after[second]["status"], after[second]["decided_by"], after[second]["decided_why"]) == (
        "discarded", "ada", "not so",
    )
    events = _reverie(home, "events", "--agent", "rv", "--kind", "reflection.decided", "--json")
    decided = [json.loads(line)["payload"] for line in events.stdout.splitlines()]
    assert [(d["decision"], d["by"], d["why"]) for d in decided] == [("merge", "ada", "true"), ("discard", "ada", "not so")]


def test_the_review_gate_from_a_chat_flag(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[reflection]\ntrigger = "step-count:1"\n', encoding="utf-8")
    chat = _reverie(home, "chat", "--agent", "fl", "-p", "I like the number 8", "--reflection-merge", "review")
    assert chat.returncode == 0, chat.stderr
    assert "reflection awaits review: 1 commit (human.md +1 -0)" in chat.stderr
    wrong = _reverie(home, "chat", "--agent", "fl", "-p", "hi", "--reflection-merge", "later")
    assert wrong.returncode != 0 and "Traceback" not in wrong.stderr
    assert "--reflection-merge = 'later'" in wrong.stderr and "review" in wrong.stderr
