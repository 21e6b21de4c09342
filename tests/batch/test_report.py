"""``reverie report``: the data gathered from a real run, and the page rendered in headless Chromium."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from orchestrator.batch.eventlog import EventRecord
from orchestrator.batch.report_data import gather, task_row, token_split
from orchestrator.batch.report_html import render_report
from orchestrator.batch.report_svg import pareto_chart
from orchestrator.batch.runner import task_paths
from orchestrator.cli import report as report_cli
from orchestrator.cli.batch import register
from tests.batch.browser import chromium, open_report
from tests.batch.helpers import TINY, limited_sweep, write_suite

ROOT = Path(__file__).resolve().parents[2]
_EXAMPLES = {json.loads(line)["id"]: json.loads(line) for line in (ROOT / "examples" / "suite.jsonl").read_text().splitlines() if line.strip()}
# Fails its check after editing persona.md; its first turn would end a script block if embedded raw.
BROKEN = {"id": "broken-rule", "turns": ["remember: always end answers with </script><b>x", "hello"],
          "checks": [{"contains": "never said"}]}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def cli() -> typer.Typer:
    app = typer.Typer()
    register(app)
    report_cli.register(app)
    return app


def _run(cli: typer.Typer, tmp_path: Path, tasks: list[dict[str, Any]], *extra: str) -> Path:
    suite = write_suite(tmp_path / "s.jsonl", tasks)
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "-q", "-j", "3", *extra])
    assert result.exit_code in (0, 1), result.output
    return out


def test_token_split_separates_main_agent_from_subagents() -> None:
    def call(purpose: str | None, tin: int, tout: int) -> EventRecord:
        payload: dict[str, Any] = {"prompt_tokens": tin, "completion_tokens": tout}
        if purpose:
            payload["purpose"] = purpose
        return EventRecord(1, "2026-01-01T00:00:00.000Z", "t", "model.call", payload)

    split = token_split([call("chat", 100, 5), call(None, 10, 1), call("summarize", 40, 7), call("reflect", 3, 2)])
    assert (split["main_in"], split["main_out"], split["sub_in"], split["sub_out"]) == (110, 6, 43, 9)
    assert split["by_purpose"] == {"chat": 116, "summarize": 47, "reflect": 5}
    row = task_row({"id": "t", "status": "failed", "checks": [{"check": "a", "passed": False}],
                    "subagent_tokens_in": 7}, [call("reflect", 1, 1)])
    assert row["tokens_main"] == 0 and row["tokens_sub"] == 2
    assert row["failed_checks"] == ["a"] and row["reported"] == {"subagent_tokens_in": 7}


def test_run_report_data_transcript_evictions_and_memory_diff(cli: typer.Typer, tmp_path: Path) -> None:
    out = _run(cli, tmp_path, [TINY[0], BROKEN, _EXAMPLES["compact-sliding"]])
    data = gather(out)
    rows = {r["id"]: r for r in data.index["runs"][0]["rows"]}
    assert set(rows) == {"rule", "broken-rule", "compact-sliding"}
    summary = data.index["runs"][0]["summary"]
    assert (summary["passed"], summary["failed"], summary["error"]) == (2, 1, 0)
    assert summary["elapsed"] is not None and summary["compactions"] == rows["compact-sliding"]["compactions"] >= 1

    broken = data.details[rows["broken-rule"]["n"]]
    assert [c["passed"] for c in broken["checks"]] == [False]
    assert [f["path"] for f in broken["diff"]["files"]] == ["persona.md"]
    assert "+- always end answers with </script><b>x" in broken["diff"]["patch"]
    texts = [m["content"] for c in broken["transcript"]["conversations"] for t in c["turns"] for m in t["messages"]]
    assert "remember: always end answers with </script><b>x" in texts
    calls = [tc["name"] for c in broken["transcript"]["conversations"] for t in c["turns"]
             for m in t["messages"] for tc in m.get("tool_calls", ())]
    assert calls, "the memory edit's tool call is in the transcript"

    compact = data.details[rows["compact-sliding"]["n"]]
    messages = [m for c in compact["transcript"]["conversations"] for t in c["turns"] for m in t["messages"]]
    assert any(m["evicted"] for m in messages) and not messages[-1]["evicted"]
    assert any(m["kind"] == "summary" and m.get("compaction") for m in messages)
    assert compact["compactions"] and all(c["tokens_after"] < c["tokens_before"] for c in compact["compactions"])

    html = render_report(data)
    assert "</script><b>" not in html and html.count("<script") == html.count("</script>")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html), "nothing loads over the network"


def test_run_report_renders_in_chromium(cli: typer.Typer, tmp_path: Path, browser: Any) -> None:
    out = _run(cli, tmp_path, [*TINY, BROKEN], "--report")
    report = out / "report.html"
    assert report.exists()
    with open_report(browser, report) as loaded:
        page = loaded.page
        ids = page.eval_on_selector_all("tr.task-row", "rows => rows.map(r => r.dataset.taskId)")
        assert sorted(ids) == sorted([t["id"] for t in TINY] + ["broken-rule"])
        assert "2 failed" in page.inner_text("#summary")
        page.select_option("#status-filter", "failed")
        assert sorted(page.eval_on_selector_all("tr.task-row", "rows => rows.map(r => r.dataset.taskId)")) == ["broken-rule", "wrong"]
        page.click("tr.task-row[data-task-id='broken-rule']")
        detail = page.locator(".sections[data-task-id='broken-rule']")
        assert detail.locator(".transcript").is_visible()
        assert "remember: always end answers with </script><b>x" in detail.locator(".transcript").inner_text()
        assert detail.locator(".diff table.files").is_visible()
        assert "persona.md" in detail.locator(".diff").inner_text()
        assert "FAILED" in detail.locator(".checks").inner_text()
        page.select_option("#status-filter", "")
        page.click("tr.task-row[data-task-id='chat']")
        assert 'reflection_trigger="off"' in page.locator(".sections[data-task-id='chat'] .settings").inner_text()
        page.click("tr.task-row[data-task-id='chat']")
        assert page.locator(".sections[data-task-id='chat']").count() == 0, "a second click closes the task"
        page.fill("#text-filter", "never said")
        assert page.locator("tr.task-row").count() == 2
        page.screenshot(path=str(tmp_path / "run-report.png"), full_page=True)
        assert loaded.foreign == [] and loaded.errors == []
    assert (tmp_path / "run-report.png").stat().st_size > 0


def test_sweep_report_shows_settings_and_matrix(cli: typer.Typer, tmp_path: Path, browser: Any) -> None:
    suite = write_suite(tmp_path / "s.jsonl", [TINY[0], TINY[2], TINY[4]])
    out = tmp_path / "sweep"
    swept = CliRunner().invoke(
        cli, ["sweep", str(suite), "--trigger", "off", "--trigger", "step-count:2", "--out", str(out), "-q", "-j", "3"]
    )
    assert swept.exit_code == 0, swept.output
    assert f"reverie report {out}" in swept.output
    made = CliRunner().invoke(cli, ["report", str(out)])
    assert made.exit_code == 0 and f"report: {out / 'report.html'}" in made.output
    with open_report(browser, out / "report.html") as loaded:
        page = loaded.page
        assert page.eval_on_selector_all("#settings td.id", "tds => tds.map(t => t.textContent)") == ["off", "step-count-2"]
        cells = page.eval_on_selector_all(
            "#matrix tbody tr", "trs => trs.map(tr => [...tr.children].map(td => td.textContent))"
        )
        assert cells == [["rule", "✓ pass", "✓ pass"], ["wrong", "✗ fail", "✗ fail"]]
        assert "chat (off)" in page.inner_text("#pinned")  # pins its trigger: left out, and named
        assert page.locator(".charts svg.chart").count() >= 5
        page.click("#matrix td.cell[title='wrong · step-count-2']")
        assert page.locator(".sections[data-task-id='wrong'] .transcript").is_visible()
        page.screenshot(path=str(tmp_path / "sweep-report.png"), full_page=True)
        assert loaded.foreign == [] and loaded.errors == []


def _sources(memory: Path, base: str, head: str) -> dict[str, str]:
    """commit -> its ``Reverie-Source`` as git itself reads the trailers (``outside`` without)."""
    said = subprocess.run(
        ["git", "log", "--format=%H%x1f%(trailers:key=Reverie-Source,valueonly,separator=)%x1e", f"{base}..{head}"],
        cwd=memory, capture_output=True, text=True, check=True,
    ).stdout
    found = {}
    for record in said.split("\x1e"):
        if record.strip():
            sha, source = record.strip("\n").split("\x1f")
            found[sha] = source.strip() or "outside"
    return found


def test_the_report_shows_each_tasks_memory_history_with_git_trailer_sources(
    cli: typer.Typer, tmp_path: Path, browser: Any
) -> None:
    """V4: per task, every memory change with the source its commits' trailers name (git's own
    reading is the oracle), a reflection's commits as one change with its diff, on the page too."""
    reflecting = {**_EXAMPLES["reflect-with-rule"], "turns": ["remember: always end answers with ~r", "call me <b>Captain</b></script>", "hello", "status?"], "checks": [{"where": "memory", "file": "human.md", "contains": "Captain"}]}
    out = _run(cli, tmp_path, [TINY[0], reflecting, BROKEN], "--report")
    data = gather(out)
    rows = {r["id"]: r for r in data.index["runs"][0]["rows"]}
    results = {r["id"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    reflected = 0
    for task_id, row in rows.items():
        history = data.details[row["n"]]["history"]
        result = results[task_id]
        truth = _sources(task_paths(out, task_id).memory, result["memory_base"], result["memory_head"])
        listed = [commit for change in history["changes"] for commit in change["commits"]]
        assert sorted(listed) == sorted(truth), f"{task_id}: every commit of the task, each once"
        for change in history["changes"]:
            assert change["sources"] == [truth[commit] for commit in change["commits"]]
            assert change["source"] in change["sources"] and change["files"]
            if change["source"] == "reflection":
                reflected += 1
                assert change["provenance"]["reflection"] and change["patch"].startswith("diff --git")
                added = [f["path"] for f in change["files"] if f["added"]]
                assert all(f"+++ b/{path}" in change["patch"] for path in added)
            else:
                assert "patch" not in change
        assert {c["source"] for c in history["changes"]} >= {"agent"}, task_id
    assert reflected >= 1, "the reflecting task's reflection is one change"
    reflection = next(
        c for c in data.details[rows["reflect-with-rule"]["n"]]["history"]["changes"] if c["source"] == "reflection"
    )
    assert "+- call me <b>Captain</b></script>" in reflection["patch"]

    with open_report(browser, out / "report.html") as loaded:
        page = loaded.page
        page.click("tr.task-row[data-task-id='reflect-with-rule']")
        history = page.locator(".sections[data-task-id='reflect-with-rule'] table.history")
        assert history.is_visible()
        shown = history.locator("tr.change").evaluate_all("rows => rows.map(r => [r.dataset.source, r.dataset.commits])")
        changes = data.details[rows["reflect-with-rule"]["n"]]["history"]["changes"]
        assert shown == [[c["source"], " ".join(c["commits"])] for c in changes]
        history.locator("details summary").first.click()
        assert "call me <b>Captain</b></script>" in history.locator("details pre.patch").first.inner_text()
        assert history.locator("b").count() == 0, "the diff is text, not markup"
        assert loaded.foreign == [] and loaded.errors == []


def test_report_of_a_directory_that_is_no_run(cli: typer.Typer, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["report", str(tmp_path)])
    assert result.exit_code == 1 and "no results.jsonl here" in result.output


@pytest.mark.slow
def test_example_suite_report_in_chromium(cli: typer.Typer, tmp_path: Path, browser: Any) -> None:
    """P9's own check: the example suite at -j 4, then reverie report."""
    out = tmp_path / "run"
    ran = CliRunner().invoke(cli, ["run", str(ROOT / "examples" / "suite.jsonl"), "-j", "4", "--out", str(out), "-q"])
    assert ran.exit_code in (0, 1), ran.output
    made = CliRunner().invoke(cli, ["report", str(out)])
    assert made.exit_code == 0, made.output
    with open_report(browser, out / "report.html") as loaded:
        page = loaded.page
        ids = page.eval_on_selector_all("tr.task-row", "rows => rows.map(r => r.dataset.taskId)")
        assert sorted(ids) == sorted(_EXAMPLES) and len(ids) == 22
        page.click("tr.task-row[data-task-id='edit-suffix-rule']")
        detail = page.locator(".sections[data-task-id='edit-suffix-rule']")
        assert "remember: always end answers with ~fin" in detail.locator(".transcript").inner_text()
        assert "persona.md" in detail.locator(".diff table.files").inner_text()
        page.click("tr.task-row[data-task-id='compact-sliding']")
        assert page.locator(".sections[data-task-id='compact-sliding'] .badge.evicted").count() > 0
        page.screenshot(path=str(tmp_path / "example-report.png"), full_page=True)
        assert loaded.foreign == [] and loaded.errors == []


def test_the_network_detector_sees_a_request(tmp_path: Path, browser: Any) -> None:
    """What the no-network assertions rely on: a page that does reference the network is caught."""
    page = tmp_path / "leaky.html"
    page.write_text('<!DOCTYPE html><html><body data-ready="1"><img src="http://127.0.0.1:9/pixel.png"></body></html>')
    with open_report(browser, page) as loaded:
        loaded.page.wait_for_load_state("load")
        assert any(url.startswith("http://127.0.0.1:9/") for url in loaded.foreign)


_OVERLAPS = """els => {
  const boxes = els.map(e => { const b = e.getBoundingClientRect(); return [e.textContent, b.left, b.top, b.right, b.bottom]; });
  const bad = [];
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const a = boxes[i], b = boxes[j];
    if (a[1] < b[3] && b[1] < a[3] && a[2] < b[4] && b[2] < a[4]) bad.push([a[0], b[0]]);
  }
  return {count: boxes.length, bad: bad};
}"""


def test_benchmark_sweep_report_shows_the_decision_abilities_and_a_pareto_chart(cli: typer.Typer, tmp_path: Path, browser: Any) -> None:
    out = tmp_path / "sweep"
    swept = CliRunner().invoke(cli, [
        "sweep", str(ROOT / "examples" / "longmemeval-s" / "suite.jsonl"), "--trigger", "off", "--trigger", "step-count:5,50",
        "--trigger", "compaction-event", "--task", "lme-e47becba", "--task", "lme-6aeb4375", "--out", str(out), "-q", "-j", "4",
        "--report",
    ])
    assert swept.exit_code == 0, swept.output
    assert "recommended:" in swept.output and "Pareto front" in swept.output
    with open_report(browser, out / "report.html") as loaded:
        page = loaded.page
        assert "Recommended:" in page.inner_text("#recommendation")
        decided = page.eval_on_selector_all("#decision-table tbody td.id", "tds => tds.map(t => t.textContent)")
        # neither step count fires on these recorded sessions (at most 4 exchanges each): not exercised
        assert [d.rstrip(" *") for d in decided] == [
            "off", "step-count-5 (not exercised)", "step-count-50 (not exercised)", "compaction-event"
        ]
        assert "step-count-5" in page.inner_text("#not-exercised")
        assert page.locator("#paired tbody tr").count() == 1  # compaction-event against the best, question by question
        systems = page.eval_on_selector_all("#references tbody td.id", "tds => tds.map(t => t.textContent)")
        assert "mem0" in systems and "claude-sonnet-4-6" in page.inner_text("#references")
        heads = page.eval_on_selector_all("#abilities th", "ths => ths.map(t => t.textContent)")
        assert heads == ["setting", "extraction", "knowledge-update"]
        labels = page.eval_on_selector_all("#pareto text.point-label", _OVERLAPS)
        assert labels == {"count": 4, "bad": []}
        for chart in range(page.locator(".charts svg.chart:not(.pareto)").count()):  # the bar charts' labels too
            bars = page.locator(".charts svg.chart:not(.pareto)").nth(chart)
            assert bars.locator("text.label").evaluate_all(_OVERLAPS) == {"count": 4, "bad": []}
        ids = page.eval_on_selector_all("tr.task-row", "rows => rows.map(r => r.dataset.taskId + '@' + r.children[1].textContent)")
        assert sorted(ids) == sorted(f"{t}@{s}" for t in ("lme-e47becba", "lme-6aeb4375")
                                     for s in ("off", "step-count-5", "step-count-50", "compaction-event"))
        page.locator("#pareto").screenshot(path=str(tmp_path / "pareto.png"))
        assert loaded.foreign == [] and loaded.errors == []


def test_pareto_labels_of_crowded_settings_do_not_overlap_in_chromium(tmp_path: Path, browser: Any) -> None:
    rows = [
        {"setting": name, "tokens": tokens, "cost": None, "quality": {"mean": q, "low": max(0, q - 0.2), "high": min(1, q + 0.2)}}
        for name, tokens, q in [
            ("off", 1_000_000, 0.19), ("step-count-5", 1_010_000, 0.19), ("step-count-10", 1_020_000, 0.19),
            ("compaction-event", 1_030_000, 0.2), ("step-count-2", 1_000_000, 0.21), ("step-count-25", 3_000_000, 0.9),
        ]
    ]
    page_file = tmp_path / "chart.html"
    page_file.write_text(f"<!doctype html><html><body data-ready='1'>{pareto_chart(rows, ['off', 'step-count-25'])}</body></html>")
    with open_report(browser, page_file) as loaded:
        labels = loaded.page.eval_on_selector_all("text.point-label", _OVERLAPS)
        assert labels == {"count": 6, "bad": []}
        inside = loaded.page.eval_on_selector_all(
            "text.point-label", "els => els.every(e => { const b = e.getBBox(); return b.x >= 0 && b.x + b.width <= 640; })"
        )
        assert inside


def test_sweep_report_shows_limit_stops_per_setting_next_to_quality(tmp_path: Path, browser: Any) -> None:
    limited_sweep(tmp_path / "sw")
    (tmp_path / "sw" / "report.html").write_text(render_report(gather(tmp_path / "sw")), encoding="utf-8")
    with open_report(browser, tmp_path / "sw" / "report.html") as loaded:
        page = loaded.page
        heads = page.eval_on_selector_all("#decision-table th", "ths => ths.map(t => t.textContent)")
        assert heads[1:3] == ["quality [95%]", "limit stops"]
        rows = page.eval_on_selector_all(
            "#decision-table tbody tr", "trs => trs.map(tr => [tr.children[0].textContent, tr.children[2].textContent])"
        )
        assert [(s.rstrip(" *"), stops) for s, stops in rows] == [("tight", "2 refl"), ("roomy", "0")]
        assert "reflections stopped at their limit: 2" in page.get_attribute("#decision-table td.limit-stops", "title")
        assert loaded.foreign == [] and loaded.errors == []
