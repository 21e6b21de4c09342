"""What a ``run`` or ``sweep`` will do, decided before anything runs: the suite and the tasks
selected, the run directory, the options (given again, else what the run recorded in ``run.json``,
else the defaults), which tasks still need running and which failed ones rerun.

This is the planning the ``run`` and ``sweep`` commands did inside their typer functions; it lives
here so a Python program resumes or retries a run exactly as the command line does (the CLI and
``orchestrator.run_suite`` both call ``plan_run``). Every refusal is a one-line ``UsageError`` (or
the suite's ``SuiteError``) ending in "(nothing was run)" where that helps; nothing here prints.
Blocking (reads files): call it off the event loop.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from orchestrator.base.config import REFLECTION_TRIGGERS, load_settings, parameter_value
from orchestrator.base.errors import UsageError
from orchestrator.base.paths import config_path
from orchestrator.batch.estimate import ESTIMATE_DIR
from orchestrator.batch.request import BatchRequest
from orchestrator.batch.results import RESULTS_FILE, TaskResult, read_results
from orchestrator.batch.run import retry_candidates
from orchestrator.batch.runner import RunOptions
from orchestrator.batch.suite import Reference, SuiteError, Task, load_suite, references, select_tasks
from orchestrator.batch.sweep import SWEEP_FILE, SweepSetting, epoch_tasks, expand_triggers, split_pinned
from orchestrator.batch.template_check import check_templates

__all__ = ["RunPlan", "SweepPlan", "load_tasks", "parse_processes", "plan_run", "plan_sweep", "recorded_run", "run_options"]


@dataclass(frozen=True)
class RunPlan:
    """A run as it will start. ``run_tasks`` is what ``run_suite`` is given (for a retry, the whole
    suite, so the summary covers every task); ``todo`` the ids that will run now; ``retry`` the ids
    whose failed results may be rerun; ``kept`` the recorded results of the other tasks of
    ``run_tasks`` (what a resumed or retried run counts as done before it starts); ``notes`` lines
    worth telling the user (which recorded option was reused)."""

    suite: Path
    out_dir: Path
    all_tasks: tuple[Task, ...]
    tasks: tuple[Task, ...]
    run_tasks: tuple[Task, ...]
    options: RunOptions
    executor: str
    concurrency: int
    processes: int | None
    processes_given: str | None
    resume: bool
    retry: tuple[str, ...] | None
    todo: frozenset[str]
    again: frozenset[str]
    notes: tuple[str, ...] = ()
    kept: tuple[TaskResult, ...] = ()


@dataclass(frozen=True)
class SweepPlan:
    """A sweep as it will start: its settings, ``epochs`` and ``override_pinned`` (given, else what
    ``sweep.json`` recorded). ``tasks`` is the selection (``run_sweep`` leaves the pinned ones out
    itself); ``pinned`` names those (id -> their trigger) and ``per_setting`` counts the task runs
    each setting makes (compared tasks x epochs), for progress."""

    suite: Path
    out_dir: Path
    tasks: tuple[Task, ...]
    settings: tuple[SweepSetting, ...]
    options: RunOptions
    executor: str
    concurrency: int
    processes: int | None
    processes_given: str | None
    resume: bool
    notes: tuple[str, ...] = ()
    epochs: int = 1
    override_pinned: bool = False
    pinned: Mapping[str, str] = field(default_factory=dict)
    per_setting: int = 0
    kept: Mapping[str, tuple[TaskResult, ...]] = field(default_factory=dict)
    """Per setting label, the recorded results a resumed sweep keeps (its progress starts from them)."""
    references: tuple[Reference, ...] = ()

    def pinned_line(self) -> str | None:
        """What happens to the pinned tasks, for the user; None when no task pins its trigger."""
        if not self.pinned:
            return None
        verb = "compared under each setting (--override-pinned)" if self.override_pinned else "left out (--override-pinned compares them)"
        return (f"pinned: {len(self.pinned)} task(s) set their own reflection trigger, {verb}: "
                + ", ".join(f"{k} ({v})" for k, v in self.pinned.items()))

    def check_compared(self) -> None:
        """Refuse a sweep with nothing to compare (every selected task pinned). Separate from
        ``plan_sweep`` so the command line names a bad executor choice first, as it always has."""
        if not self.per_setting:
            raise UsageError(
                "every task pins its own reflection trigger: nothing to compare; give --override-pinned (nothing was run)"
            )


def _estimate_dir(out_dir: Path) -> Path:
    """A fresh ``OUT/estimate`` (an earlier estimate's run is replaced). Blocking."""
    target = out_dir / ESTIMATE_DIR
    if target.exists():
        shutil.rmtree(target)
    return target


def load_tasks(suite: Path) -> list[Task]:
    if suite.is_dir():
        raise UsageError(f"{suite}: is a directory; give the suite file (JSONL) (nothing was run)")
    try:
        tasks = load_suite(suite)
        check_templates(tasks, str(suite))
        return tasks
    except SuiteError as exc:
        raise SuiteError(f"{exc} (nothing was run)") from None
    except OSError as exc:
        raise UsageError(f"{suite}: cannot read the suite file: {exc.strerror or exc} (nothing was run)") from None


def _select(tasks: list[Task], ids: Sequence[str] | None, limit: int | None) -> list[Task]:
    try:
        return select_tasks(tasks, tuple(ids or ()), limit)
    except SuiteError as exc:
        raise SuiteError(f"{exc} (nothing was run)") from None


def run_options(
    out: Path, model: str | None, window: int | None, price_in: float | None, price_out: float | None,
    latency: float = 0.0, config_file: Path | None = None, judge_model: str | None = None,
    judge_base_url: str | None = None,
) -> RunOptions:
    """The options every task gets; a broken config file stops the run here (D15), in chat's one line,
    and so does a judge without an endpoint (before any task pays for an answer it cannot grade)."""
    overrides = {k: v for k, v in {"model": model, "context_window": window}.items() if v is not None}
    price_in, price_out = parameter_value("price_in", price_in), parameter_value("price_out", price_out)
    config = config_file or config_path()
    settings = load_settings(cli=overrides, path=config)
    if judge_model and not (judge_base_url or settings.base_url):
        raise UsageError(
            f"--judge-model {judge_model}: no endpoint for the judge: give --judge-base-url or configure REVERIE_BASE_URL"
        )
    return RunOptions(
        out_dir=out, overrides=overrides, latency=latency, price_in=price_in, price_out=price_out,
        config_file=str(config.resolve()) if config.is_file() else None,
        judge_model=judge_model, judge_base_url=judge_base_url,
    )


def parse_processes(value: str | int | None, kind: str, name: str = "--processes") -> int | None:
    """``--processes`` (or ``name``, e.g. the field of a run.json): ``auto`` (None) or a whole number
    >= 1; the local executor's default is auto, anything else's is 1 (Ray places its own workers)."""
    if value is None:
        return None if kind == "local" else 1
    text = str(value)
    if text.strip().lower() == "auto":
        return None
    try:
        number = int(text)
    except ValueError:
        raise UsageError(f"{name} {text!r}: use auto or a whole number of processes (1 = every task in this process)") from None
    if number < 1:
        raise UsageError(f"{name} {text}: use auto or a whole number of processes, at least 1")
    return number


def _resumed_processes(
    given: str | None, meta: dict[str, Any], run_file: Path, kind: str, verb: str
) -> tuple[str | None, str, str | None]:
    """``--processes`` for a resumed or retried run: the flag when given, else what its run.json
    recorded (when the executor is the one it was recorded for); the name to blame for a bad value;
    and the line saying which was taken."""
    was = meta.get("processes")
    if was is None or str(meta.get("executor") or "local") != kind:
        return given, "--processes", None
    if given is None:
        return str(was), f"{run_file}: processes", f"{verb} with --processes {was}, as {run_file} records"
    same = given.strip().lower() == str(was).lower()
    return given, "--processes", f"{verb} with --processes {given}" + ("" if same else f" (given; {run_file} had {was})")


def recorded_run(out_dir: Path, *, required: bool) -> dict[str, Any]:
    """The run's own ``run.json`` (suite, executor, concurrency, options): what a resume or retry
    reuses unless an option is given again."""
    path = out_dir / "run.json"
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if required:
            settings = sorted(p.parent.name for p in out_dir.glob("*/run.json"))
            sweep_hint = f" (a sweep? give one setting's directory, e.g. {out_dir / settings[0]})" if settings else ""
            raise UsageError(
                f"{out_dir}: no run.json here: --retry-failed needs the --out directory of an earlier reverie run{sweep_hint}"
            ) from None
        return {}
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: cannot read the run's options: {exc}") from None
    return meta if isinstance(meta, dict) else {}


@dataclass(frozen=True)
class _Reused:
    """Each option given, else what run.json recorded, else the default."""

    model: str | None
    context_window: int | None
    price_in: float | None
    price_out: float | None
    latency: float
    jobs: int
    kind: str
    judge_model: str | None = None
    judge_base_url: str | None = None

    @classmethod
    def of(cls, meta: dict[str, Any], request: BatchRequest) -> _Reused:
        was = meta.get("options") or {}
        overrides = was.get("overrides") or {}
        return cls(
            judge_model=request.judge_model or was.get("judge_model"),
            judge_base_url=request.judge_base_url or was.get("judge_base_url"),
            model=request.model if request.model is not None else overrides.get("model"),
            context_window=request.context_window if request.context_window is not None else overrides.get("context_window"),
            price_in=request.price_in if request.price_in is not None else was.get("price_in"),
            price_out=request.price_out if request.price_out is not None else was.get("price_out"),
            latency=request.latency if request.latency is not None else float(was.get("latency") or 0.0),
            jobs=request.concurrency or int(meta.get("concurrency") or 1),
            kind=request.executor or str(meta.get("executor") or "local"),
        )


_ON_LIMIT = ("finish", "stop")


def _with_run_limits(options: RunOptions, meta: Mapping[str, Any], request: BatchRequest) -> RunOptions:
    """The run's limits: each given, else what the run recorded (a resume keeps its budget unless
    raised); a bad one is a one-line ``UsageError`` naming its flag."""
    was = (meta.get("options") or {}) if isinstance(meta.get("options"), dict) else {}
    limits = dict(was.get("run_limits") or {})
    for measure, value, flag in (("tokens", request.max_tokens, "--max-tokens"), ("cost", request.max_cost, "--max-cost"),
                                 ("seconds", request.max_seconds, "--max-seconds")):  # fmt: skip
        if value is None:
            continue
        if isinstance(value, bool) or not value > 0 or value == float("inf"):
            raise UsageError(f"{flag} {value}: must be a positive number (nothing was run)")
        limits[measure] = value
    chosen = request.on_limit or str(was.get("on_limit") or "finish")
    if chosen not in _ON_LIMIT:
        raise UsageError(f"--on-limit {chosen!r}: use finish (running tasks end) or stop (they are stopped)")
    return replace(options, run_limits=limits, on_limit=chosen)


def plan_run(request: BatchRequest) -> RunPlan:
    """Decide a run (see the module docstring). ``request.retry_failed`` is the run directory whose
    failed and errored tasks rerun in place; ``suite`` may then be None (the run's own). ``estimate``
    runs the plan on the embedded model into ``OUT/estimate`` (``batch/estimate.py``). ``max_*`` are
    the run's limits and ``on_limit`` what reaching one does (B1); each not given is the recorded run's."""
    suite, out, resume, retry_failed, estimate = (
        request.suite, request.out, request.resume, request.retry_failed, request.estimate
    )
    if estimate and (resume or retry_failed is not None):
        raise UsageError("--estimate plans a new run: drop --resume and --retry-failed")
    if retry_failed is not None and out is not None and out.resolve() != retry_failed.resolve():
        raise UsageError("--retry-failed reruns tasks in place: give the run directory once (drop --out)")
    out_dir = retry_failed or out
    meta = recorded_run(out_dir, required=retry_failed is not None) if out_dir is not None and (resume or retry_failed) else {}
    if suite is None:
        if not meta.get("suite"):
            raise UsageError("give the suite file (reverie run SUITE), or --retry-failed RUN_DIR")
        suite = Path(meta["suite"])
    all_tasks = load_tasks(suite)
    selected = _select(all_tasks, request.tasks, request.limit)
    if out_dir is None:
        out_dir = Path("runs") / suite.stem
        meta = recorded_run(out_dir, required=False) if resume else {}
    if estimate:
        out_dir = _estimate_dir(out_dir)
    reused = _Reused.of(meta, request)
    options = run_options(out_dir, reused.model, reused.context_window, reused.price_in, reused.price_out,
                          reused.latency, request.config_file, reused.judge_model, reused.judge_base_url)
    options = _with_run_limits(options, meta, request)
    if estimate:
        options = replace(options, estimate=True, judge_model=None, judge_base_url=None)
    given, blame, note = _resumed_processes(
        None if request.processes is None else str(request.processes), meta, out_dir / "run.json", reused.kind,
        "retrying" if retry_failed else "resuming",
    )
    spread = parse_processes(given, reused.kind, blame)
    recorded = read_results(out_dir / RESULTS_FILE)
    if recorded and not (resume or retry_failed):
        raise UsageError(
            f"{out_dir} already holds results of {len(recorded)} task(s): use --resume to finish that run, "
            "--retry-failed to rerun its failures, or choose another --out"
        )
    retry = tuple(t.id for t in selected) if retry_failed is not None else None
    again = retry_candidates(recorded, retry or [])
    # a retry keeps the whole run (its summary covers every task); --task/--limit narrow what reruns
    run_tasks = all_tasks if retry_failed is not None else selected
    todo = {t.id for t in selected if t.id not in recorded} | again if (resume or retry_failed) else {t.id for t in selected}
    return RunPlan(
        suite=suite, out_dir=out_dir, all_tasks=tuple(all_tasks), tasks=tuple(selected), run_tasks=tuple(run_tasks),
        options=options, executor=reused.kind, concurrency=reused.jobs, processes=spread, processes_given=given,
        resume=resume, retry=retry, todo=frozenset(todo), again=frozenset(again), notes=(note,) if note else (),
        kept=tuple(recorded[t.id] for t in run_tasks if t.id in recorded and t.id not in todo),
    )


def _recorded_sweep(out_dir: Path) -> tuple[list[SweepSetting], dict[str, Any], Path, dict[str, Any]]:
    """An earlier sweep's settings (``sweep.json``, in order), the run.json of its first setting
    that has one, with that file's path, and ``sweep.json`` itself (its epochs, override_pinned);
    empty when there is no earlier sweep in ``out_dir``."""
    path = out_dir / SWEEP_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        settings = [SweepSetting(str(s["label"]), dict(s.get("overrides") or {})) for s in raw["settings"]]
    except FileNotFoundError:
        return [], {}, out_dir, {}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{path}: cannot read the sweep's settings: {exc}") from None
    for setting in settings:
        meta = recorded_run(out_dir / setting.label, required=False)
        if meta:
            return settings, meta, out_dir / setting.label / "run.json", raw
    return settings, {}, out_dir, raw


def plan_sweep(request: BatchRequest) -> SweepPlan:
    """Decide a sweep: the settings of ``request.triggers`` (``"off"``, ``"step-count:4,8"``...; a
    refused one is named as ``triggers_name``), else (``resume``) what the sweep recorded; so too
    ``epochs`` and ``override_pinned`` (``sweep.json``) and the prices and judge (a setting's
    run.json). ``max_*``/``on_limit`` are the whole sweep's limits (docs/design.md L3), each not given
    what ``sweep.json`` recorded. ``tasks``/``limit`` select as ``plan_run``'s do. A sweep whose every selected task
    pins its own trigger is refused unless ``override_pinned``."""
    if request.suite is None:
        raise UsageError("give the suite file (reverie sweep SUITE)")
    suite, out, resume, estimate, epochs = request.suite, request.out, request.resume, request.estimate, request.epochs
    triggers_name, model = request.triggers_name, request.model
    try:
        settings = expand_triggers(request.triggers, name=triggers_name) if request.triggers else None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    selected = _select(load_tasks(suite), request.tasks, request.limit)
    out_dir = out or Path("runs") / f"{suite.stem}-sweep"
    if estimate:
        if resume:
            raise UsageError("--estimate plans a new sweep: drop --resume")
        out_dir = _estimate_dir(out_dir)
    recorded, meta, run_file, sweep_meta = _recorded_sweep(out_dir) if resume else ([], {}, out_dir, {})
    notes: list[str] = []
    if settings:
        chosen = list(settings)
    elif recorded:
        chosen = recorded
        notes.append(f"resuming the settings {out_dir / SWEEP_FILE} records: {', '.join(s.label for s in chosen)}")
    elif resume:
        raise UsageError(f"{out_dir}: no sweep.json here to resume: give the --out of an earlier sweep, or its --trigger settings")
    else:
        raise UsageError(f"give at least one reflection trigger to compare ({triggers_name}: {REFLECTION_TRIGGERS.allowed()})")
    if epochs is not None and epochs < 1:
        raise UsageError(f"--epochs {epochs}: run every task at least once per setting")
    rounds = epochs or int(sweep_meta.get("epochs") or 1)
    config_file = request.config_file
    if rounds > 1 and not load_settings(cli={"model": model} if model else None, path=config_file or config_path()).uses_endpoint:
        notes.append(
            f"--epochs {rounds}: the embedded model is deterministic, so every epoch repeats the same answers; "
            "they add no information (the paired comparison counts each question once)"
        )
    override = request.override_pinned or bool(sweep_meta.get("override_pinned"))
    reused = _Reused.of(meta, request)
    options = run_options(out_dir, reused.model, reused.context_window, reused.price_in, reused.price_out,
                          reused.latency, config_file, reused.judge_model, reused.judge_base_url)
    options = _with_run_limits(options, {"options": sweep_meta}, request)
    if estimate:
        options = replace(options, estimate=True, judge_model=None, judge_base_url=None)
    compared, pinned = split_pinned(selected, override)
    given, blame, note = _resumed_processes(
        None if request.processes is None else str(request.processes), meta, run_file, reused.kind, "resuming"
    )
    if note:
        notes.append(note)
    spread = parse_processes(given, reused.kind, blame)
    if not resume:
        for setting in chosen:
            if (out_dir / setting.label / RESULTS_FILE).exists():
                raise UsageError(f"{out_dir / setting.label} already holds results: use --resume, or choose another --out")
    kept: dict[str, tuple[TaskResult, ...]] = {}
    if resume:
        runnable = [t.id for t in epoch_tasks(compared, rounds)]
        for setting in chosen:
            done = read_results(out_dir / setting.label / RESULTS_FILE)
            kept[setting.label] = tuple(done[i] for i in runnable if i in done)
    return SweepPlan(
        suite=suite, out_dir=out_dir, tasks=tuple(selected), settings=tuple(chosen), options=options,
        executor=reused.kind, concurrency=reused.jobs, processes=spread, processes_given=given, resume=resume,
        notes=tuple(notes), epochs=rounds, override_pinned=override, pinned=pinned, per_setting=len(compared) * rounds,
        kept=kept,
        references=tuple(references(suite.read_text(encoding="utf-8"), source=str(suite))),
    )
