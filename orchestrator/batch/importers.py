"""The standard memory benchmarks as reverie suites: LongMemEval, LoCoMo, MemoryAgentBench, and
memory-arena's normalised LongMemEval subset (the shipped ``examples/longmemeval-s``).

Each reader takes the files as their authors publish them and returns suite lines
(docs/suite-format.md): one task per question, its recorded sessions as ``history`` (dated,
replayed into new conversations), the question asked after a ``Current date:`` line, and
``grade`` with the answer key, the ability and the evidence sessions (``grade.evidence``, the
ids of ``history`` sessions that hold the answer). A malformed record is one ``SuiteError``
naming the file, the record and the field. Pure but for reading the file; deterministic: the same
file, sample size and seed always give the same bytes.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

from orchestrator.batch.suite import SuiteError

__all__ = [
    "BENCHMARKS",
    "CONTEXT_WINDOW",
    "LOCOMO_ABSTAIN",
    "MAB_CHUNK",
    "MAB_SPLITS",
    "ImportOptions",
    "arena_references",
    "import_benchmark",
    "suite_text",
]

CONTEXT_WINDOW: Final = 4000
"""Each imported task's window, so compaction happens inside the replayed history as in a long chat."""

_ID_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class ImportOptions:
    """What to take: ``sample`` questions (spread over the abilities, chosen by ``seed``), only
    ``abilities`` when given, and the window each task runs with."""

    sample: int | None = None
    seed: int = 0
    abilities: tuple[str, ...] = ()
    context_window: int = CONTEXT_WINDOW


class _Record:
    """Names the record a problem is in, for one-line errors."""

    def __init__(self, source: Path, where: str) -> None:
        self.source, self.where = source, where

    def fail(self, field: str, problem: str) -> SuiteError:
        return SuiteError(f"{self.source}: {self.where}: {field}: {problem}")

    def get(self, raw: Mapping[str, Any], field: str, kind: type | tuple[type, ...]) -> Any:
        if not isinstance(raw, Mapping):
            raise self.fail("(record)", f"expected an object, got {type(raw).__name__}")
        if field not in raw:
            raise self.fail(field, "missing")
        value = raw[field]
        if not isinstance(value, kind) or isinstance(value, bool):
            names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise self.fail(field, f"expected {names}, got {type(value).__name__}")
        return value


def _read_json(path: Path) -> Any:
    """A JSON document, or JSON lines (one record per line)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SuiteError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise SuiteError(f"{path}: is a folder; give the benchmark's JSON file") from None
    except UnicodeDecodeError as exc:
        raise SuiteError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as whole:
        records = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                at = f"line {number}" if records or number > 1 else f"line {whole.lineno}"
                raise SuiteError(f"{path}: {at}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        return records


def _records(path: Path, data: Any, what: str) -> list[Any]:
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not data:
        raise SuiteError(f"{path}: expected a list of {what}, got {type(data).__name__ if data else 'nothing'}")
    return data


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _dated(moment: datetime) -> str:
    """LongMemEval's own spelling of a time, which the question's ``Current date:`` line uses."""
    return moment.strftime("%Y/%m/%d (%a) %H:%M")


def _lme_time(stamp: Any, record: _Record, field: str) -> datetime:
    """``2023/05/20 (Sat) 02:21`` (no zone in the data: UTC)."""
    if not isinstance(stamp, str):
        raise record.fail(field, f"expected a date like '2023/05/20 (Sat) 02:21', got {stamp!r}")
    day, _, clock = stamp.partition(")")
    try:
        return datetime.strptime(f"{day.split('(')[0].strip()} {clock.strip()}", "%Y/%m/%d %H:%M").replace(tzinfo=UTC)
    except ValueError:
        raise record.fail(field, f"{stamp!r}: expected a date like '2023/05/20 (Sat) 02:21'") from None


def _pairs(turns: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
    """Alternating user/assistant messages from ``(role, text)`` turns; an unpaired or empty turn
    is dropped (the suite replays each exchange as one turn)."""
    kept = [(role, text) for role, text in turns if text.strip()]
    out: list[dict[str, str]] = []
    index = 0
    while index + 1 < len(kept):
        (role, text), (next_role, reply) = kept[index], kept[index + 1]
        if role == "user" and next_role == "assistant":
            out += [{"role": "user", "content": text}, {"role": "assistant", "content": reply}]
            index += 2
        else:
            index += 1
    return out


def _task(
    task_id: str, description: str, history: list[dict[str, Any]], asked_at: str, question: str,
    grade: dict[str, Any], options: ImportOptions,
) -> dict[str, Any]:
    return {
        "id": task_id,
        "description": description,
        "history": history,
        "turns": [f"Current date: {asked_at}\n\n{question}"],
        "grade": grade,
        "settings": {"context_window": options.context_window},
    }


def _safe_id(*parts: str) -> str:
    return _ID_UNSAFE.sub("-", "-".join(parts)).strip("-._")[:100]


# -- LongMemEval (longmemeval_s / _m / _oracle) -------------------------------------------------

_LME_ABILITY: Final = {
    "single-session-user": "extraction",
    "single-session-assistant": "extraction",
    "single-session-preference": "extraction",
    "multi-session": "multi-session",
    "temporal-reasoning": "temporal",
    "knowledge-update": "knowledge-update",
}


def _longmemeval(path: Path, options: ImportOptions) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for index, raw in enumerate(_records(path, _read_json(path), "questions")):
        record = _Record(path, f"record {index}")
        qid = record.get(raw, "question_id", str)
        record = _Record(path, f"record {index} ({qid})")
        kind = record.get(raw, "question_type", str)
        if kind not in _LME_ABILITY:
            raise record.fail("question_type", f"{kind!r}: expected one of {', '.join(_LME_ABILITY)}")
        ability = "abstention" if qid.endswith("_abs") else _LME_ABILITY[kind]
        answer = record.get(raw, "answer", (str, int, float))
        asked = _dated(_lme_time(raw.get("question_date"), record, "question_date"))
        ids = record.get(raw, "haystack_session_ids", list)
        dates = record.get(raw, "haystack_dates", list)
        sessions = record.get(raw, "haystack_sessions", list)
        if not len(ids) == len(dates) == len(sessions):
            raise record.fail("haystack_sessions", "haystack_session_ids, haystack_dates and haystack_sessions differ in length")
        history = []
        for at, (sid, date, turns) in enumerate(zip(ids, dates, sessions, strict=True)):
            if not isinstance(turns, list) or not all(isinstance(t, Mapping) for t in turns):
                raise record.fail(f"haystack_sessions[{at}]", "expected a list of {role, content} turns")
            when = _lme_time(date, record, f"haystack_dates[{at}]")
            messages = _pairs([(str(t.get("role")), str(t.get("content") or "")) for t in turns])
            if messages:
                history.append((when, str(sid), messages))
        history.sort(key=lambda h: (h[0], h[1]))
        kept = {sid for _, sid, _ in history}
        evidence = [str(s) for s in raw.get("answer_session_ids", []) if str(s) in kept]
        grade: dict[str, Any] = {"answer": str(answer), "ability": ability}
        if evidence:
            grade["evidence"] = evidence
        task = _task(
            _safe_id("lme", qid),
            f"LongMemEval {kind} question {qid}: {len(history)} recorded sessions replayed, then asked in a new conversation.",
            [{"date": _iso(w), "id": sid, "messages": m} for w, sid, m in history],
            asked, record.get(raw, "question", str), grade, options,
        )
        out.append((ability, task))
    return out


# -- memory-arena's normalised subset (questions.jsonl + sessions.jsonl) -------------------------

_ARENA_ABILITY: Final = {
    "information_extraction": "extraction",
    "multi_session_reasoning": "multi-session",
    "temporal": "temporal",
    "knowledge_update": "knowledge-update",
    "abstention": "abstention",
}


def _lines(path: Path) -> list[Any]:
    data = _read_json(path)
    return _records(path, data, "records")


def _memory_arena(path: Path, options: ImportOptions) -> list[tuple[str, dict[str, Any]]]:
    """A folder with memory-arena's ``questions.jsonl`` and ``sessions.jsonl``. A question's
    haystack is the run of sessions, in file order, that ends with its last supporting session and
    starts after the previous question's (memory-arena writes them in question order); the last
    question also takes what follows."""
    if not path.is_dir():
        raise SuiteError(f"{path}: expected memory-arena's data folder (questions.jsonl and sessions.jsonl)")
    questions, sessions = _lines(path / "questions.jsonl"), _lines(path / "sessions.jsonl")
    position = {}
    for at, session in enumerate(sessions):
        position[_Record(path / "sessions.jsonl", f"record {at}").get(session, "id", str)] = at
    out, start = [], 0
    for number, raw in enumerate(questions):
        record = _Record(path / "questions.jsonl", f"record {number}")
        qid = record.get(raw, "id", str)
        record = _Record(path / "questions.jsonl", f"record {number} ({qid})")
        truth = record.get(raw, "ground_truth", dict)
        category = record.get(raw, "category", str)
        if category not in _ARENA_ABILITY:
            raise record.fail("category", f"{category!r}: expected one of {', '.join(_ARENA_ABILITY)}")
        supporting = [position[i] for i in truth.get("supporting_session_ids", []) if i in position]
        if not supporting:
            raise record.fail("ground_truth.supporting_session_ids", "none of them is in sessions.jsonl")
        end = len(sessions) if number == len(questions) - 1 else max(supporting) + 1
        if end <= start:
            raise record.fail("ground_truth.supporting_session_ids", "they come before the previous question's")
        haystack = []
        for session in sessions[start:end]:
            turns = _Record(path / "sessions.jsonl", f"session {session['id']}").get(session, "turns", list)
            when = _lme_time(session.get("timestamp"), _Record(path / "sessions.jsonl", f"session {session['id']}"), "timestamp")
            messages = _pairs([(str(t.get("role")), str(t.get("content") or "")) for t in turns])
            if messages:
                haystack.append((when, session["id"], messages))
        start = end
        haystack.sort(key=lambda h: (h[0], h[1]))
        ability = _ARENA_ABILITY[category]
        task = _task(
            f"lme-{qid}",
            f"LongMemEval-S {category} question {qid}: {len(haystack)} recorded sessions replayed, then asked in a new conversation.",
            [{"date": _iso(w), "messages": m} for w, _, m in haystack],
            str(truth.get("valid_as_of")), record.get(raw, "question", str),
            {"answer": record.get(truth, "answer", str), "ability": ability}, options,
        )
        out.append((ability, task))
    return out


def arena_references(folder: Path) -> list[dict[str, Any]]:
    """Reference lines from memory-arena's ``results_snapshot/*_summary.json`` (one per memory
    system it ran on these questions), labelled with the model that answered; none without it."""
    snapshot = folder / "results_snapshot"
    lines = []
    for path in sorted(snapshot.glob("*_summary.json")) if snapshot.is_dir() else []:
        raw = _read_json(path)
        record = _Record(path, "summary")
        if raw.get("status") != "ok" or raw.get("accuracy") is None:
            continue
        models = (raw.get("metadata") or {}).get("models") or {}
        abilities = {
            _ARENA_ABILITY[name]: round(float(v["accuracy"]), 4)
            for name, v in sorted((raw.get("accuracy_by_category") or {}).items()) if name in _ARENA_ABILITY
        }
        lines.append({"reference": {
            "system": record.get(raw, "strategy", str),
            "model": str(models.get("anthropic_generate") or "unknown"),
            "quality": round(float(raw["accuracy"]), 4),
            "abilities": abilities,
            "source": f"memory-arena results_snapshot, {raw.get('n_seeds', 1)} seed(s)",
        }})
    return lines


# -- LoCoMo ------------------------------------------------------------------------------------

_LOCOMO_ABILITY: Final = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "abstention"}
_LOCOMO_SESSION = re.compile(r"^session_(\d+)$")
_LOCOMO_EVIDENCE = re.compile(r"^D(\d+):\d+$")
LOCOMO_ABSTAIN: Final = "Not mentioned in the conversation."
"""The key of LoCoMo's adversarial questions (category 5): the conversation does not say."""


def _locomo_time(stamp: Any, record: _Record, field: str) -> datetime:
    """``1:56 pm on 8 May, 2023`` (no zone in the data: UTC)."""
    text = str(stamp).strip() if isinstance(stamp, str) else ""
    for shape in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y"):
        try:
            return datetime.strptime(text, shape).replace(tzinfo=UTC)
        except ValueError:
            continue
    raise record.fail(field, f"{stamp!r}: expected a time like '1:56 pm on 8 May, 2023'")


def _locomo(path: Path, options: ImportOptions) -> list[tuple[str, dict[str, Any]]]:
    """Each conversation's sessions, speaker by speaker: whoever speaks first in a session is the
    user side of each exchange, every message keeps its speaker's name (``Caroline: ...``), and a
    speaker's consecutive messages are one message; a shared photo is its caption."""
    out = []
    for index, raw in enumerate(_records(path, _read_json(path), "conversations")):
        record = _Record(path, f"record {index}")
        sample = str(record.get(raw, "sample_id", (str, int)))
        record = _Record(path, f"record {index} ({sample})")
        conversation = record.get(raw, "conversation", dict)
        history = []
        for key, turns in conversation.items():
            found = _LOCOMO_SESSION.match(key)
            if not found:
                continue
            when = _locomo_time(conversation.get(f"{key}_date_time"), record, f"conversation.{key}_date_time")
            if not isinstance(turns, list):
                raise record.fail(f"conversation.{key}", "expected a list of turns")
            runs: list[list[str]] = []
            speakers: list[str] = []
            for at, turn in enumerate(turns):
                speaker = record.get(turn, "speaker", str) if isinstance(turn, Mapping) else None
                if speaker is None:
                    raise record.fail(f"conversation.{key}[{at}]", "expected an object with speaker and text")
                text = str(turn.get("text") or "").strip()
                if turn.get("blip_caption"):
                    text = f"{text} [shares a photo: {turn['blip_caption']}]".strip()
                if not text:
                    continue
                if speakers and speakers[-1] == speaker:
                    runs[-1].append(text)
                else:
                    speakers.append(speaker)
                    runs.append([text])
            said = [f"{who}: " + " ".join(texts) for who, texts in zip(speakers, runs, strict=True)]
            if len(said) % 2 and len(said) > 1:
                said[-2:] = [f"{said[-2]}\n{said[-1]}"]
            elif len(said) == 1:
                said.append("(no reply)")
            messages = _pairs([(("user", "assistant")[i % 2], text) for i, text in enumerate(said)])
            if messages:
                history.append((when, int(found.group(1)), key, messages))
        if not history:
            raise record.fail("conversation", "no session with messages")
        history.sort(key=lambda h: (h[0], h[1]))
        asked = _dated(history[-1][0])
        sessions = [{"date": _iso(w), "id": key, "messages": m} for w, _, key, m in history]
        for number, qa in enumerate(record.get(raw, "qa", list)):
            where = _Record(path, f"record {index} ({sample}) qa[{number}]")
            category = where.get(qa, "category", int)
            if category not in _LOCOMO_ABILITY:
                raise where.fail("category", f"{category!r}: expected 1-5")
            ability = _LOCOMO_ABILITY[category]
            if category == 5:
                answer = LOCOMO_ABSTAIN
            else:
                answer = str(where.get(qa, "answer", (str, int, float)))
            evidence = sorted({f"session_{m.group(1)}" for e in qa.get("evidence", []) if (m := _LOCOMO_EVIDENCE.match(str(e)))})
            grade: dict[str, Any] = {"answer": answer, "ability": ability}
            if evidence:
                grade["evidence"] = evidence
            task = _task(
                _safe_id("locomo", sample, f"q{number}"),
                f"LoCoMo {ability} question {number} of conversation {sample}: {len(sessions)} sessions replayed, then asked.",
                sessions, asked, where.get(qa, "question", str), grade, options,
            )
            out.append((ability, task))
    return out


# -- MemoryAgentBench ----------------------------------------------------------------------------

MAB_SPLITS: Final = ("accurate_retrieval", "test_time_learning", "long_range_understanding", "conflict_resolution")
MAB_CHUNK: Final = 4000
"""Characters per replayed exchange: the benchmark feeds its context to the agent in chunks."""
_MAB_START: Final = datetime(2025, 1, 1, tzinfo=UTC)


def _mab_split(path: Path) -> str:
    stem = path.stem.lower().replace("-", "_")
    for split in MAB_SPLITS:
        if split in stem:
            return split
    raise SuiteError(f"{path}: name the file after its split ({', '.join(MAB_SPLITS)}), as the dataset publishes them")


def _memoryagentbench(path: Path, options: ImportOptions) -> list[tuple[str, dict[str, Any]]]:
    """One split's rows (``context``, ``questions``, ``answers``, ``metadata``), exported from the
    dataset as JSON or JSON lines. The context is replayed in chunks, one exchange each ("memorise
    this"), an hour apart; then each question is asked (its first answer is the key, the others
    are accepted)."""
    ability = _mab_split(path).replace("_", "-")
    out = []
    for index, raw in enumerate(_records(path, _read_json(path), "rows")):
        record = _Record(path, f"row {index}")
        context = record.get(raw, "context", str)
        questions = record.get(raw, "questions", list)
        answers = record.get(raw, "answers", list)
        if len(questions) != len(answers):
            raise record.fail("answers", f"{len(answers)} answers for {len(questions)} questions")
        metadata = raw.get("metadata") if isinstance(raw.get("metadata"), Mapping) else {}
        source = str(metadata.get("source") or "row")
        chunks = [context[i:i + MAB_CHUNK] for i in range(0, len(context), MAB_CHUNK)] or [""]
        history = [
            {"date": _iso(_MAB_START + timedelta(hours=k)), "id": f"chunk-{k + 1}", "messages": [
                {"role": "user", "content": f"Memorise this text (part {k + 1} of {len(chunks)}):\n\n{chunk}"},
                {"role": "assistant", "content": "Memorised."},
            ]}
            for k, chunk in enumerate(chunks) if chunk.strip()
        ]
        asked = _dated(_MAB_START + timedelta(hours=len(chunks)))
        for number, (question, keys) in enumerate(zip(questions, answers, strict=True)):
            where = _Record(path, f"row {index} questions[{number}]")
            if not isinstance(question, str) or not question.strip():
                raise where.fail("question", "expected a non-empty string")
            accepted = [str(k) for k in (keys if isinstance(keys, list) else [keys]) if str(k).strip()]
            if not accepted:
                raise where.fail("answers", "expected at least one answer")
            grade: dict[str, Any] = {"answer": accepted[0], "ability": ability}
            if accepted[1:]:
                grade["accept"] = accepted[1:]
            task = _task(
                _safe_id("mab", source, str(index), f"q{number}"),
                f"MemoryAgentBench {ability} ({source}) row {index} question {number}: {len(history)} chunks replayed, then asked.",
                history, asked, question, grade, options,
            )
            out.append((ability, task))
    return out


BENCHMARKS: Final[Mapping[str, Callable[[Path, ImportOptions], list[tuple[str, dict[str, Any]]]]]] = {
    "longmemeval": _longmemeval,
    "locomo": _locomo,
    "memoryagentbench": _memoryagentbench,
    "memory-arena": _memory_arena,
}
"""The readers by name: what ``reverie suite import`` takes."""


def _sample(items: list[tuple[str, dict[str, Any]]], size: int, seed: int) -> list[tuple[str, dict[str, Any]]]:
    """``size`` items spread over the abilities (round robin over each ability's shuffled
    questions), in the file's order: a sample of a benchmark covers what it measures."""
    groups: dict[str, list[int]] = {}
    for at, (ability, _) in enumerate(items):
        groups.setdefault(ability, []).append(at)
    rng = random.Random(seed)
    for ability in sorted(groups):
        rng.shuffle(groups[ability])
    chosen: list[int] = []
    order = sorted(groups)
    while len(chosen) < size and any(groups.values()):
        for ability in order:
            if groups[ability] and len(chosen) < size:
                chosen.append(groups[ability].pop())
    return [items[at] for at in sorted(chosen)]


def import_benchmark(kind: str, source: Path, options: ImportOptions = ImportOptions()) -> list[dict[str, Any]]:
    """The suite lines (as objects) of ``source`` read as benchmark ``kind`` (memory-arena's
    published results first, as reference lines). Blocking."""
    reader = BENCHMARKS.get(kind)
    if reader is None:
        raise SuiteError(f"unknown benchmark {kind!r}: use one of {', '.join(BENCHMARKS)}")
    items = reader(source, options)
    if options.abilities:
        known = sorted({a for a, _ in items})
        missing = [a for a in options.abilities if a not in known]
        if missing:
            raise SuiteError(f"{source}: no {missing[0]!r} questions (abilities here: {', '.join(known)})")
        items = [item for item in items if item[0] in options.abilities]
    if options.sample is not None:
        if options.sample < 1:
            raise SuiteError(f"sample: expected a positive number of questions, got {options.sample}")
        items = _sample(items, options.sample, options.seed)
    seen: set[str] = set()
    tasks = arena_references(source) if kind == "memory-arena" else []
    for _, task in items:
        if task["id"] in seen:
            raise SuiteError(f"{source}: two questions import as task {task['id']!r}")
        seen.add(task["id"])
        tasks.append(task)
    return tasks


def suite_text(tasks: Iterable[Mapping[str, Any]]) -> str:
    """Suite lines, byte for byte the same for the same tasks."""
    return "".join(json.dumps(t, ensure_ascii=False, sort_keys=True) + "\n" for t in tasks)
