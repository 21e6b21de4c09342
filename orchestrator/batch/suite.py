"""The task-suite format (docs/suite-format.md): one JSON object per line, validated whole before
anything runs, so a typo on line 40 never leaves 39 finished tasks behind.

Every error is a ``SuiteError`` whose message names the file, the line and the field
(``suite.jsonl:7: settings.max_steps: expected a positive integer, got 'ten'``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.base.choices import BadValue
from orchestrator.base.config import REFLECTION_TRIGGERS, parse_setting
from orchestrator.base.errors import ReverieError

__all__ = [
    "ABILITIES",
    "ABILITY",
    "SETTING_KEYS",
    "Check",
    "Grade",
    "RecordedSession",
    "Reference",
    "SuiteError",
    "Task",
    "load_suite",
    "parse_settings",
    "parse_suite",
    "parse_task",
    "references",
    "select_tasks",
    "task_from_json",
    "task_to_json",
]

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_TASK_KEYS = ("id", "turns", "template", "settings", "checks", "description", "history", "grade")
_GRADE_KEYS = ("answer", "accept", "ability", "evidence")
ABILITIES = ("extraction", "multi-session", "temporal", "knowledge-update", "abstention")
"""LongMemEval's five memory abilities; ``grade.ability`` may name these or any other label
(``ABILITY``) a benchmark reports scores by (LoCoMo's ``multi-hop``, MemoryAgentBench's
``conflict-resolution``)."""
ABILITY = re.compile(r"^[a-z][a-z0-9-]{0,39}$")
"""An ability label: lower-case letters, digits and ``-``."""
_CHECK_KEYS = ("where", "file", "contains", "regex", "negate")

SETTING_KEYS: tuple[str, ...] = (
    "max_steps",
    "context_window",
    "model",
    "reflection_trigger",
    "reflection_step_count",
    "reflection_merge",
    "compaction_mode",
    "sliding_percentage",
    "summarizer_model",
)
"""Per-task settings: names of ``orchestrator.base.config.Settings`` fields a suite may set; their
values are checked by the settings' own parser (``parse_setting``)."""


class SuiteError(ReverieError, ValueError):
    """A bad suite line; the message is one line naming the file, line and field."""


@dataclass(frozen=True)
class Check:
    """``where`` is ``answer`` (the last turn's final text) or ``memory`` (``file`` in the agent's
    memory repository at the end of the task). Exactly one of ``contains`` / ``regex``."""

    where: str
    contains: str | None = None
    regex: str | None = None
    file: str | None = None
    negate: bool = False

    def describe(self) -> str:
        target = "answer" if self.where == "answer" else f"memory:{self.file}"
        how = f"contains {self.contains!r}" if self.contains is not None else f"matches /{self.regex}/"
        return f"{target} {'does not ' if self.negate else ''}{how}"

    def passes(self, text: str | None) -> bool:
        """Pure: does ``text`` (``None`` for a missing file) satisfy the check?"""
        if text is None:
            found = False
        elif self.contains is not None:
            found = self.contains in text
        else:
            found = re.search(self.regex or "", text, re.M) is not None
        return found != self.negate


@dataclass(frozen=True)
class RecordedSession:
    """One recorded conversation of a task's ``history``: ``(user, assistant)`` exchanges replayed in
    order into a conversation of their own, dated ``date`` (ISO 8601, UTC when no offset is given)."""

    date: str
    exchanges: tuple[tuple[str, str], ...]
    id: str = ""


@dataclass(frozen=True)
class Grade:
    """The answer key of a graded task (``orchestrator.batch.grading``): ``answer`` as the key gives
    it, ``accept`` further accepted answers, ``ability`` its label (or empty), ``evidence`` the ids
    of the ``history`` sessions that hold the answer."""

    answer: str
    accept: tuple[str, ...] = ()
    ability: str = ""
    evidence: tuple[str, ...] = ()


@dataclass(frozen=True)
class Reference:
    """A published result shown beside a sweep's own (``{"reference": {...}}`` lines of a suite):
    what ``system`` scored on this suite's questions (``quality``, 0..1, per ``abilities`` where
    published) with ``model``, from ``source``; never run, never compared by the decision."""

    system: str
    model: str
    quality: float
    abilities: Mapping[str, float] = field(default_factory=dict)
    source: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"system": self.system, "model": self.model, "quality": self.quality,
                "abilities": dict(self.abilities), "source": self.source}


_REFERENCE_KEYS = ("system", "model", "quality", "abilities", "source")


def _parse_reference(raw: Any, fail_at: Any) -> Reference:
    if not isinstance(raw, dict):
        raise fail_at("reference", "expected an object with system, model and quality")
    for key in raw:
        if key not in _REFERENCE_KEYS:
            raise fail_at(f"reference.{key}", f"unknown field (known: {', '.join(_REFERENCE_KEYS)})")
    for key in ("system", "model"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise fail_at(f"reference.{key}", "expected a non-empty string")
    scores = {"quality": raw.get("quality"), **{f"abilities.{k}": v for k, v in dict(raw.get("abilities") or {}).items()}}
    for key, value in scores.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise fail_at(f"reference.{key}", f"expected a score between 0 and 1, got {value!r}")
    if not isinstance(raw.get("abilities", {}), dict) or not isinstance(raw.get("source", ""), str):
        raise fail_at("reference", "abilities is an object of scores, source a string")
    return Reference(raw["system"], raw["model"], float(raw["quality"]),
                     {k: float(v) for k, v in dict(raw.get("abilities") or {}).items()}, raw.get("source", ""))


@dataclass(frozen=True)
class Task:
    """One task of a suite, as validated; ``line`` is where it starts in the suite file."""

    id: str
    turns: tuple[str, ...]
    checks: tuple[Check, ...]
    settings: Mapping[str, Any] = field(default_factory=dict)
    memory_files: Mapping[str, str] | None = None
    description: str = ""
    line: int = 0
    history: tuple[RecordedSession, ...] = ()
    grade: Grade | None = None

    @property
    def pinned_trigger(self) -> str | None:
        """The reflection trigger the task sets itself (``step-count:2``), or None: a sweep over
        triggers leaves such a task out unless told to override it."""
        trigger = self.settings.get("reflection_trigger")
        if trigger is None:
            return None
        choice = REFLECTION_TRIGGERS.parse(str(trigger))[0]
        argument = self.settings.get(choice.into) if choice.into else None
        return f"{trigger}:{argument}" if argument else str(trigger)


def _fail(where: str, line: int, fieldname: str, message: str) -> SuiteError:
    return SuiteError(f"{where}:{line}: {fieldname}: {message}")


def parse_settings(raw: Any, fail_at: Any) -> dict[str, Any]:
    """Validate a settings object through the settings' one parser (``step-count:5`` also sets
    ``reflection_step_count``); a refusal names the field and gives the parser's reason."""
    if not isinstance(raw, dict):
        raise fail_at("settings", f"expected an object, got {type(raw).__name__}")
    out: dict[str, Any] = {}
    for key, value in raw.items():
        name = f"settings.{key}"
        if key not in SETTING_KEYS:
            raise fail_at(name, f"unknown setting (known: {', '.join(SETTING_KEYS)})")
        try:
            out.update(parse_setting(key, value))
        except BadValue as exc:
            raise fail_at(name, f"{value!r}: {exc}") from None
    return out


def _parse_check(raw: Any, name: str, fail_at: Any) -> Check:
    if not isinstance(raw, dict):
        raise fail_at(name, f"expected an object, got {type(raw).__name__}")
    for key in raw:
        if key not in _CHECK_KEYS:
            raise fail_at(f"{name}.{key}", f"unknown field (known: {', '.join(_CHECK_KEYS)})")
    where = raw.get("where", "answer")
    if where not in ("answer", "memory"):
        raise fail_at(f"{name}.where", f"{where!r}: use 'answer' or 'memory'")
    file = raw.get("file")
    if where == "memory":
        if not isinstance(file, str) or not file.strip():
            raise fail_at(f"{name}.file", "a memory check needs the file path inside the memory repository")
        if file.startswith("/") or ".." in Path(file).parts:
            raise fail_at(f"{name}.file", f"{file!r}: must be a relative path inside the memory repository")
    elif file is not None:
        raise fail_at(f"{name}.file", "only memory checks name a file")
    has = [k for k in ("contains", "regex") if k in raw]
    if len(has) != 1:
        raise fail_at(name, "give exactly one of 'contains' or 'regex'")
    value = raw[has[0]]
    if not isinstance(value, str) or not value:
        raise fail_at(f"{name}.{has[0]}", f"expected a non-empty string, got {value!r}")
    if has[0] == "regex":
        try:
            re.compile(value)
        except re.error as exc:
            raise fail_at(f"{name}.regex", f"invalid regular expression: {exc}") from None
    negate = raw.get("negate", False)
    if not isinstance(negate, bool):
        raise fail_at(f"{name}.negate", f"expected true or false, got {negate!r}")
    return Check(
        where=where,
        contains=value if has[0] == "contains" else None,
        regex=value if has[0] == "regex" else None,
        file=file,
        negate=negate,
    )


def _parse_date(value: Any, name: str, fail_at: Any) -> str:
    if not isinstance(value, str):
        raise fail_at(name, f"expected an ISO 8601 date, got {value!r}")
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise fail_at(name, f"{value!r}: not an ISO 8601 date (e.g. 2023-05-20T02:21:00Z)") from None
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _parse_history(raw: Any, fail_at: Any) -> tuple[RecordedSession, ...]:
    """``history``: a list of ``{"date", "messages": [{"role", "content"}, ...]}``; messages
    alternate user then assistant, so each exchange replays as one turn."""
    if not isinstance(raw, list):
        raise fail_at("history", "expected a list of recorded sessions")
    sessions: list[RecordedSession] = []
    for index, item in enumerate(raw):
        name = f"history[{index}]"
        if not isinstance(item, dict) or set(item) - {"date", "messages", "id"}:
            raise fail_at(name, "expected an object with 'date' and 'messages' (and an optional 'id')")
        date = _parse_date(item.get("date"), f"{name}.date", fail_at)
        session_id = item.get("id", "")
        if not isinstance(session_id, str):
            raise fail_at(f"{name}.id", f"expected a string, got {session_id!r}")
        messages = item.get("messages")
        if not isinstance(messages, list) or not messages or len(messages) % 2:
            raise fail_at(f"{name}.messages", "expected a non-empty list of user/assistant pairs")
        exchanges: list[tuple[str, str]] = []
        for at in range(0, len(messages), 2):
            pair = []
            for offset, role in enumerate(("user", "assistant")):
                message = messages[at + offset]
                where = f"{name}.messages[{at + offset}]"
                if not isinstance(message, dict) or set(message) - {"role", "content"}:
                    raise fail_at(where, "expected an object with 'role' and 'content'")
                if message.get("role") != role:
                    raise fail_at(f"{where}.role", f"expected {role!r} (messages alternate user, assistant)")
                content = message.get("content")
                if not isinstance(content, str) or not content.strip():
                    raise fail_at(f"{where}.content", "expected a non-empty string")
                pair.append(content)
            exchanges.append((pair[0], pair[1]))
        sessions.append(RecordedSession(date, tuple(exchanges), session_id))
    return tuple(sessions)


def _parse_grade(raw: Any, fail_at: Any) -> Grade:
    if not isinstance(raw, dict):
        raise fail_at("grade", "expected an object with 'answer' (and optional 'accept', 'ability')")
    for key in raw:
        if key not in _GRADE_KEYS:
            raise fail_at(f"grade.{key}", f"unknown field (known: {', '.join(_GRADE_KEYS)})")
    answer = raw.get("answer")
    if not isinstance(answer, str) or not answer.strip():
        raise fail_at("grade.answer", "expected the answer key, a non-empty string")
    accept = raw.get("accept", [])
    if not isinstance(accept, list) or not all(isinstance(a, str) and a.strip() for a in accept):
        raise fail_at("grade.accept", "expected a list of accepted answers (non-empty strings)")
    ability = raw.get("ability", "")
    if ability and not (isinstance(ability, str) and ABILITY.match(ability)):
        raise fail_at(
            "grade.ability", f"{ability!r}: a label of lower-case letters, digits and '-' (e.g. {', '.join(ABILITIES)})"
        )
    evidence = raw.get("evidence", [])
    if not isinstance(evidence, list) or not all(isinstance(e, str) and e for e in evidence):
        raise fail_at("grade.evidence", "expected a list of history session ids")
    return Grade(answer=answer, accept=tuple(accept), ability=ability, evidence=tuple(evidence))


def parse_task(raw: Any, *, source: str = "<suite>", line: int = 0) -> Task:
    """Validate one decoded suite line."""

    def fail_at(fieldname: str, message: str) -> SuiteError:
        return _fail(source, line, fieldname, message)

    if not isinstance(raw, dict):
        raise fail_at("(line)", f"expected a JSON object, got {type(raw).__name__}")
    for key in raw:
        if key not in _TASK_KEYS:
            raise fail_at(key, f"unknown field (known: {', '.join(_TASK_KEYS)})")
    task_id = raw.get("id")
    if not isinstance(task_id, str) or not _ID.match(task_id):
        raise fail_at("id", f"{task_id!r}: use 1-100 letters, digits, '.', '_' or '-', not starting with a symbol")
    turns = raw.get("turns")
    if not isinstance(turns, list) or not turns:
        raise fail_at("turns", "expected a non-empty list of user messages")
    for index, turn in enumerate(turns):
        if not isinstance(turn, str) or not turn.strip():
            raise fail_at(f"turns[{index}]", f"expected a non-empty string, got {turn!r}")
    memory_files: dict[str, str] | None = None
    template = raw.get("template")
    if template is not None:
        if not isinstance(template, dict) or set(template) - {"files"}:
            raise fail_at("template", "expected an object with 'files' (path -> Markdown text)")
        files = template.get("files", {})
        if not isinstance(files, dict):
            raise fail_at("template.files", "expected an object mapping paths to file contents")
        for path, text in files.items():
            if path.startswith("/") or ".." in Path(path).parts or not path.strip():
                raise fail_at(f"template.files.{path}", "must be a relative path inside the memory repository")
            if not isinstance(text, str):
                raise fail_at(f"template.files.{path}", f"expected the file's text, got {type(text).__name__}")
        memory_files = dict(files)
    settings = parse_settings(raw.get("settings", {}), fail_at)
    grade = _parse_grade(raw["grade"], fail_at) if "grade" in raw else None
    history = _parse_history(raw["history"], fail_at) if "history" in raw else ()
    if grade is not None:
        known = {s.id for s in history if s.id}
        for at, session_id in enumerate(grade.evidence):
            if session_id not in known:
                raise fail_at(f"grade.evidence[{at}]", f"{session_id!r}: no history session has this id")
    checks_raw = raw.get("checks", [] if grade is not None else None)
    if not isinstance(checks_raw, list) or (not checks_raw and grade is None):
        raise fail_at("checks", "expected a non-empty list of checks (or a 'grade')")
    checks = tuple(_parse_check(c, f"checks[{i}]", fail_at) for i, c in enumerate(checks_raw))
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise fail_at("description", "expected a string")
    return Task(
        id=task_id,
        turns=tuple(turns),
        checks=checks,
        settings=settings,
        memory_files=memory_files,
        description=description,
        line=line,
        history=history,
        grade=grade,
    )


def parse_suite(text: str, *, source: str = "<suite>") -> list[Task]:
    """All tasks of a suite. Blank lines are skipped; ids must be unique. Every line is checked
    before the verdict, so one error names every problem in the file, a line each (the last says
    how many), and a suite is fixed in one pass."""
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(str(_fail(source, number, "(line)", f"not valid JSON: {exc.msg} at column {exc.colno}")))
            continue
        try:
            if isinstance(raw, dict) and "reference" in raw:
                _reference_line(raw, source, number)
                continue
            task = parse_task(raw, source=source, line=number)
        except SuiteError as exc:
            problems.append(str(exc))
            raw_id = raw.get("id") if isinstance(raw, dict) else None
            if isinstance(raw_id, str) and raw_id not in seen:
                seen[raw_id] = number
            continue
        if task.id in seen:
            problems.append(str(_fail(source, number, "id", f"duplicate id {task.id!r} (first on line {seen[task.id]})")))
            continue
        seen[task.id] = number
        tasks.append(task)
    if len(problems) == 1:
        raise SuiteError(problems[0])
    if problems:
        raise SuiteError("\n".join([*problems, f"{source}: {len(problems)} problems"]))
    if not tasks:
        raise SuiteError(f"{source}: the suite has no tasks")
    return tasks


def _reference_line(raw: dict[str, Any], source: str, line: int) -> Reference:
    def fail_at(fieldname: str, message: str) -> SuiteError:
        return _fail(source, line, fieldname, message)

    if set(raw) != {"reference"}:
        raise fail_at("reference", "a reference line holds only 'reference'")
    return _parse_reference(raw["reference"], fail_at)


def references(text: str, *, source: str = "<suite>") -> list[Reference]:
    """The published results a suite carries beside its tasks (already validated by ``parse_suite``)."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        if '"reference"' in line:
            raw = json.loads(line)
            if isinstance(raw, dict) and "reference" in raw:
                found.append(_reference_line(raw, source, number))
    return found


def load_suite(path: Path) -> list[Task]:
    """Read and validate a suite file (blocking: call from a thread in async code)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SuiteError(f"{path}: no such suite file") from None
    except UnicodeDecodeError as exc:
        raise SuiteError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return parse_suite(text, source=str(path))


def select_tasks(tasks: list[Task], ids: tuple[str, ...] | list[str] = (), limit: int | None = None) -> list[Task]:
    """``--task ID`` (repeatable) and ``--limit N``: the named tasks (all when none are named), in
    suite order, then ``limit`` of them: the first ones, or, when the tasks are graded by ability,
    the first of each ability in turn (so a limited run measures every ability the suite has),
    kept in suite order. An unknown id is a ``SuiteError`` naming it."""
    known = {t.id for t in tasks}
    unknown = [i for i in ids if i not in known]
    if unknown:
        shown = ", ".join(t.id for t in tasks[:12]) + (", …" if len(tasks) > 12 else "")
        raise SuiteError(f"--task {unknown[0]!r}: no such task in the suite (tasks: {shown})")
    wanted = set(ids)
    chosen = [t for t in tasks if not wanted or t.id in wanted]
    if limit is None or limit >= len(chosen):
        return chosen
    by_ability: dict[str, list[Task]] = {}
    for task in chosen:
        by_ability.setdefault(task.grade.ability if task.grade else "", []).append(task)
    if len(by_ability) == 1:
        return chosen[:limit]
    taken: set[str] = set()
    rounds = max(len(group) for group in by_ability.values())
    for index in range(rounds):
        for group in by_ability.values():
            if index < len(group) and len(taken) < limit:
                taken.add(group[index].id)
    return [t for t in chosen if t.id in taken]


def task_to_json(task: Task) -> dict[str, Any]:
    """A task as a plain object (for Ray and for sweeps that rewrite settings)."""
    checks: list[dict[str, Any]] = []
    for check in task.checks:
        item: dict[str, Any] = {"where": check.where}
        if check.file is not None:
            item["file"] = check.file
        item["contains" if check.contains is not None else "regex"] = check.contains or check.regex
        if check.negate:
            item["negate"] = True
        checks.append(item)
    out: dict[str, Any] = {"id": task.id, "turns": list(task.turns), "settings": dict(task.settings), "checks": checks}
    if task.memory_files is not None:
        out["template"] = {"files": dict(task.memory_files)}
    if task.description:
        out["description"] = task.description
    if task.history:
        out["history"] = [
            {"date": s.date, **({"id": s.id} if s.id else {}), "messages": [
                {"role": role, "content": text} for pair in s.exchanges for role, text in zip(("user", "assistant"), pair, strict=True)
            ]}
            for s in task.history
        ]
    if task.grade is not None:
        grade: dict[str, Any] = {"answer": task.grade.answer}
        if task.grade.accept:
            grade["accept"] = list(task.grade.accept)
        if task.grade.ability:
            grade["ability"] = task.grade.ability
        if task.grade.evidence:
            grade["evidence"] = list(task.grade.evidence)
        out["grade"] = grade
    return out


def task_from_json(raw: Mapping[str, Any], line: int = 0) -> Task:
    return parse_task(dict(raw), line=line)
