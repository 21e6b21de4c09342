"""The benchmark importers: fixtures written here in each benchmark's published format become suites
that ``reverie run`` completes and grades; samples are reproducible; a bad record is one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator import run_suite
from orchestrator.api import import_suite
from orchestrator.batch.importers import LOCOMO_ABSTAIN, ImportOptions, import_benchmark, suite_text
from orchestrator.batch.suite import SuiteError, parse_suite

ROOT = Path(__file__).resolve().parents[2]


def _lme_question(qid: str, kind: str, answer: Any = "Lisbon") -> dict[str, Any]:
    return {
        "question_id": qid,
        "question_type": kind,
        "question": "Where did I say I live?",
        "answer": answer,
        "question_date": "2023/06/01 (Thu) 10:00",
        "haystack_session_ids": [f"{qid}-s2", f"{qid}-s1", f"{qid}-empty"],
        "haystack_dates": ["2023/05/21 (Sun) 09:30", "2023/05/20 (Sat) 02:21", "2023/05/22 (Mon) 08:00"],
        "haystack_sessions": [
            [{"role": "user", "content": "I live in Lisbon now.", "has_answer": True},
             {"role": "assistant", "content": "Lovely city!"}],
            [{"role": "user", "content": "Any tips for tomatoes?"}, {"role": "assistant", "content": "Sun and water."},
             {"role": "user", "content": "thanks"}],
            [{"role": "assistant", "content": "an unpaired reply"}],
        ],
        "answer_session_ids": [f"{qid}-s2"],
    }


def _write(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_longmemeval_questions_keep_dates_evidence_abilities_and_abstention(tmp_path: Path) -> None:
    source = _write(tmp_path / "longmemeval_s.json", [
        _lme_question("q1", "single-session-user"),
        _lme_question("q2_abs", "multi-session", "You did not mention this."),
        _lme_question("q3", "temporal-reasoning", 7),
    ])
    tasks = parse_suite(suite_text(import_benchmark("longmemeval", source)))
    assert [t.id for t in tasks] == ["lme-q1", "lme-q2_abs", "lme-q3"]
    assert [t.grade.ability for t in tasks if t.grade] == ["extraction", "abstention", "temporal"]
    first = tasks[0]
    assert [s.id for s in first.history] == ["q1-s1", "q1-s2"]  # oldest first; the empty one dropped
    assert first.history[0].exchanges == (("Any tips for tomatoes?", "Sun and water."),)
    assert first.history[1].date == "2023-05-21T09:30:00.000Z"
    assert first.grade is not None and first.grade.evidence == ("q1-s2",)
    assert first.turns == ("Current date: 2023/06/01 (Thu) 10:00\n\nWhere did I say I live?",)
    assert tasks[2].grade is not None and tasks[2].grade.answer == "7"


def test_locomo_sessions_keep_speakers_and_category_five_is_abstention(tmp_path: Path) -> None:
    source = _write(tmp_path / "locomo10.json", [{
        "sample_id": "conv-1",
        "conversation": {
            "speaker_a": "Caroline", "speaker_b": "Melanie",
            "session_2_date_time": "3:00 pm on 9 May, 2023",
            "session_2": [
                {"speaker": "Melanie", "dia_id": "D2:1", "text": "I painted a sunrise."},
                {"speaker": "Caroline", "dia_id": "D2:2", "text": "Wow!", "blip_caption": "a sunrise painting"},
                {"speaker": "Melanie", "dia_id": "D2:3", "text": "Thanks."},
            ],
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Caroline", "dia_id": "D1:1", "text": "I went to a support group yesterday."},
                {"speaker": "Caroline", "dia_id": "D1:2", "text": "It was powerful."},
                {"speaker": "Melanie", "dia_id": "D1:3", "text": "That's great."},
            ],
        },
        "qa": [
            {"question": "When did Caroline go to the support group?", "answer": "7 May 2023", "evidence": ["D1:1"], "category": 2},
            {"question": "What did Melanie paint?", "answer": "a sunrise", "evidence": ["D2:1"], "category": 4},
            {"question": "What did Caroline paint?", "adversarial_answer": "a sunrise", "evidence": [], "category": 5},
        ],
    }])
    tasks = parse_suite(suite_text(import_benchmark("locomo", source)))
    assert [t.grade.ability for t in tasks if t.grade] == ["temporal", "single-hop", "abstention"]
    history = tasks[0].history
    assert [s.id for s in history] == ["session_1", "session_2"]
    assert history[0].exchanges == (("Caroline: I went to a support group yesterday. It was powerful.", "Melanie: That's great."),)
    assert history[1].exchanges == ((
        "Melanie: I painted a sunrise.",
        "Caroline: Wow! [shares a photo: a sunrise painting]\nMelanie: Thanks.",
    ),)
    assert tasks[0].grade is not None and tasks[0].grade.evidence == ("session_1",)
    assert tasks[2].grade is not None and tasks[2].grade.answer == LOCOMO_ABSTAIN
    assert tasks[0].turns[0].startswith("Current date: 2023/05/09 (Tue) 15:00\n\n")


def test_memoryagentbench_replays_its_context_in_chunks_and_accepts_every_answer(tmp_path: Path) -> None:
    source = _write(tmp_path / "Conflict_Resolution.json", [{
        "context": "Fact: the capital of Zedland is Ora. " * 300,
        "questions": ["What is the capital of Zedland?", "Which city is Zedland's capital?"],
        "answers": [["Ora", "Ora city"], ["Ora"]],
        "metadata": {"source": "factconsolidation_sh"},
    }])
    tasks = parse_suite(suite_text(import_benchmark("memoryagentbench", source)))
    assert len(tasks) == 2 and all(t.grade and t.grade.ability == "conflict-resolution" for t in tasks)
    assert len(tasks[0].history) == 3 and tasks[0].history[0].exchanges[0][0].startswith("Memorise this text (part 1 of 3)")
    assert tasks[0].grade is not None and tasks[0].grade.accept == ("Ora city",)
    with pytest.raises(SuiteError, match="name the file after its split"):
        import_benchmark("memoryagentbench", _write(tmp_path / "rows.json", []))


def test_a_sample_is_reproducible_and_spread_over_the_abilities(tmp_path: Path) -> None:
    kinds = ["single-session-user", "multi-session", "temporal-reasoning", "knowledge-update"]
    source = _write(tmp_path / "longmemeval_s.json", [_lme_question(f"q{i}", kinds[i % 4]) for i in range(80)])
    one = suite_text(import_benchmark("longmemeval", source, ImportOptions(sample=50, seed=1)))
    assert one == suite_text(import_benchmark("longmemeval", source, ImportOptions(sample=50, seed=1)))
    assert one != suite_text(import_benchmark("longmemeval", source, ImportOptions(sample=50, seed=2)))
    tasks = parse_suite(one)
    spread = [t.grade.ability for t in tasks if t.grade]
    assert len(tasks) == 50 and {spread.count(a) for a in set(spread)} <= {12, 13}
    only = import_benchmark("longmemeval", source, ImportOptions(abilities=("temporal",)))
    assert len(only) == 20
    with pytest.raises(SuiteError, match="no 'locomo' questions"):
        import_benchmark("longmemeval", source, ImportOptions(abilities=("locomo",)))


@pytest.mark.parametrize(
    ("benchmark", "records", "needle"),
    [
        ("longmemeval", [_lme_question("q1", "single-session-user"), {"question_id": "q2"}], "record 1 (q2): question_type: missing"),
        ("longmemeval", [{**_lme_question("q1", "weird-type")}], "record 0 (q1): question_type: 'weird-type'"),
        ("longmemeval", [{**_lme_question("q1", "multi-session"), "question_date": "yesterday"}], "question_date: 'yesterday'"),
        ("locomo", [{"sample_id": "c", "conversation": {"session_1": [], "session_1_date_time": "soon"}, "qa": []}],
         "record 0 (c): conversation.session_1_date_time: 'soon'"),
    ],
)
def test_a_malformed_record_is_one_line_naming_it(tmp_path: Path, benchmark: str, records: list[Any], needle: str) -> None:
    source = _write(tmp_path / "bench.json", records)
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "suite", "import", benchmark, str(source), "-o", str(tmp_path / "s.jsonl")],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )
    assert done.returncode == 1 and not (tmp_path / "s.jsonl").exists()
    assert done.stderr.count("\n") == 1 and needle in done.stderr, done.stderr


_FIXTURES: dict[str, tuple[str, Any, str, int]] = {
    "longmemeval": ("longmemeval_s.json", [_lme_question("q1", "single-session-user")], "extraction", 2),
    "locomo": ("locomo10.json", [{
        "sample_id": "c1",
        "conversation": {
            "speaker_a": "Ana", "speaker_b": "Ben", "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [{"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a cat named Miso."},
                          {"speaker": "Ben", "dia_id": "D1:2", "text": "Lovely name!"}],
        },
        "qa": [{"question": "What is the name of Ana's cat?", "answer": "Miso", "evidence": ["D1:1"], "category": 4}],
    }], "single-hop", 1),
    "memoryagentbench": ("Accurate_Retrieval.json", [{
        "context": "The lighthouse keeper's name is Odile.", "questions": ["What is the lighthouse keeper's name?"],
        "answers": [["Odile"]], "metadata": {"source": "eventqa"},
    }], "accurate-retrieval", 1),
}


@pytest.mark.anyio
@pytest.mark.parametrize("benchmark", sorted(_FIXTURES))
async def test_an_imported_suite_runs_and_is_graded(tmp_path: Path, benchmark: str) -> None:
    name, records, ability, replayed = _FIXTURES[benchmark]
    written = await import_suite(benchmark, _write(tmp_path / name, records), tmp_path / "suite.jsonl")
    assert written.tasks == 1 and written.abilities == {ability: 1}
    report = await run_suite(tmp_path / "suite.jsonl", tmp_path / "run")
    (result,) = report.results
    assert result.status in {"passed", "failed"} and result.error is None and result.grade is not None
    assert result.grade["ability"] == ability and result.replayed_turns == replayed
