"""What a report shows, collected from the studies: runs, estimates, bands, factors, costs.

Everything is read through :mod:`threshold.search` (the only layer that opens a storage), and
nothing is written to it. A study's headline numbers are its stored estimate, as the search wrote
it after its last run; when that estimate is older than the completed runs (a run finished after
the last refresh) it is recomputed from them with the same maths. The posterior behind the
estimate is rebuilt from the runs to draw the curve's credible band and to derive reduction
factors against a baseline study (:func:`threshold.search.fit.reduction_factor`).

Search efficiency compares the compute a study used (its runs' steps and training seconds) with a
dense grid, the papers' method: ``GRID_SIZES`` log-spaced sizes over the d range the study
explored, ``GRID_SEEDS`` seeds each, every run trained for the full step budget. A grid run's
seconds come from a per-step cost ``a + b d^2`` fitted to the study's own runs (training seconds
over steps, which includes their evaluations), or, with runs at fewer than 2 sizes, from the
sampler's bench-measured cost model.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from scipy.optimize import nnls
from sqlalchemy.engine import make_url

from threshold.config import recipe_words
from threshold.errors import ConfigError, ThresholdError
from threshold.meta import git_commit, version
from threshold.search.bounds import LOCATING_RUNS, NONE, POINT, factor_bound, locate, sizes_only
from threshold.search.fit import (
    PLATEAU_GAP,
    reduction_factor,
    stray_mass,
    strays,
    transition_estimate,
    transition_posterior,
)
from threshold.search.headline import summary as summarize_scores
from threshold.search.notes import MIN_RUNS, curve_sizes
from threshold.search.posterior import (
    curve_quantiles,
    difference_distribution,
    weighted_quantiles,
)
from threshold.search.record import (
    Estimate,
    StudyView,
    read_studies,
    read_study,
    stop_status,
    study_names,
)
from threshold.search.sampler import policy_settings
from threshold.search.settings import COST_A, COST_B, STEP_S, SearchSettings
from threshold.search.spec import StudySettings
from threshold.search.study import open_storage, storage_url

__all__ = [
    "GRID_SEEDS",
    "GRID_SIZES",
    "Collected",
    "StudyData",
    "collect",
    "compare",
    "dense_grid",
    "factor",
    "judge",
    "label",
    "locate_transitions",
    "read_transfer",
    "recipe_of",
    "recipe_tags",
    "step_cost",
    "study_title",
    "where",
    "x80_marginal",
]

log = logging.getLogger(__name__)

GRID_SIZES = 16  # the dense grid of `threshold bench search`: 16 log-spaced sizes...
GRID_SEEDS = 3  # ...times 3 seeds, each at the full step budget
# The search's cost model (threshold.search.settings) in seconds per training step.
BENCH_STEP_S = (STEP_S * COST_A, STEP_S * COST_B)

X80_STEP = 0.01  # nats: the lattice of the x80 posteriors kept (reduction_factor's default)

Progress = Callable[[str, int, int], None]  # (stage, done, total)


@dataclass
class StudyData:
    """One study as the report shows it."""

    name: str
    settings: StudySettings
    attrs: dict  # the study's user attributes other than analyses (version, git commit, ...)
    status: str  # "ok", "too_few_runs" or "no_runs"
    status_text: str  # one sentence: why a study has no estimate, or how precise it is
    search_status: str  # where the search stands (stopped, searching, finishing)
    runs: list[dict]  # completed runs, trial order
    n_running: int
    n_failed: int
    estimate: dict | None  # the stored estimate (or one recomputed from the runs)
    estimate_source: str | None  # "stored" or "recomputed"
    policy: SearchSettings | None = None
    posterior: tuple | None = None  # (grid, weights) behind the estimate
    band: dict | None = None  # credible band of the mean curve: params, lo, median, hi
    x80: dict | None = None  # the posterior of ln x80 on a lattice (x80_marginal): for factors
    # As a results.json read back holds them: written again unchanged, not in today's terms.
    stored_settings: dict | None = None
    efficiency: dict = field(default_factory=dict)
    analyses: list[dict] = field(default_factory=list)
    warning: str = ""  # what makes the estimate doubtful (a plateau), or why there is none
    baseline: str | None = None  # the study this one is compared with: same testbed and modulus
    reduction: dict | None = None  # against its baseline; None without one
    reduction_note: str = ""  # why there is no factor, when there is a baseline
    # A study of another op on the baseline's testbed and modulus gets no reduction factor but the
    # same ratio under its own name: baseline 80% point / this one's, how much larger a model the
    # baseline's op needs (ADD against MAX: how much harder ADD is), not an effect of a mixture.
    size_ratio: dict | None = None
    label: str = ""  # short and unique among the report's studies, for legends and tables
    # The budget axis: the estimate at each checkpoint step every run kept (step, tokens,
    # params_p80, interval_params, asymptote, n_runs, x80), and its factors against the baseline's
    # at the same steps (step, tokens, and factor's keys).
    budget: list[dict] = field(default_factory=list)
    budget_reduction: list[dict] = field(default_factory=list)
    # Whether the runs locate the 80% point or only bound it (threshold.search.bounds.locate);
    # None without an estimate. Each budget entry carries its own under "transition".
    transition: dict | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_json(self) -> dict:
        s = self.settings
        return {
            "name": self.name,
            "label": self.label,
            "title": study_title(s),
            "status": self.status,
            "status_text": self.status_text,
            "warning": self.warning or None,
            "search_status": self.search_status,
            "settings": self.stored_settings
            or {
                "task": s.task.to_dict(),
                "train": s.train.to_dict(),
                "search": json.loads(s.to_attrs()["search"]),
                "pretrain": list(s.pretrain),
                "model": dict(s.model),
                "measured_op": s.task.measured_op,
            },
            "version": self.attrs.get("version"),
            "git_commit": self.attrs.get("git_commit"),
            "n_runs": len(self.runs),
            "n_running": self.n_running,
            "n_failed": self.n_failed,
            "estimate": self.estimate,
            "estimate_source": self.estimate_source,
            "transition": self.transition,
            "band": self.band,
            "x80": self.x80,
            "baseline": self.baseline,
            "reduction": self.reduction,
            "reduction_note": self.reduction_note or None,
            "size_ratio": self.size_ratio,
            "efficiency": self.efficiency,
            "budget": self.budget,
            "budget_reduction": self.budget_reduction,
            # Without where a report read back from its folder copies the figures from.
            "analyses": [{k: v for k, v in a.items() if k != "copy_from"} for a in self.analyses],
            "runs": self.runs,
        }


@dataclass
class Collected:
    storage: str  # the URL, password hidden
    studies: list[StudyData]
    baselines: list[str]  # study names; each study is compared with the one of its testbed
    transfer: list[dict]
    analysis_dir: str
    created: str = ""  # when the studies were read (a re-rendered report keeps the original's)
    version: str = ""  # threshold's version and commit that read them
    git_commit: str = ""


def study_title(settings: StudySettings, recipe: str | None = None) -> str:
    """``ADD in MAX+MED+ADD, mod 10``; ``ADD after MAX+MED, mod 10`` with pretraining; the recipe
    (``recipe``, default: its words, nothing for plain ``fast``), weights and exposure control in
    brackets."""
    task = settings.task
    measured = task.measured_op.upper()
    where = f"mod {task.n}" if task.testbed == "listops" else f"{task.testbed} S_{task.n}"
    mix = "" if tuple(task.ops) == (task.measured_op,) else f" in {'+'.join(task.ops).upper()}"
    before = f" after {'+'.join(settings.pretrain).upper()}" if settings.pretrain else ""
    extra = [recipe_words(settings.train, dict(settings.model)) if recipe is None else recipe]
    if task.weights is not None:
        pairs = zip(task.ops, task.weights, strict=True)
        extra.append("weights " + ",".join(f"{o}={w:g}" for o, w in pairs))
    if task.match_exposure:
        extra.append(f"{task.measured_op.upper()} nodes matched")
    words = "; ".join(e for e in extra if e)
    return f"{measured}{mix}{before}, {where}" + (f" ({words})" if words else "")


def recipe_of(settings: StudySettings) -> str:
    """The recipe in words: ``fast``, or ``fast + init_std 0.02, weight_decay 0.01``."""
    return recipe_words(settings.train, dict(settings.model)) or "fast"


def recipe_tags(studies: Sequence[StudyData]) -> dict[str, str]:
    """A short name for each recipe of the report (its words: :func:`recipe_of`), for labels.

    Recipes that are all named ones unchanged (``fast``, ``small``) keep their names, and a
    report of plain ``fast`` alone needs none; otherwise, several recipes are ``recipe A``,
    ``recipe B``, ... in the order of the studies, and a report of one recipe needs none. The
    report's recipe table gives each in full.
    """
    recipes = list(dict.fromkeys(recipe_of(s.settings) for s in studies))
    if all(" + " not in r for r in recipes):
        return {r: "" if recipes == ["fast"] else r for r in recipes}
    if len(recipes) == 1:
        return {recipes[0]: ""}
    return {r: f"recipe {chr(ord('A') + i)}" for i, r in enumerate(recipes)}


def label(studies: list[StudyData]) -> None:
    """Short labels for legends and tables: the study's title with its recipe's short name
    (:func:`recipe_tags`), and the name's hash where two studies share one."""
    tags = recipe_tags(studies)
    titles = [study_title(s.settings, tags[recipe_of(s.settings)]) for s in studies]
    for s, title in zip(studies, titles, strict=True):
        shared = titles.count(title) > 1
        s.label = f"{title} [{s.name.rsplit('-', 1)[-1]}]" if shared else title


def _public_url(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL sqlalchemy parses: show it as given
        return url


def _run_rows(view: StudyView) -> list[dict]:
    """The completed runs (with a size and a value): those the estimate is made from."""
    measure = view.settings.task.measured_op
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


def step_cost(ds, seconds, steps) -> tuple[float, float] | None:
    """(a, b) of seconds per step = a + b d^2, fitted to runs by least squares on relative
    error with a, b >= 0; None with runs at fewer than 2 sizes."""
    ds, seconds, steps = (np.asarray(v, dtype=float) for v in (ds, seconds, steps))
    ok = (steps > 0) & (seconds > 0)
    ds, per_step = ds[ok], seconds[ok] / steps[ok]  # (N,) each
    if np.unique(ds).size < 2:
        return None
    design = np.stack([np.ones_like(ds), ds**2], axis=1) / per_step[:, None]  # (N, 2)
    (a, b), _ = nnls(design, np.ones_like(ds))
    return float(a), float(b)


def dense_grid(d_range: Sequence[int], max_steps: int, cost: tuple[float, float]) -> dict:
    """The dense grid over d_range: its sizes, runs, steps and predicted training seconds."""
    lo, hi = d_range
    sizes = sorted({round(float(v)) for v in np.geomspace(lo, hi, GRID_SIZES)})
    a, b = cost
    per_run = [max_steps * (a + b * d * d) for d in sizes]
    return {
        "sizes": sizes,
        "seeds": GRID_SEEDS,
        "runs": len(sizes) * GRID_SEEDS,
        "steps_per_run": max_steps,
        "steps": len(sizes) * GRID_SEEDS * max_steps,
        "train_s": GRID_SEEDS * float(sum(per_run)),
    }


def _efficiency(runs: list[dict], settings: StudySettings, d_range, n_failed: int) -> dict:
    timed = [r for r in runs if r["train_s"] is not None and r["steps"]]
    used_s = float(sum(r["train_s"] for r in timed))
    used_steps = int(sum(r["steps"] for r in timed))
    with_cpu = [r["cpu_s"] for r in runs if r.get("cpu_s") is not None]
    fitted = step_cost(
        [r["d"] for r in timed], [r["train_s"] for r in timed], [r["steps"] for r in timed]
    )
    if fitted is not None:
        cost, source = fitted, "fitted to this study's runs"
    else:
        cost, source = BENCH_STEP_S, "the sampler's bench-measured cost model"
    grid = dense_grid(d_range, settings.train.max_steps, cost)
    return {
        "runs": len(runs),
        "failed": n_failed,
        "steps": used_steps,
        "train_s": round(used_s, 1),
        "cpu_s": round(float(sum(with_cpu)), 1),  # of the runs that recorded it (runs_with_cpu)
        "runs_with_cpu": len(with_cpu),
        "d_range": [int(d_range[0]), int(d_range[1])],
        "grid": grid,
        "cost_model": {"a_s": cost[0], "b_s": cost[1], "source": source},
        "share_runs": len(runs) / grid["runs"],
        "share_steps": used_steps / grid["steps"] if grid["steps"] else None,
        "share_s": used_s / grid["train_s"] if grid["train_s"] else None,
        "pretraining_excluded": bool(settings.pretrain),
    }


def _analyses(view: StudyView, runs: list[dict], analysis_dir: Path) -> list[dict]:
    """Stored analysis summaries, with the figures and scores `threshold analyze` left in
    ``analysis_dir/<study>-trial<N>/`` when they are there."""
    stored, name = view.analyses, view.name
    folders = {}
    if analysis_dir.is_dir():
        pattern = re.compile(re.escape(name) + r"-trial(\d+)$")
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
    if policy is not None and completed and estimate.get("n_runs") != len(completed):
        estimate, source = transition_estimate(policy, completed), "recomputed"
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
        data.posterior = transition_posterior(policy, completed)
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
    data.efficiency = _efficiency(runs, settings, d_range, view.n_failed)
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
        estimate = transition_estimate(policy, pairs)
        out.append(
            {
                "step": step,
                "tokens": tokens,
                "n_runs": len(pairs),
                "params_p80": estimate["params_p80"],
                "interval_params": estimate["interval_params"],
                "asymptote": estimate["asymptote"],
                "x80": x80_marginal(transition_posterior(policy, pairs)),
                "runs": [[int(d), round(float(a), 4)] for d, a in pairs],  # (d, accuracy) there
            }
        )
    return out


def judge(data: StudyData, n_completed: int) -> None:
    """Set a study's status, its one-sentence status text and its warning from its runs and
    estimate (with the study's stored data, or again when a report is re-rendered)."""
    estimate, runs = data.estimate, data.runs
    data.status, data.warning = "ok", ""
    if not runs:
        data.status, data.status_text = "no_runs", "no completed runs yet: nothing to fit"
    elif n_completed < MIN_RUNS or data.policy is None or not estimate.get("params_p80"):
        data.status = "too_few_runs"
        data.status_text = (
            f"too few runs to fit: {n_completed} completed, the estimate needs the "
            f"{MIN_RUNS} runs of the initial bracket"
        )
    if not data.ok:
        data.warning = data.status_text
        return
    ratio, precision = estimate["interval_ratio"], data.settings.search.precision
    data.status_text = f"90% interval {ratio:.2f}x wide" + (
        f", within the study's precision of {precision:g}x"
        if ratio <= precision
        else f", wider than the study's precision of {precision:g}x"
    )
    best = max((r["accuracy"] for r in runs if r["accuracy"] is not None), default=None)
    asymptote = estimate.get("asymptote")
    doubts = []
    if best is not None and asymptote is not None and best - asymptote > PLATEAU_GAP:
        doubts.append(
            f"its asymptote {asymptote:.2f} lies {best - asymptote:.2f} below its best run "
            f"({best:.3f}): the 80% point may mark a plateau, not the transition"
        )
    if strays(estimate):
        sd = max(sd for sd, _ in estimate["offset_sd_posterior"])
        doubts.append(
            f"its sizes stray from any smooth curve (P = {stray_mass(estimate):.2f} that the "
            f"runs at each size share a logit offset of sd {sd:g} from it): the interval is "
            "widened to match, and more seeds at the sizes run narrow it less than runs at new "
            "sizes"
        )
    data.warning = "; ".join(doubts)


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


def collect(
    url: str | None = None,
    names: Sequence[str] = (),
    baselines: Sequence[str] = (),
    transfer_files: Sequence[Path] = (),
    analysis_dir: Path = Path("studies/analysis"),
    on_progress: Progress | None = None,
) -> Collected:
    """Everything the report shows. ``names`` empty: every threshold study in the storage.

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
                f"storage {_public_url(storage_url(url))!r} has no threshold study: "
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
        storage=_public_url(storage_url(url)),
        studies=studies,
        baselines=baselines,
        transfer=transfer,
        analysis_dir=str(analysis_dir),
        created=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        version=version(),
        git_commit=git_commit(),
    )


def x80_marginal(posterior) -> dict:
    """The posterior of ln x80 (grid, weights) as ``results.json`` keeps it: its median and its
    masses on the lattice ``start + k step`` (0.01 nats from the grid's smallest x80, as
    :func:`reduction_factor` convolves them), empty ends cut. Factors from two of these equal those
    from the full posteriors (:func:`factor`), so a report read back from its file gives the same
    factors whatever the search's maths is by then.
    """
    grid, w = posterior
    values, probs = difference_distribution(grid.x80, w, [0.0], [1.0], step=X80_STEP)  # A - 0
    keep = np.flatnonzero(probs > 1e-12)
    lo, hi = int(keep[0]), int(keep[-1]) + 1
    return {
        "median": float(weighted_quantiles(grid.x80, w, [0.5])[0]),
        "start": float(values[lo]),
        "step": X80_STEP,
        "probs": [float(p) for p in probs[lo:hi]],
    }


def factor(base: dict, study: dict) -> dict:
    """:func:`reduction_factor` of two :func:`x80_marginal` s: baseline x80 / study's.

    ``factor`` is the ratio of the two stored medians; ``p_above_1`` counts half the mass of the
    lattice point at zero as the full posteriors' convolution does, that point found within half a
    step (cut ends shift the lattice by rounding, and an exact test would miss it).
    """

    def lattice(m: dict):
        values = m["start"] + m["step"] * np.arange(len(m["probs"]))  # (K,)
        return values, np.asarray(m["probs"], dtype=float)

    (a, pa), (b, pb) = lattice(base), lattice(study)
    out = reduction_factor((SimpleNamespace(x80=a), pa), (SimpleNamespace(x80=b), pb))
    values, probs = difference_distribution(a, pa, b, pb, step=X80_STEP)  # (K,) each
    zero = np.abs(values) < X80_STEP / 2
    above = float(probs[(values > 0) & ~zero].sum() + 0.5 * probs[zero].sum())
    return out | {"factor": float(np.exp(base["median"] - study["median"])), "p_above_1": above}


def where(s: StudyData) -> tuple[str, int]:
    """A study's testbed and modulus (degree for permutations): what a baseline must share."""
    return s.settings.task.testbed, s.settings.task.n


def compare(studies: list[StudyData], baselines: Sequence[str]) -> None:
    """Give each study the baseline of its testbed and modulus, and its factor against it.

    Of several baselines on one testbed and modulus, a study takes the one measuring its own op
    (else the first named). A study of the baseline's op gets a reduction factor (baseline 80%
    point / study's); one of another op the same ratio as a size ratio; a study with no baseline
    of its testbed and modulus gets neither, and no note.
    """
    by_name = {s.name: s for s in studies}
    bases = [by_name[name] for name in baselines]
    for s in studies:
        locate_transitions(s)
    for s in studies:
        s.baseline, s.reduction, s.size_ratio, s.reduction_note = None, None, None, ""
        if s.name in baselines:
            s.baseline = s.name
            continue
        mine = [b for b in bases if where(b) == where(s)]
        if not mine:
            continue
        same_op = [b for b in mine if _measured(b) == _measured(s)]
        same_recipe = [b for b in same_op if _recipe(b) == _recipe(s)]
        base = (same_recipe or same_op or mine)[0]
        s.baseline = base.name
        s.budget_reduction = []
        if same_op and not same_recipe:
            s.reduction_note = "none: the baseline trains with another recipe or budget"
        elif not base.ok:
            s.reduction_note = f"none: the baseline has {base.status.replace('_', ' ')}"
        elif not s.ok:
            s.reduction_note = f"none: {s.status.replace('_', ' ')}"
        elif s.settings.search.level != base.settings.search.level or (
            s.settings.search.chance_corrected != base.settings.search.chance_corrected
        ):
            s.reduction_note = "none: the two studies define the transition differently"
        else:
            # A factor neither side of which is located ("form" "none") is kept, as the record
            # of the posteriors' ratio, with a note; the pages give the note instead.
            ratio = factor(base.x80, s.x80) | _bounded(base, s)
            if _measured(s) != _measured(base):
                s.size_ratio = ratio
            else:
                s.reduction = ratio
                theirs = {b["step"]: b for b in base.budget}
                s.budget_reduction = [
                    {"step": b["step"], "tokens": b["tokens"]}
                    | factor(theirs[b["step"]]["x80"], b["x80"])
                    | _bounded(base, s, theirs[b["step"]], b)
                    for b in s.budget
                    if b["step"] in theirs
                ]


def _fitted(s: StudyData, budget: dict | None = None) -> dict:
    """The study's estimate, or its estimate at a budget checkpoint (that entry's point,
    interval and asymptote with the study's level and chance)."""
    if budget is None:
        return s.estimate
    keys = ("params_p80", "interval_params", "asymptote")
    return s.estimate | {k: budget[k] for k in keys}


def _bounded(base: StudyData, s: StudyData, base_at=None, s_at=None) -> dict:
    """``form`` and ``bound`` of a factor, from the two transitions (at a checkpoint when given):
    ``bound`` None for a point (:func:`threshold.search.bounds.factor_bound`)."""
    theirs = base.transition if base_at is None else base_at["transition"]
    mine = s.transition if s_at is None else s_at["transition"]
    out = factor_bound(theirs, _fitted(base, base_at), mine, _fitted(s, s_at))
    bound = out if out["form"] not in (POINT, NONE) else None
    note = unbounded_words(theirs, mine) if out["form"] == NONE else None
    return {"form": out["form"], "bound": bound} | ({"note": note} if note else {})


def unbounded_words(theirs: dict, mine: dict) -> str:
    """Why two transitions (the baseline's, a study's) give no factor, not even a bound."""
    kinds = {theirs["kind"], mine["kind"]}
    if kinds == {"lower bound"}:
        return "neither transition is located: both lie above the sizes run"
    if kinds == {"upper bound"}:
        return "neither transition is located: both lie below the sizes run"
    sides = (("the baseline's", theirs), ("this study's", mine))
    names = [w for w, t in sides if t["kind"] == NONE]
    who = " and ".join(names)
    if not all(t["checked"] for t in (theirs, mine) if t["kind"] == NONE):
        points = "80% points lie" if len(names) > 1 else "80% point lies"
        return (
            f"{who} {points} where fewer than {LOCATING_RUNS} runs are on a side, and this "
            "results.json keeps no accuracies at checkpoints to bound them"
        )
    return f"{who} runs neither locate nor bound the 80% point"


def locate_transitions(s: StudyData) -> None:
    """Set ``s.transition`` and each budget entry's ``transition`` (:func:`locate`): from the
    runs' accuracies, or at a checkpoint an older results.json kept none for, from the final
    runs when it is the budget's end, else from the sizes alone (:func:`sizes_only`)."""
    if not s.ok:
        s.transition = None
        return
    runs = [
        (r["d"], r["params"], r["accuracy"])
        for r in s.runs
        if r["params"] is not None and r["accuracy"] is not None
    ]
    s.transition = locate(runs, s.estimate)
    params_of = {r[0]: r[1] for r in runs}
    for b in s.budget:
        est = _fitted(s, b)
        if "runs" in b:
            at = [(d, params_of[d], a) for d, a in b["runs"] if d in params_of]
            b["transition"] = locate(at, est)
        elif b["step"] == s.settings.train.max_steps:
            b["transition"] = locate(runs, est)
        else:
            b["transition"] = sizes_only([p for _, p, _ in runs], est)


def _measured(s: StudyData) -> str:
    return s.settings.task.measured_op


def _recipe(s: StudyData) -> tuple:
    """What a study's runs train with: its training settings and model side, seed aside."""
    return s.settings.train.to_dict(), s.settings.model
