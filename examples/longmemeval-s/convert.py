"""Convert the vendored LongMemEval-S subset (data/) into a reverie suite (suite.jsonl).

    python examples/longmemeval-s/convert.py            # writes examples/longmemeval-s/suite.jsonl
    python examples/longmemeval-s/convert.py --check    # exit 1 if suite.jsonl is not what it would write

Standard library only, and deterministic: the same data always gives the same bytes, so the
shipped suite can be checked against its source (tests/batch/test_longmemeval.py does).

Each question becomes one task (docs/suite-format.md):

* ``history``: the question's haystack sessions, oldest first, each dated with its session's
  timestamp (``2023/05/20 (Sat) 02:21`` -> ``2023-05-20T02:21:00Z``), as user/assistant pairs.
  memory-arena stores the sessions of all 16 questions in one file, each once, in question order;
  a question's haystack is recovered as the run of sessions that ends with its last supporting
  session (``ground_truth.supporting_session_ids``) and starts after the previous question's; the
  last question also takes the sessions after it. Sessions without turns are skipped.
* ``turns``: the question, after a ``Current date:`` line with the question's date
  (``ground_truth.valid_as_of``), as LongMemEval's own prompts give it.
* ``grade``: the answer key verbatim (the grader reads its own alternatives, "... is also
  acceptable", "(or ...)"); ``ability`` from the category.
* ``settings``: a 4,000-token context window, so compaction happens inside the replayed history as
  it would in a long chat; no reflection trigger (a task that pinned one would be left out of a
  sweep over triggers).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
ABILITY = {
    "information_extraction": "extraction",
    "multi_session_reasoning": "multi-session",
    "temporal": "temporal",
    "knowledge_update": "knowledge-update",
    "abstention": "abstention",
}
CONTEXT_WINDOW = 4000


def iso(stamp: str) -> str:
    """``2023/05/20 (Sat) 02:21`` -> ``2023-05-20T02:21:00Z`` (the data's times carry no zone)."""
    day, _, clock = stamp.partition(")")
    moment = datetime.strptime(f"{day.split('(')[0].strip()} {clock.strip()}", "%Y/%m/%d %H:%M")
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def messages(session: dict) -> list[dict[str, str]]:
    """The session's turns as alternating user/assistant pairs (an unpaired or empty turn is dropped)."""
    out: list[dict[str, str]] = []
    turns = [t for t in session["turns"] if t["content"].strip()]
    index = 0
    while index + 1 < len(turns):
        user, assistant = turns[index], turns[index + 1]
        if user["role"] == "user" and assistant["role"] == "assistant":
            out += [{"role": "user", "content": user["content"]}, {"role": "assistant", "content": assistant["content"]}]
            index += 2
        else:
            index += 1
    return out


def haystacks(questions: list[dict], sessions: list[dict]) -> list[list[dict]]:
    """Each question's sessions (the module docstring's rule), in file order."""
    position = {s["id"]: i for i, s in enumerate(sessions)}
    groups: list[list[dict]] = []
    start = 0
    for number, question in enumerate(questions):
        supporting = [position[i] for i in question["ground_truth"]["supporting_session_ids"] if i in position]
        if not supporting:
            raise SystemExit(f"question {question['id']}: none of its supporting sessions is in sessions.jsonl")
        end = len(sessions) if number == len(questions) - 1 else max(supporting) + 1
        if end <= start:
            raise SystemExit(f"question {question['id']}: its supporting sessions come before the previous question's")
        groups.append(sessions[start:end])
        start = end
    return groups


def task(question: dict, haystack: list[dict]) -> dict:
    history = [
        {"date": iso(s["timestamp"]), "messages": pairs}
        for s in sorted(haystack, key=lambda s: (iso(s["timestamp"]), s["id"]))
        if (pairs := messages(s))
    ]
    truth = question["ground_truth"]
    return {
        "id": f"lme-{question['id']}",
        "description": (
            f"LongMemEval-S {question['category']} question {question['id']}: "
            f"{len(history)} recorded sessions replayed, then asked in a new conversation."
        ),
        "history": history,
        "turns": [f"Current date: {truth['valid_as_of']}\n\n{question['question']}"],
        "grade": {"answer": truth["answer"], "ability": ABILITY[question["category"]]},
        "settings": {"context_window": CONTEXT_WINDOW},
    }


def convert(data: Path) -> str:
    questions = [json.loads(line) for line in (data / "questions.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    sessions = [json.loads(line) for line in (data / "sessions.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    lines = [json.dumps(task(q, h), ensure_ascii=False, sort_keys=True) for q, h in zip(questions, haystacks(questions, sessions), strict=True)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=HERE / "data", help="folder with questions.jsonl and sessions.jsonl")
    parser.add_argument("--out", type=Path, default=HERE / "suite.jsonl", help="suite file to write")
    parser.add_argument("--check", action="store_true", help="only check that --out is up to date")
    args = parser.parse_args(argv)
    text = convert(args.data)
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is out of date: run {Path(__file__).name} again", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}: {text.count(chr(10))} tasks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
