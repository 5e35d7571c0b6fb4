"""A report's ``results.json`` read back: the studies it shows, with no storage at hand.

A report folder keeps every study's settings, runs, stored estimate, credible band, efficiency and
analyses in ``results.json``, so it can be rendered again (a new layout, other baselines) where
the storage is gone, as for the committed ``reports/cpu/``. What the storage alone knew is rebuilt
from the runs with the search's own maths: the size table from the settings and the chance rate
stored with the estimate (:func:`threshold.search.sampler.policy_settings`), and the posterior
behind the estimate from the completed runs (:func:`threshold.search.fit.transition_posterior`),
which gives the reduction factors against any baseline in the file. Both formats are read: 1
(before the view model) and 2.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from threshold.errors import ConfigError, ThresholdError
from threshold.report.data import Collected, StudyData, judge, label
from threshold.report.factors import compare, x80_marginal
from threshold.search.fit import transition_posterior
from threshold.search.objective import OBJECTIVE_ATTR, ObjectiveSettings
from threshold.search.sampler import policy_settings
from threshold.search.spec import StudySettings

__all__ = ["FORMAT", "FORMATS", "RESULTS", "load_results", "read_results"]

RESULTS = "results.json"
FORMAT = "threshold-report/2"
FORMATS = ("threshold-report/1", FORMAT)
MATCH = 0.005  # a rebuilt posterior's median x80 within this of the stored one (4 digits kept)


def _settings(entry: dict) -> StudySettings | ObjectiveSettings:
    st = entry["settings"]
    if OBJECTIVE_ATTR in st:  # an objective's study: its attributes as stored
        return ObjectiveSettings.from_attrs({k: json.dumps(v) for k, v in st.items()})
    return StudySettings.from_attrs(
        {
            "task": json.dumps(st["task"]),
            "train": json.dumps(st["train"]),
            "search": json.dumps(st["search"]),
            "pretrain": json.dumps(st.get("pretrain", [])),
            "model": json.dumps(st.get("model", {})),  # the recipe's model side
        }
    )


def _study(entry: dict, folder: Path, commit: str) -> StudyData:
    settings = _settings(entry)
    estimate = entry["estimate"]
    policy = None
    if estimate is not None and estimate.get("chance") is not None:
        policy = policy_settings(settings, float(estimate["chance"]))
    analyses = []
    for a in entry.get("analyses", []):
        # The figures this report copied beside its pages: the source of the next copy.
        shown = a.get("report_figures") or {}
        copy_from = {kind: str(folder / name) for kind, name in shown.items()}
        rest = {k: v for k, v in a.items() if k != "report_figures"}
        analyses.append(rest | {"copy_from": copy_from})
    data = StudyData(
        name=entry["name"],
        settings=settings,
        attrs={"version": entry.get("version"), "git_commit": entry.get("git_commit")},
        status=entry["status"],
        status_text=entry["status_text"],
        search_status=entry["search_status"],
        runs=entry["runs"],
        n_running=entry["n_running"],
        n_failed=entry["n_failed"],
        estimate=estimate,
        estimate_source=entry["estimate_source"],
        policy=policy,
        band=entry["band"],
        efficiency=entry["efficiency"],
        analyses=analyses,
        stored_settings=entry["settings"],
        budget=entry.get("budget", []),
    )
    judge(data, len(data.runs))
    if data.ok:
        data.x80 = entry.get("x80") or _rebuilt_x80(data, commit)
    return data


def _rebuilt_x80(data: StudyData, commit: str) -> dict:
    """A format-1 file keeps no posterior: rebuild it from the runs, and refuse one that no longer
    gives the stored estimate (the search's maths changed since the report was made)."""
    completed = [(r["d"], r["accuracy"]) for r in data.runs]
    x80 = x80_marginal(transition_posterior(data.policy, completed))
    stored = data.estimate["params_p80"]
    if abs(math.exp(x80["median"]) / stored - 1) > MATCH:
        raise ConfigError(
            f"study {data.name!r}: its runs now give an 80% point of "
            f"{math.exp(x80['median']):,.0f}, not the stored {stored:,.0f} (the posterior's maths "
            f"changed since this {RESULTS} was written): render it again with threshold at the "
            f"commit that wrote it ({commit[:10]}), which stores the posterior for later renderings"
        )
    return x80


def read_results(path: Path) -> dict:
    """The JSON of a report's ``results.json``, in a format this version reads; ConfigError in
    one line for a file that cannot be read, is not JSON, or is not such a file."""
    path = Path(path)
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(
            f"results file {str(path)!r} cannot be read ({e.strerror or e}): give the "
            f"{RESULTS} of a report folder"
        ) from None
    except ValueError as e:
        raise ConfigError(
            f"results file {str(path)!r} is not JSON ({e}): give a report's"
        ) from None
    if not isinstance(results, dict) or results.get("format") not in FORMATS:
        raise ConfigError(
            f"results file {str(path)!r} is not a threshold report's {RESULTS} (format "
            f"{results.get('format') if isinstance(results, dict) else None!r}, readable: "
            f"{', '.join(FORMATS)}): give the {RESULTS} that `threshold report` wrote"
        )
    return results


def load_results(path: Path, baselines: Sequence[str] = ()) -> Collected:
    """The studies and transfer results of a report's ``results.json``, compared with its own
    baselines and ``baselines`` (study names in the file). ConfigError when the file is not a
    report's results or names no such study."""
    path = Path(path)
    results = read_results(path)
    try:
        # Format 2 keeps each study's data beside what the page showed of it.
        commit = str(results.get("git_commit"))
        studies = [_study(s.get("data", s), path.parent, commit) for s in results["studies"]]
        transfer = [t.get("data", t) for t in results.get("transfer", [])]
        transfer = [{k: v for k, v in t.items() if k != "figure"} for t in transfer]
        own = results.get("baselines")
        own = own if own is not None else [results["baseline"]] if results.get("baseline") else []
    except ConfigError:
        raise
    except (KeyError, TypeError, ValueError, ThresholdError) as e:
        what = f"no {e}" if isinstance(e, KeyError) else str(e).splitlines()[0]
        raise ConfigError(
            f"results file {str(path)!r} cannot be rendered again ({what}): give an unedited "
            f"{RESULTS}"
        ) from None
    names = [s.name for s in studies]
    wanted = list(dict.fromkeys([*own, *baselines]))
    for name in wanted:
        if name not in names:
            raise ConfigError(
                f"baseline study {name!r} is not in {str(path)!r} (studies: "
                f"{', '.join(names[:5])}): name one of its studies with --baseline"
            )
    order = {name: i for i, name in enumerate(wanted)}  # the baselines first, as collect has it
    studies.sort(key=lambda s: order.get(s.name, len(order)))
    compare(studies, wanted)
    label(studies)
    return Collected(
        storage=results["storage"],
        studies=studies,
        baselines=wanted,
        transfer=transfer,
        analysis_dir=results.get("analysis_dir", ""),
        created=results["created"],
        version=results["version"],
        git_commit=results["git_commit"],
    )
