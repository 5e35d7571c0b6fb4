"""Running a suite: its studies, then transfer experiments, analyses and reports.

Each study is created (or found again: its name is derived from its settings) and searched
(:mod:`threshold.suite.studies`): by default all at once, by workers that train the runnable trials
of every study in shared packs; one after the other, each as ``threshold find`` does it, on
request. A study whose policy has stopped is
skipped without starting a worker, so running a suite again continues where it was interrupted:
finished studies are skipped, a half-done study gets its remaining runs, and interrupted runs
(marked failed when their worker was stopped, or found stale by heartbeat) are retried by the
workers. Transfer experiments write one JSON file each, named by a hash of their settings, and
are skipped when it exists; an analysis is skipped when its trial's summary is stored on the
study and its folder has ``scores.json``. The reports are written again on every run, from the
storage, into ``<reports>/<name>/``; ``<reports>/suite.json`` records the suite file (its path,
text hash and a copy beside it), the git commit and what each step did.

Progress goes to a callback as :class:`Event` records; nothing here prints. Interrupting
(KeyboardInterrupt, which ``threshold run`` also raises on SIGTERM) stops the workers the way
``find`` does: their running trials are marked failed, never left running. This module loads the
training, analysis and report layers at import; what a run would do, read without writing (the
dry run), is :mod:`threshold.suite.plan`, which loads none of them.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from threshold.analysis import ANALYSIS_DIR, analysis_folder
from threshold.analysis.studies import (
    SURVEY_FORMAT,
    analyze_trial,
    matched_pair,
    survey,
    survey_trials,
)
from threshold.analysis.transfer import summarize, transfer_experiment
from threshold.config import pretrain_task, transfer_model_config
from threshold.errors import ThresholdError
from threshold.files import atomic_write
from threshold.meta import version
from threshold.model import param_count
from threshold.report import collect
from threshold.report.suite import suite_readme
from threshold.report.write import write_report
from threshold.search.record import read_study, study_names
from threshold.search.results import load_analyses, pick_trial
from threshold.search.study import open_storage
from threshold.suite.plan import (
    SUITE_JSON,
    SURVEY_DIR,
    check_reports_folder,
    public_url,
    transfer_file,
)
from threshold.suite.spec import ALL_REPORT, Analysis, Suite, TransferSpec
from threshold.suite.studies import Event, SuiteRunError, make_studies, run_studies
from threshold.train import TrainConfig
from threshold.train.device import resolve_device

__all__ = ["Event", "SuiteRunError", "git_state", "make_suite_studies", "run_suite"]

FORMAT = "threshold-suite/1"


def run_suite(
    suite: Suite,
    only: list[str] | None = None,
    analyze: bool = True,
    on_event: Callable[[Event], None] | None = None,
    poll_s: float = 2.0,
    shared: bool = True,
) -> dict:
    """Run the suite (or the studies and transfers labelled ``only``); returns its record.

    ``suite.execution`` (the file's keys, with the command line's options applied) says where
    the studies live and how their workers and the transfer experiments train. ``analyze``
    False skips the analyses (they are recorded as skipped). ``shared``: the studies' trials
    train together in shared workers (:mod:`threshold.search.shared`); False: one study after
    the other, each with workers of its own (each study's runs are the same either way).
    """
    selected = suite.select(only)
    execution = suite.execution
    check_reports_folder(suite)  # before hours of training, not after
    url = execution.storage_url
    emit = on_event or (lambda event: None)
    started, t0 = datetime.now(UTC), time.perf_counter()
    db = open_storage(url, execution.heartbeat_s, other_tables=execution.other_tables)
    cache_dir = execution.cache_dir
    record: dict = {"studies": [], "transfers": [], "analyses": []}
    record["studies"] = run_studies(selected.studies, db, execution, emit, poll_s, shared)
    for spec in selected.transfers:
        record["transfers"].append(_run_transfer(suite, spec, cache_dir, emit, execution.device))
    record["analyses"] = _run_analyses(selected, db, url, analyze, emit, cache_dir)
    record["surveys"] = _run_surveys(selected, db, url, analyze, emit, cache_dir)
    record["reports"] = _write_reports(suite, db, url, emit)
    record |= {
        "only": list(only) if only is not None else None,
        "started": started.strftime("%Y-%m-%d %H:%M:%S UTC"),
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    return _write_record(suite, url, record)


def make_suite_studies(suite: Suite, only: list[str] | None = None) -> list[dict]:
    """The suite's studies (those labelled ``only``) created in its storage, or found again, and
    nothing run: no training, transfer, analysis or report (``threshold run --workers 0``, for
    workers started elsewhere). Each study's row as the dry run gives it, in order."""
    execution = suite.execution
    url, beat = execution.storage_url, execution.heartbeat_s
    db = open_storage(url, beat, other_tables=execution.other_tables)
    return [state.to_json() for state in make_studies(list(suite.select(only).studies), db)]


# Transfer experiments ------------------------------------------------------------------------


def _run_transfer(suite: Suite, spec: TransferSpec, cache_dir, emit, device) -> dict:
    path = transfer_file(suite, spec)
    row = {"label": spec.label, "file": str(path)}
    if path.is_file():
        emit(Event("transfer_skip", spec.label, {"file": str(path)}))
        return row | {"ran": False}
    emit(Event("transfer_start", spec.label, {"d": spec.d, "seeds": list(spec.seeds)}))
    t0 = time.perf_counter()

    def phase(name: str, seed: int, progress) -> None:
        if progress is None:  # a phase begins
            emit(Event("transfer_phase", spec.label, {"phase": name, "seed": seed}))

    runs = transfer_experiment(
        spec.pretrain,
        spec.task,
        spec.d,
        list(spec.seeds),
        TrainConfig(max_steps=spec.steps),
        TrainConfig(max_steps=spec.pretrain_steps),
        cache_dir,
        on_event=phase,
        device=resolve_device(device),
    )
    model_cfg = transfer_model_config(pretrain_task(spec.task, spec.pretrain), spec.task, spec.d)
    result = {  # what `threshold transfer --json` prints, plus the suite's settings
        "pretrain": list(spec.pretrain),
        "tasks": list(spec.task.ops),
        "mod": spec.task.n,
        "testbed": spec.task.testbed,
        "d_model": spec.d,
        "params_total": param_count(model_cfg)["total"],
        **summarize(runs, spec.task.measured_op),
        "settings": {
            "task": spec.task.to_dict(),
            "steps": spec.steps,
            "pretrain_steps": spec.pretrain_steps,
            "suite": suite.name,
        },
    }
    _write_atomic(path, json.dumps(result, indent=1))
    emit(
        Event(
            "transfer_end",
            spec.label,
            {
                "file": str(path),
                "transfer_mean": result["transfer_mean"],
                "scratch_mean": result["scratch_mean"],
                "wall_s": round(time.perf_counter() - t0, 1),
            },
        )
    )
    return row | {"ran": True}


# Analyses ------------------------------------------------------------------------------------


def _run_analyses(
    suite: Suite, db, url: str, analyze: bool, emit, cache_dir: Path | None
) -> list[dict]:
    known = set(study_names(db))
    jobs: list = [(a.study, a.pick if a.d is None else f"d = {a.d}", a) for a in suite.analyses]
    jobs += [(" vs ".join(c.studies), f"matched by {c.match}", c) for c in suite.comparisons]
    out = []
    for label, how, job in jobs:
        labels = [job.study] if isinstance(job, Analysis) else list(job.studies)
        row = {"studies": labels, "how": how}
        missing = [lb for lb in labels if suite.study(lb).name not in known]
        if not analyze or missing:
            why = "analyses not asked for" if not analyze else f"no study yet for {missing[0]!r}"
            emit(Event("analysis_failed", label, {"how": how, "error": why}))
            out.append(row | {"status": "skipped", "error": why})
            continue
        try:
            studies = [read_study(db, suite.study(lb).name) for lb in labels]
            if isinstance(job, Analysis):
                numbers = [pick_trial(studies[0], job.pick, job.d)]
            else:
                numbers = list(matched_pair(studies[0], studies[1], job.match, job.d))
            trials = []
            for lb, study, number in zip(labels, studies, numbers, strict=True):
                folder = analysis_folder(study.name, number)
                done = number in load_analyses(study) and (folder / "scores.json").is_file()
                trials.append(
                    {"study": lb, "trial": number, "folder": str(folder), "ran": not done}
                )
                if done:
                    emit(Event("analysis_skip", lb, {"trial": number, "how": how}))
                    continue
                emit(Event("analysis_start", lb, {"trial": number, "how": how}))
                analyze_trial(study, number, url, folder, cache_dir=cache_dir)
                emit(Event("analysis_end", lb, {"trial": number, "folder": str(folder)}))
            out.append(row | {"status": "done", "trials": trials})
        except ThresholdError as e:  # e.g. a study with no fitted transition yet
            emit(Event("analysis_failed", label, {"how": how, "error": str(e)}))
            out.append(row | {"status": "failed", "error": str(e)})
    return out


def _run_surveys(
    suite: Suite, db, url: str, analyze: bool, emit, cache_dir: Path | None
) -> list[dict]:
    """Every ``[[survey]]``: all learned runs of a study scored, each written to
    ``<reports>/surveys/LABEL.json``; kept when that file already scores the same runs (the scores
    are deterministic), redone when the study has new runs."""
    known = set(study_names(db))
    out = []
    for spec in suite.surveys:
        name = suite.study(spec.study).name
        row = {"study": spec.study, "min_accuracy": spec.min_accuracy}
        if not analyze or name not in known:
            why = "analyses not asked for" if not analyze else f"no study yet for {spec.study!r}"
            emit(Event("survey_failed", spec.study, {"error": why}))
            out.append(row | {"status": "skipped", "error": why})
            continue
        study = read_study(db, name)
        path = suite.reports_dir / SURVEY_DIR / f"{spec.study}.json"
        wanted = [t.number for t in survey_trials(study, spec.min_accuracy)]
        try:
            kept = json.loads(path.read_text())
            same = (kept["format"], kept["min_accuracy"], [r["trial"] for r in kept["runs"]])
            result = kept if same == (SURVEY_FORMAT, spec.min_accuracy, wanted) else None
        except (OSError, ValueError, KeyError, TypeError):
            result = None
        ran = result is None
        if ran:
            try:
                result = survey(study, url, spec.min_accuracy, cache_dir=cache_dir)
            except ThresholdError as e:  # e.g. a run whose checkpoint is missing
                emit(Event("survey_failed", spec.study, {"error": str(e)}))
                out.append(row | {"status": "failed", "error": str(e)})
                continue
            _write_atomic(path, json.dumps(result, indent=1))
        info = {"runs": len(result["runs"]), "file": str(path), "ran": ran}
        emit(Event("survey", spec.study, info))
        out.append(row | {"status": "done", **info, "summary": result["summary"]})
    return out


# Reports -------------------------------------------------------------------------------------


def _report_baselines(suite: Suite, spec) -> list[str]:
    """The baselines (labels) of a report: its own; the report of every study takes the suite's
    and those of the [[report]]s, the first of each testbed and modulus, so each study there is
    compared with the baseline of its own (ADD mod 6 studies with ADD mod 6)."""
    if spec.name != ALL_REPORT:
        return [spec.baseline] if spec.baseline else []
    chosen, seen = [], set()
    for label in [spec.baseline, *(r.baseline for r in suite.reports)]:
        if label is None:
            continue
        task = suite.study(label).settings.task
        if (task.testbed, task.n) not in seen:
            seen.add((task.testbed, task.n))
            chosen.append(label)
    return chosen


def _write_reports(suite: Suite, db, url: str, emit) -> list[dict]:
    """Every report of the suite, by :mod:`threshold.report` (the one call site of it here)."""
    known = set(study_names(db))
    transfers = {t.label: transfer_file(suite, t) for t in suite.transfers}
    out = []
    for spec in suite.reports:
        names = [suite.study(lb).name for lb in spec.studies if suite.study(lb).name in known]
        folder = suite.reports_dir / spec.name
        row = {"name": spec.name, "folder": str(folder), "studies": names}
        if not names:
            out.append(row | {"status": "skipped: none of its studies exists yet"})
            continue
        labels = [lb for lb in _report_baselines(suite, spec) if suite.study(lb).name in known]
        baselines = [suite.study(lb).name for lb in labels]
        files = [transfers[lb] for lb in spec.transfers if transfers[lb].is_file()]
        collected = collect(url, names, baselines, files, ANALYSIS_DIR)
        results = write_report(collected, folder, force=True)
        by_name = {suite.study(lb).name: lb for lb in (*spec.studies, *labels)}
        rows = [r | {"suite_label": by_name.get(r["name"])} for r in results["comparison"]]
        out.append(
            row
            | {
                "status": "written",
                "baseline": baselines[0] if baselines else None,
                "baseline_label": labels[0] if labels else None,
                "baselines": baselines,
                "comparison": rows,
                "transfers": [str(f) for f in files],
            }
        )
        emit(Event("report", spec.name, {"folder": str(folder), "baselines": baselines}))
    return out


def _write_record(suite: Suite, url: str, record: dict) -> dict:
    """``suite.json`` (what ran, from which file and commit), ``suite.toml`` and a README."""
    commit, dirty = git_state(Path(__file__).resolve().parent, ignore=suite.reports_dir)
    record = {
        "format": FORMAT,
        "name": suite.name,
        "suite": str(suite.path),
        "suite_sha256": hashlib.sha256(suite.source.encode()).hexdigest(),
        "git_commit": commit,
        "git_dirty": dirty,
        "version": version(),
        "storage": public_url(url),
        "finished": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        **record,
    }
    out = suite.reports_dir
    out.mkdir(parents=True, exist_ok=True)
    _write_atomic(out / "suite.toml", suite.source)
    _write_atomic(out / "README.md", suite_readme(record))
    _write_atomic(out / SUITE_JSON, json.dumps(record, indent=1))
    return record


def _write_atomic(path: Path, text: str) -> None:
    with atomic_write(path, text=True) as f:
        f.write(text)


def git_state(where: Path, ignore: Path | None = None) -> tuple[str, bool]:
    """The commit of the git checkout holding ``where``, and whether its tracked files differ from
    it. Files under ``ignore`` (the suite's own reports folder, which may be committed) don't count.
    """

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=where, capture_output=True, text=True, timeout=10)

    try:
        head, top = git("rev-parse", "HEAD"), git("rev-parse", "--show-toplevel")
        if head.returncode != 0 or top.returncode != 0:
            return "unknown", False
        changed = git("status", "--porcelain", "--untracked-files=no").stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown", False
    root = Path(top.stdout.strip())
    skip = Path(ignore).resolve() if ignore is not None else None
    # Porcelain lines are "XY path" (or "XY old -> new"), paths relative to the checkout's top.
    paths = [(root / line[3:].split(" -> ")[-1].strip('"')).resolve() for line in changed]
    return head.stdout.strip(), any(skip is None or not p.is_relative_to(skip) for p in paths)
