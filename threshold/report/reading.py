"""Collect a report's studies from a storage: runs, estimates, bands, analyses, budget, and the
transfer files beside them.

Everything is read through :mod:`threshold.search` (the only layer that opens a storage), and
nothing is written to it. A study's headline numbers are its stored estimate, as the search wrote
it after its last run; when that estimate is older than the completed runs (a run finished after
the last refresh) it is recomputed from them with the same maths. The posterior behind the
estimate is rebuilt from the runs to draw the curve's credible band and to derive reduction
factors against a baseline study (:mod:`threshold.report.factors`).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from sqlalchemy.engine import make_url

from threshold.analysis import ANALYSIS_DIR, folder_name
from threshold.analysis.headline import summary as summarize_scores
from threshold.errors import ConfigError, ThresholdError
from threshold.meta import git_commit, version
from threshold.report.data import Collected, Progress, StudyData, judge, label
from threshold.report.efficiency import efficiency
from threshold.report.factors import compare, x80_marginal
from threshold.search.fit import transition_posterior, transition_reading
from threshold.search.notes import MIN_RUNS, curve_sizes
from threshold.search.objective import ObjectiveSettings
from threshold.search.posterior import curve_quantiles
from threshold.search.record import (
    Estimate,
    StudyView,
    read_studies,
    read_study,
    stop_status,
    study_names,
)
from threshold.search.sampler import policy_settings
from threshold.search.settings import SearchSettings
from threshold.search.study import open_storage

__all__ = ["collect", "read_transfer"]

log = logging.getLogger(__name__)


def collect(
    url: str,
    names: Sequence[str] = (),
    baselines: Sequence[str] = (),
    transfer_files: Sequence[Path] = (),
    analysis_dir: Path = ANALYSIS_DIR,
    on_progress: Progress | None = None,
) -> Collected:
    """Everything the report shows, read from the storage at ``url`` (resolved: the command
    passes :func:`threshold.config.resolve_storage`'s URL). ``names`` empty: every threshold study
    in it.

    The baselines are added to the studies when not named; every other study with a fit gets its
    reduction factor against the baseline of its testbed and modulus (:func:`compare`). Unknown
    studies, an unknown baseline and unreadable transfer files raise :class:`ThresholdError`.
    """

    transfer = [read_transfer(p) for p in transfer_files]  # bad files fail before slow work
    storage = open_storage(url, create=False)
    known = study_names(storage)
    baselines = list(dict.fromkeys(baselines))
    for baseline in baselines:
        if baseline not in known:
            listed = ", ".join(known[:5]) or "none"
            raise ThresholdError(
                f"baseline study {baseline!r} is not in this storage (studies: {listed}): "
                "name one of them with --baseline"
            )
    if names:
        wanted = list(dict.fromkeys(names))
    else:
        wanted = [view.name for view in read_studies(storage)]
        if not wanted:
            raise ThresholdError(
                f"storage {_public_url(url)!r} has no threshold study: "
                "run `threshold find` first, or give --storage"
            )
    # The baselines first, each the first row of its group.
    wanted = [*baselines, *(name for name in wanted if name not in baselines)]
    loaded = [read_study(storage, name) for name in wanted]  # unknown names fail here, fast
    studies = []
    for i, view in enumerate(loaded):
        if on_progress is not None:
            on_progress("reading studies", i, len(loaded))
        studies.append(_study_data(view, Path(analysis_dir)))
    if on_progress is not None:
        on_progress("reading studies", len(loaded), len(loaded))
    compare(studies, baselines)
    label(studies)
    return Collected(
        storage=_public_url(url),
        studies=studies,
        baselines=baselines,
        transfer=transfer,
        analysis_dir=str(analysis_dir),
        created=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        version=version(),
        git_commit=git_commit(),
    )


def read_transfer(path: Path) -> dict:
    """One ``threshold transfer --json`` output, checked; ThresholdError when unreadable."""
    path = Path(path)
    try:
        report = json.loads(path.read_text())
        curves = [
            {
                "seed": int(run["seed"]),
                "transfer": [[int(s), float(a)] for s, a in run["transfer_curve"]],
                "scratch": [[int(s), float(a)] for s, a in run["scratch_curve"]],
            }
            for run in report["runs"]
        ]
        out = {
            "file": str(path),
            "pretrain": list(report["pretrain"]),
            "tasks": list(report["tasks"]),
            "mod": report.get("mod"),
            "testbed": report.get("testbed", "listops"),
            "d_model": int(report["d_model"]),
            "params_total": report.get("params_total"),
            "measure": report["measure"],
            "seeds": [int(s) for s in report["seeds"]],
            "transfer": [float(v) for v in report["transfer"]],
            "scratch": [float(v) for v in report["scratch"]],
            "transfer_mean": float(report["transfer_mean"]),
            "scratch_mean": float(report["scratch_mean"]),
            "gain_mean": float(report["gain_mean"]),
            "curves": curves,
        }
    except OSError as e:
        raise ConfigError(
            f"transfer file {str(path)!r} cannot be read ({e.strerror or e}): "
            "give a file that `threshold transfer --json` wrote"
        ) from None
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        what = f"no {e}" if isinstance(e, KeyError) else str(e).splitlines()[0]
        raise ConfigError(
            f"transfer file {str(path)!r} is not `threshold transfer --json` output ({what}): "
            "give the JSON that command prints"
        ) from None
    if len(out["seeds"]) != len(out["transfer"]) or len(out["seeds"]) != len(out["scratch"]):
        raise ConfigError(
            f"transfer file {str(path)!r} has {len(out['seeds'])} seeds but "
            f"{len(out['transfer'])} and {len(out['scratch'])} accuracies: give an unedited file"
        )
    return out


def _public_url(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL sqlalchemy parses: show it as given
        return url


def _run_rows(view: StudyView) -> list[dict]:
    """The completed runs (with a size and a value): those the estimate is made from."""
    task = getattr(view.settings, "task", None)  # an objective's study has none
    measure = task.measured_op if task is not None else None
    return [
        {
            "trial": r.number,
            "d": r.d_model,
            "params": r.params_total,
            "accuracy": r.value,
            "accuracy_ops": r.accuracy,
            "strict": r.strict_accuracy.get(measure),
            "seed": r.seed,
            "steps": r.steps,
            "train_s": r.train_s,
            "cpu_s": r.cpu_s,
            "stop_reason": r.stop_reason,
        }
        for r in view.completed
    ]


def _analyses(view: StudyView, runs: list[dict], analysis_dir: Path) -> list[dict]:
    """Stored analysis summaries, with the figures and scores `threshold analyze` left in
    ``analysis_dir/<study>-trial<N>/`` when they are there."""
    stored, name = view.analyses, view.name
    folders = {}
    if analysis_dir.is_dir():
        pattern = re.compile(re.escape(folder_name(name, 0)[: -len("0")]) + r"(\d+)$")
        for folder in analysis_dir.iterdir():
            match = pattern.match(folder.name)
            if match and folder.is_dir():
                folders[int(match.group(1))] = folder
    by_trial = {r["trial"]: r for r in runs}
    out = []
    for number in sorted(set(stored) | set(folders)):
        folder = folders.get(number)
        summary = stored.get(number)
        scores = None
        if folder is not None and (folder / "scores.json").is_file():
            try:
                scores = json.loads((folder / "scores.json").read_text())
            except ValueError:
                log.warning("%s: unreadable scores.json, left out", folder)
        if summary is None and scores is not None:
            try:
                summary = summarize_scores(scores) | {"d_model": scores.get("d_model")}
            except (KeyError, TypeError):
                log.warning("%s: scores.json lacks the analysis scores, left out", folder)
                continue
        if summary is None:
            continue
        figures = {}
        if folder is not None:
            for kind in ("embedding", "layer_usage", "ablation"):
                if (folder / f"{kind}.png").is_file():
                    figures[kind] = str(folder / f"{kind}.png")
        run = by_trial.get(number, {})
        out.append(
            {
                "trial": number,
                "d_model": summary.get("d_model", run.get("d")),
                "params": run.get("params"),
                "accuracy": summary.get("accuracy", run.get("accuracy")),
                "summary": summary,
                "embedding": (scores or {}).get("embedding"),
                "layer_usage": (scores or {}).get("layer_usage"),
                "folder": str(folder) if folder is not None else None,
                "figures": figures,
            }
        )
    return out


def _study_data(view: StudyView, analysis_dir: Path) -> StudyData:
    settings = view.settings
    completed, _ = view.split()
    runs = _run_rows(view)
    estimate = view.estimate.to_dict() if view.estimate is not None else None
    policy = None
    if estimate is not None and view.chance is not None:
        policy = policy_settings(settings, view.chance)
    source = "stored" if estimate is not None else None
    search_status = view.stop.text
    posterior = None  # read with the estimate where that is recomputed, else when judged sound
    if policy is not None and completed and estimate.get("n_runs") != len(completed):
        (estimate, posterior), source = transition_reading(policy, completed), "recomputed"
        search_status = stop_status(settings, Estimate.from_dict(estimate), view.runs).text
    data = StudyData(
        name=view.name,
        settings=settings,
        attrs=view.attrs,
        status="ok",
        status_text="",
        search_status=search_status,
        runs=runs,
        n_running=view.n_running,
        n_failed=view.n_failed,
        estimate=estimate,
        estimate_source=source,
        policy=policy,
    )
    judge(data, len(completed))
    if data.ok:
        if posterior is None:
            posterior = transition_posterior(policy, completed)
        data.posterior = posterior
        data.x80 = x80_marginal(data.posterior)
        params = np.array([r["params"] for r in runs if r["params"]], dtype=float)
        xs = curve_sizes(params, *estimate["interval_params"])  # (P,)
        lo, median, hi = curve_quantiles(*data.posterior, np.log(xs))  # (P,) each
        data.band = {
            "params": [round(float(v), 1) for v in xs],
            "lo": [round(float(v), 4) for v in lo],
            "median": [round(float(v), 4) for v in median],
            "hi": [round(float(v), 4) for v in hi],
            "mass": 0.9,
        }
    d_range = (estimate or {}).get("range_d") or [
        min([settings.search.d_lo, *[r["d"] for r in runs]]),
        max([settings.search.d_hi, *[r["d"] for r in runs]]),
    ]
    if not isinstance(settings, ObjectiveSettings):  # an objective's cost is the user's own
        data.efficiency = efficiency(runs, settings, d_range, view.n_failed)
    data.analyses = _analyses(view, runs, analysis_dir)
    if data.ok:
        data.budget = _budget(view, policy)
    return data


def _budget(view: StudyView, policy: SearchSettings) -> list[dict]:
    """The study's estimate at each of its checkpoint steps, from the same runs."""
    out = []
    for step, tokens, pairs in view.at_checkpoints():
        if len(pairs) < MIN_RUNS:
            continue
        estimate, posterior = transition_reading(policy, pairs)
        out.append(
            {
                "step": step,
                "tokens": tokens,
                "n_runs": len(pairs),
                "params_p80": estimate["params_p80"],
                "interval_params": estimate["interval_params"],
                "asymptote": estimate["asymptote"],
                "x80": x80_marginal(posterior),
                "runs": [[int(d), round(float(a), 4)] for d, a in pairs],  # (d, accuracy) there
            }
        )
    return out
