"""Recorded grids of real runs, loaded for the replays (:mod:`threshold.search.bench.replay`).

A grid is a study's runs at a few sizes, several seeds each, from one of three records: a
science record of ``threshold bench gpu`` (two studies, at each budget checkpoint where the
record keeps the runs' accuracy there, else at the end), a report's ``results.json`` (each
study's runs) or a dense grid's record (``threshold grid``: one grid at each budget checkpoint).
Each comes with search settings on its own size table, so a replay may pick only its sizes.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from threshold.config import make_recipe, model_config_for, param_count
from threshold.errors import ConfigError
from threshold.search.grid import RECORD_KIND
from threshold.search.settings import SearchSettings
from threshold.tasks import TaskConfig, load_task_data

__all__ = ["MIN_SIZES", "RecordedGrid", "load_grids"]

logger = logging.getLogger(__name__)

MIN_SIZES = 3  # a grid of fewer sizes has no middle for the bracket


@dataclass(frozen=True)
class RecordedGrid:
    """One recorded grid: its runs (d, accuracy) in recorded order and the study's settings,
    the size table cut to the grid's sizes."""

    name: str
    source: str
    settings: SearchSettings
    runs: tuple[tuple[int, float], ...]
    trials: int = 2000  # test questions a run's accuracy is read on (psignifit's counts)
    dense: bool = False  # a dense grid (``threshold grid``): every size of its range, 5+ seeds

    @property
    def sizes(self) -> list[int]:
        return sorted({d for d, _ in self.runs})


def load_grids(paths: list[Path], precision: float = 2.5) -> list[RecordedGrid]:
    """Every grid of ``MIN_SIZES`` sizes or more in ``paths`` (files, or folders of ``*.json``
    but their ``*-analysis.json``): science records of ``bench gpu`` and reports'
    ``results.json``. A study found in several reports (a suite's and its part's) is kept once,
    with its most runs. ``precision``: the stop's, as ``find``'s."""
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            files += sorted(
                p for p in path.rglob("*.json") if not p.name.endswith("-analysis.json")
            )
        elif path.is_file():
            files.append(path)
        else:
            raise ConfigError(f"replay {path}: no such file or folder; give records or reports")
    grids: dict[str, RecordedGrid] = {}
    for file in files:
        try:
            record = json.loads(file.read_text())
        except (OSError, ValueError) as err:
            raise ConfigError(f"replay {file}: not a JSON record ({err})") from None
        if not isinstance(record, dict):
            continue
        if record.get("kind") == RECORD_KIND:
            found = _dense_grids(record, file)
        elif isinstance(record.get("science"), dict) and "runs" in record["science"]:
            found = [] if record.get("tiny") else _science_grids(record["science"], file)
        elif isinstance(record.get("studies"), list):
            found = _report_grids(record, file)
        else:
            logger.info("replay: %s holds no science record or report: skipped", file)
            continue
        for grid in found:
            kept = grids.get(grid.name)
            if len(grid.sizes) >= MIN_SIZES and (kept is None or len(grid.runs) > len(kept.runs)):
                grids[grid.name] = grid
    return [replace(g, settings=replace(g.settings, precision=precision)) for g in grids.values()]


def _table_settings(table: dict[int, int], chance: float, level: float = 0.8) -> SearchSettings:
    """Search settings on the size table {d: params} of a grid's sizes."""
    ds = sorted(table)
    return SearchSettings(
        tuple((d, table[d]) for d in ds), d_lo=ds[0], d_hi=ds[-1], chance=chance, level=level
    )


_SCIENCE_TASKS = {  # bench gpu's science pair (search/gpu.py science_pair)
    "add": (("add",), None),
    "max+med+add": (("max", "med", "add"), "add"),
}


def _science_grids(sci: dict, file: Path) -> list[RecordedGrid]:
    """A science record's grids: per study, one at each budget checkpoint where its runs keep
    their accuracy there (``budget`` of each run), else one of their final accuracies."""
    made = make_recipe(sci["recipe"])
    decoding = sci.get("decoding", made.train.decoding)
    key = "sampled_accuracy" if decoding == "sampled" else "accuracy"
    out = []
    for study, (ops, measure) in _SCIENCE_TASKS.items():
        runs = [r for r in sci["runs"] if r["study"] == study]
        if not runs:
            continue
        task = TaskConfig(ops=ops, n=sci["mod"], measure=measure)
        answers = load_task_data(task).test[task.measured_op].answers
        shares = np.bincount(answers) / answers.size
        chance = float((shares**2).sum() if decoding == "sampled" else shares.max())
        table = {
            d: param_count(model_config_for(task, d, made.train, **made.model_kwargs))["total"]
            for d in sorted({r["d"] for r in runs})
        }
        if len(table) < MIN_SIZES:
            continue
        settings = _table_settings(table, chance)
        order = sorted(runs, key=lambda r: (r["d"], r["seed"]))  # the seeds in recorded order
        if all(r.get("budget") for r in runs):  # every run's accuracy at every checkpoint
            steps = sorted({b["step"] for b in runs[0]["budget"]})
            for step in steps:
                at = [
                    (r["d"], next(b[key] for b in r["budget"] if b["step"] == step)) for r in order
                ]
                out.append(
                    RecordedGrid(f"{file.stem} {study} @{step}", str(file), settings, tuple(at))
                )
        else:
            at = tuple((r["d"], float(r[key])) for r in order)
            out.append(RecordedGrid(f"{file.stem} {study} @end", str(file), settings, at))
    return out


def _dense_grids(record: dict, file: Path) -> list[RecordedGrid]:
    """A dense grid's record (:func:`threshold.search.grid.export_record`): one grid at each of
    its budget checkpoints, the runs by size and then replicate (the seeds in the order a live
    study draws them), the accuracy its study's decoding scores. A grid still training (fewer
    runs than cells) is left out: its reference would read the runs trained so far."""
    if record.get("n_cells") and len(record["runs"]) < record["n_cells"]:
        logger.info("replay: %s has %d of %d runs: left out until whole", file,
                    len(record["runs"]), record["n_cells"])  # fmt: skip
        return []
    key = "sampled_accuracy" if record["decoding"] == "sampled" else "accuracy"
    table = {int(d): int(p) for d, p in record["params"].items()}
    table = {d: p for d, p in table.items() if any(r["d"] == d for r in record["runs"])}
    if len(table) < MIN_SIZES or record["chance"] is None:
        return []
    settings = replace(
        _table_settings(table, float(record["chance"]), float(record["level"])),
        chance_corrected=bool(record["chance_corrected"]),
    )
    trials = int(json.loads(record["settings"]["task"])["n_test"])
    runs = sorted(record["runs"], key=lambda r: (r["d"], r["replicate"]))
    out = []
    for step in record["checkpoint_steps"]:
        at = tuple(
            (r["d"], float(next(b[key] for b in r["budget"] if b["step"] == step))) for r in runs
        )
        name = f"{record['study']} @{step}"
        out.append(RecordedGrid(name, str(file), settings, at, trials, dense=True))
    return out


def _report_grids(record: dict, file: Path) -> list[RecordedGrid]:
    """A report's studies, each its runs in trial order (the sizes' params as recorded)."""
    out = []
    for study in record["studies"]:
        row = study.get("row") or {}
        runs = sorted(study.get("runs") or [], key=lambda r: r.get("trial", 0))
        chance = study.get("chance")
        if chance is None or not runs:
            continue
        table = {int(r["d"]): int(r["params"]) for r in runs}
        if len(table) < MIN_SIZES:
            continue
        settings = _table_settings(table, float(chance), float(study.get("level") or 0.8))
        at = tuple((int(r["d"]), float(r["accuracy"])) for r in runs)
        out.append(RecordedGrid(row.get("name") or study.get("name"), str(file), settings, at))
    return out
