"""Suite parsing: every mistake names the line and the field; valid lines round-trip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.batch.suite import Check, SuiteError, load_suite, parse_suite, task_from_json, task_to_json

GOOD = {"id": "t1", "turns": ["hi"], "checks": [{"contains": "hi"}]}


def _suite(*lines: object) -> str:
    return "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines)


@pytest.mark.parametrize(
    ("bad", "where"),
    [
        ("{not json", ":2: (line): not valid JSON"),
        ({**GOOD, "id": "-x"}, ":2: id:"),
        ({**GOOD, "turns": []}, ":2: turns:"),
        ({**GOOD, "turns": ["ok", ""]}, ":2: turns[1]:"),
        ({**GOOD, "checks": []}, ":2: checks:"),
        ({**GOOD, "checks": [{"where": "memory", "contains": "x"}]}, ":2: checks[0].file:"),
        ({**GOOD, "checks": [{"contains": "x", "regex": "y"}]}, ":2: checks[0]: give exactly one"),
        ({**GOOD, "checks": [{"regex": "("}]}, ":2: checks[0].regex: invalid regular expression"),
        ({**GOOD, "checks": [{"contains": "a", "colour": 1}]}, ":2: checks[0].colour: unknown field"),
        ({**GOOD, "settings": {"max_steps": "ten"}}, ":2: settings.max_steps: 'ten': expected a whole number"),
        ({**GOOD, "settings": {"max_steps": 0}}, ":2: settings.max_steps:"),
        ({**GOOD, "settings": {"temperature": 1}}, ":2: settings.temperature: unknown setting"),
        ({**GOOD, "settings": {"reflection_trigger": "sometimes"}}, ":2: settings.reflection_trigger:"),
        ({**GOOD, "settings": {"reflection_trigger": "off:3"}}, ":2: settings.reflection_trigger:"),
        ({**GOOD, "settings": {"compaction_mode": "half"}}, ":2: settings.compaction_mode:"),
        ({**GOOD, "settings": {"context_window": 10}}, ":2: settings.context_window:"),
        ({**GOOD, "template": {"files": {"../x.md": "a"}}}, ":2: template.files.../x.md:"),
        ({**GOOD, "extra": 1}, ":2: extra: unknown field"),
        ({**GOOD, "id": "t0"}, ":2: id: duplicate id 't0' (first on line 1)"),
        ([1, 2], ":2: (line): expected a JSON object"),
        ({**GOOD, "history": {}}, ":2: history: expected a list"),
        ({**GOOD, "history": [{"date": "yesterday", "messages": []}]}, ":2: history[0].date: 'yesterday': not an ISO 8601"),
        ({**GOOD, "history": [{"date": "2023-05-20", "messages": [{"role": "user", "content": "a"}]}]},
         ":2: history[0].messages: expected a non-empty list of user/assistant pairs"),
        ({**GOOD, "history": [{"date": "2023-05-20", "messages": [{"role": "assistant", "content": "a"},
                                                                  {"role": "user", "content": "b"}]}]},
         ":2: history[0].messages[0].role: expected 'user'"),
        ({**GOOD, "history": [{"date": "2023-05-20", "messages": [{"role": "user", "content": "a"},
                                                                  {"role": "assistant", "content": " "}]}]},
         ":2: history[0].messages[1].content:"),
        ({**GOOD, "grade": {"answer": ""}}, ":2: grade.answer:"),
        ({**GOOD, "grade": {"answer": "x", "ability": "Tele pathy"}}, ":2: grade.ability: 'Tele pathy'"),
        ({**GOOD, "grade": {"answer": "x", "evidence": ["s9"]}, "history": [
            {"date": "2023-05-20", "id": "s1", "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}
        ]}, ":2: grade.evidence[0]: 's9': no history session has this id"),
        ({**GOOD, "history": [{"date": "2023-05-20", "id": 3, "messages": []}]}, ":2: history[0].id: expected a string"),
        ({**GOOD, "grade": {"answer": "x", "accept": "y"}}, ":2: grade.accept:"),
        ({**GOOD, "grade": {"answer": "x", "key": "y"}}, ":2: grade.key: unknown field"),
        ({"id": "t2", "turns": ["hi"]}, ":2: checks: expected a non-empty list of checks (or a 'grade')"),
    ],
)
def test_errors_name_line_and_field(bad: object, where: str) -> None:
    first = {**GOOD, "id": "t0"}
    with pytest.raises(SuiteError) as info:
        parse_suite(_suite(first, bad), source="s.jsonl")
    message = str(info.value)
    assert message.startswith("s.jsonl" + where), message
    assert "\n" not in message


def test_blank_lines_and_numbering() -> None:
    text = _suite(GOOD, "", "   ", {**GOOD, "id": "t2", "turns": ["a", "b"]})
    tasks = parse_suite(text)
    assert [t.id for t in tasks] == ["t1", "t2"]
    assert [t.line for t in tasks] == [1, 4]
    with pytest.raises(SuiteError, match="no tasks"):
        parse_suite("\n\n")


def test_step_count_shorthand_and_round_trip() -> None:
    raw = {
        **GOOD,
        "settings": {"reflection_trigger": "step-count:5", "sliding_percentage": 1},
        "template": {"files": {"persona.md": "---\nname: p\n---\n"}},
        "checks": [{"where": "memory", "file": "human.md", "regex": "^- x$", "negate": True}],
    }
    task = parse_suite(json.dumps(raw))[0]
    assert task.settings == {"reflection_trigger": "step-count", "reflection_step_count": 5, "sliding_percentage": 1.0}
    again = task_from_json(task_to_json(task))
    assert (again.settings, again.checks, again.memory_files, again.turns) == (
        task.settings, task.checks, task.memory_files, task.turns,
    )


def test_check_semantics() -> None:
    assert Check("answer", contains="fin").passes("the fin")
    assert not Check("answer", contains="fin").passes(None)
    assert Check("memory", regex=r"^- a$", file="x.md").passes("intro\n- a\n")
    assert Check("memory", contains="a", file="x.md", negate=True).passes(None)
    assert not Check("answer", contains="a", negate=True).passes("a")


def test_example_suite_is_valid_and_covers_the_features() -> None:
    tasks = load_suite(Path(__file__).resolve().parents[2] / "examples" / "suite.jsonl")
    assert len(tasks) >= 20
    triggers = {t.settings.get("reflection_trigger") for t in tasks}
    assert {"step-count", "compaction-event", "off"} <= triggers
    assert any("context_window" in t.settings for t in tasks)
    assert any(t.memory_files for t in tasks)
    assert any(c.where == "memory" for t in tasks for c in t.checks)


def test_load_suite_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SuiteError, match="no such suite file"):
        load_suite(tmp_path / "nope.jsonl")


def test_history_and_grade_round_trip_and_replace_checks() -> None:
    raw = {
        "id": "mem", "turns": ["Current date: 2023/05/30\n\nWhere did I go?"],
        "history": [{"date": "2023-05-20T02:21:00+02:00", "messages": [
            {"role": "user", "content": "I went to Target"}, {"role": "assistant", "content": "Nice."}]}],
        "grade": {"answer": "Target", "accept": ["a Target store"], "ability": "extraction"},
    }
    (task,) = parse_suite(json.dumps(raw))
    assert task.checks == () and task.grade is not None and task.grade.accept == ("a Target store",)
    assert task.history[0].date == "2023-05-20T00:21:00.000Z"  # normalised to UTC
    assert task.history[0].exchanges == (("I went to Target", "Nice."),)
    assert task_from_json(task_to_json(task), line=1) == task
    assert task.pinned_trigger is None
    pinned = parse_suite(json.dumps({**GOOD, "settings": {"reflection_trigger": "step-count:2"}}))[0]
    assert pinned.pinned_trigger == "step-count:2"


def test_every_problem_of_a_suite_is_named_in_one_pass() -> None:
    text = _suite(
        GOOD, "{bad json", {**GOOD, "id": "t2", "colour": "red"}, {"turns": ["hi"], "checks": [{"contains": "x"}]},
        {**GOOD, "id": "t3"}, {**GOOD, "id": "t1"}, {**GOOD, "id": "t4", "checks": [{"contains": "x", "shade": 1}]},
    )
    with pytest.raises(SuiteError) as info:
        parse_suite(text, source="s.jsonl")
    lines = str(info.value).splitlines()
    assert [line.split(":")[1] for line in lines[:-1]] == ["2", "3", "4", "6", "7"], lines
    assert "not valid JSON" in lines[0] and "colour: unknown field" in lines[1] and "id:" in lines[2]
    assert "duplicate id 't1' (first on line 1)" in lines[3] and "checks[0].shade: unknown field" in lines[4]
    assert lines[-1] == "s.jsonl: 5 problems"


def test_a_limit_takes_every_ability_in_turn_and_keeps_suite_order() -> None:
    from orchestrator.batch.suite import select_tasks

    graded = [
        {"id": f"{ability}-{i}", "turns": ["q?"], "grade": {"answer": "a", "ability": ability}}
        for ability in ("extraction", "temporal", "abstention") for i in range(3)
    ]
    tasks = parse_suite(_suite(*graded))
    assert [t.id for t in select_tasks(tasks, limit=4)] == ["extraction-0", "extraction-1", "temporal-0", "abstention-0"]
    plain = parse_suite(_suite(GOOD, {**GOOD, "id": "t2"}, {**GOOD, "id": "t3"}))
    assert [t.id for t in select_tasks(plain, limit=2)] == ["t1", "t2"]
