"""Dense grids: every size of a range x S seeds of one study's settings, the truth a search is
judged against.

A grid is a study like any other (stored where studies are, so ``status``, ``report`` and the
dashboard read it, its estimate the reading of all its runs), whose trials are all queued when it
is made: replicate r at size d carries the seed a live study's r-th run at d gets
(:func:`~threshold.search.sampler.run_seed`), so a grid's runs are the very runs a search of the
same settings would train. The study is marked a grid (:func:`record.write_grid`), and its workers
run the queue and nothing else: the sampler is never asked. Killed and run again, a grid goes on
where it stopped (a killed worker's trials are retried, an interrupted one continues from its
saved state) and trains nothing twice.

A grid's **record** (:func:`export_record`, one JSON file, written as runs end) holds every run,
every budget checkpoint, the parameter counts, the chance rate and the settings: what is
committed under ``reports/search/grids/`` and what the replays read. A grid made again on another
machine from the same settings first takes the runs its record holds (:func:`import_record`), so
a grid trained across sessions, each with a fresh database, loses nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import optuna
from optuna.distributions import IntDistribution
from optuna.trial import TrialState

from threshold.config import Execution, param_count
from threshold.errors import ConfigError
from threshold.files import atomic_write
from threshold.meta import git_commit, version
from threshold.options import recipe_of
from threshold.search import record
from threshold.search.bounds import answer
from threshold.search.find import SearchOutcome, run_search
from threshold.search.sampler import PARAM, run_seed
from threshold.search.settings import MAX_BUDGET
from threshold.search.spec import StudySettings
from threshold.search.study import create_or_load_study, open_storage

__all__ = [
    "CHECKPOINTS",
    "GRID_DIR",
    "RECORD_KIND",
    "GridSpec",
    "export_record",
    "grid_recipe",
    "grid_settings",
    "import_record",
    "parse_sizes",
    "prepare_grid",
    "record_path",
    "records_table",
    "run_grid",
]

log = logging.getLogger(__name__)

GRID_DIR = Path("reports/search/grids")  # where grids' records are committed
RECORD_KIND = "threshold grid"  # a record's "kind": what the replays recognise it by
_KEPT = ("COMPLETE", "RUNNING", "WAITING")  # a cell with such a trial is queued or done


@dataclass(frozen=True)
class GridSpec:
    """Which runs a grid holds: ``seeds`` replicates at each of ``sizes`` (d, increasing)."""

    sizes: tuple[int, ...]
    seeds: int = 5

    def __post_init__(self) -> None:
        object.__setattr__(self, "sizes", tuple(int(d) for d in self.sizes))
        if len(self.sizes) < 2 or list(self.sizes) != sorted(set(self.sizes)):
            raise ConfigError(
                f"grid sizes {list(self.sizes)} are not allowed: give two or more sizes, "
                "increasing, e.g. --sizes 4..32 or --sizes 8,12,16",
                "sizes",
            )
        if self.sizes[0] < 1:
            raise ConfigError(f"grid size {self.sizes[0]} is not allowed: use d 1 or more", "sizes")
        if isinstance(self.seeds, bool) or not isinstance(self.seeds, int) or self.seeds < 1:
            raise ConfigError(f"--seeds {self.seeds!r} is not allowed: use 1 or more", "seeds")
        if len(self.sizes) * self.seeds > MAX_BUDGET:
            raise ConfigError(
                f"a grid of {len(self.sizes)} sizes x {self.seeds} seeds is "
                f"{len(self.sizes) * self.seeds:,} runs: use at most {MAX_BUDGET:,} (a study's"
                " most), fewer sizes (--sizes 4..256/4) or seeds",
                "sizes",
            )

    @property
    def cells(self) -> list[tuple[int, int]]:
        """(d, replicate) of every run, in the order they are queued: the first seed at every
        size, then the second, so a grid cut short still spans its whole range."""
        return [(d, r) for r in range(self.seeds) for d in self.sizes]

    def to_dict(self) -> dict:
        return {"sizes": list(self.sizes), "seeds": self.seeds}


def parse_sizes(text: str) -> tuple[int, ...]:
    """``4..32`` (every integer), ``4..32/2`` (every other), or a list ``8,12,16``; pieces may be
    joined with commas (``4..16,20..40/4``)."""
    sizes: set[int] = set()
    example = "4..32, 4..32/2 or 8,12,16"
    for piece in (p.strip() for p in text.split(",")):
        try:
            if ".." in piece:
                span, _, step = piece.partition("/")
                lo, hi = (int(x) for x in span.split(".."))
                if lo > hi or int(step or 1) < 1:
                    raise ValueError
                sizes.update(range(lo, hi + 1, int(step or 1)))
            else:
                sizes.add(int(piece))
        except ValueError:
            raise ConfigError(f"--sizes {text!r} is not a list of sizes like {example}") from None
    return tuple(sorted(sizes))


CHECKPOINTS = (0.125, 0.25, 0.5, 1.0)  # a grid's budget checkpoints unless given: 4 budgets


def grid_recipe(values: dict) -> tuple[dict, str | None]:
    """The recipe options ``values`` (:data:`threshold.options.RECIPE`'s names) with a grid's
    defaults: :data:`CHECKPOINTS` where none are given, and where the recipe decays over the
    budget (``fast``'s cosine) a decay span fixed to that same budget, which changes no run
    (the schedule is the one the budget gives) but lets the checkpoints be read; with a
    sentence saying so (None: nothing was changed)."""
    values = dict(values)
    if values.get("checkpoints") is None:
        values["checkpoints"] = CHECKPOINTS
    train = recipe_of({k: v for k, v in values.items() if k != "checkpoints"}).train
    if not train.budget_dependent or values.get("decay_steps") is not None:
        return values, None
    span = max(1, train.max_steps - train.warmup_steps)
    values["decay_steps"] = span
    return values, (
        f"decay_steps {span:,} (recipe {train.recipe!r} decays over the budget: the same "
        f"schedule, fixed, so each run is read at its checkpoints mid-schedule)"
    )


def grid_settings(settings: StudySettings, spec: GridSpec) -> StudySettings:
    """``settings`` with the search's range and budget the grid's: every size of the grid
    allowed (and no other), as many runs as its cells."""
    lo, hi = spec.sizes[0], spec.sizes[-1]
    search = replace(settings.search, d_lo=lo, d_hi=hi, d_min=lo, d_max=hi, budget=len(spec.cells))
    return replace(settings, search=search)


def grid_name(settings: StudySettings, spec: GridSpec) -> str:
    """``grid-listops10-max-max-fast-<hash>``: the study's default name with ``grid-`` before it,
    the hash over its settings and the grid's sizes and seeds."""
    base = settings.default_name()
    blob = json.dumps([base, spec.to_dict()], sort_keys=True).encode()
    return f"grid-{base.rsplit('-', 1)[0]}-{hashlib.sha256(blob).hexdigest()[:8]}"


def record_path(name: str, folder: Path = GRID_DIR) -> Path:
    return Path(folder) / f"{name}.json"


def run_grid(
    settings: StudySettings,
    spec: GridSpec,
    execution: Execution,
    name: str | None = None,
    out: Path = GRID_DIR,
    on_update=None,
    on_run=None,
) -> tuple[SearchOutcome, Path, int]:
    """Train (or go on training) the grid ``spec`` of ``settings`` with ``execution``'s workers,
    its record in ``out`` rewritten as each run ends (and first read, for the runs it holds
    that the storage lacks); returns the search's outcome, the record's path and how many runs
    were queued by this call. ``on_update`` and ``on_run``: :func:`run_search`'s."""
    settings = grid_settings(settings, spec)
    name = name or grid_name(settings, spec)
    path = record_path(name, out)
    _, queued = prepare_grid(settings, spec, execution, name, path)
    url = execution.storage_url

    def ended(row: dict, snap: dict) -> None:
        if row["state"] == "COMPLETE":
            export_record(record.read_study(url, name), path)
        if on_run is not None:
            on_run(row, snap)

    outcome = run_search(settings, execution, name, on_update, on_run=ended)
    export_record(record.read_study(url, name), path)
    return outcome, path, queued


def prepare_grid(
    settings: StudySettings,
    spec: GridSpec,
    execution: Execution,
    name: str | None = None,
    from_record: Path | None = None,
) -> tuple[str, int]:
    """Make (or find again) the grid's study, take the runs of ``from_record`` that it lacks,
    and queue every cell that has no run yet; returns its name and the runs queued now.
    ``settings`` must be :func:`grid_settings`'s."""
    name = name or grid_name(settings, spec)
    storage = open_storage(
        execution.storage_url, execution.heartbeat_s, other_tables=execution.other_tables
    )
    study = create_or_load_study(settings, storage, name)
    stored = record.read_grid(study.user_attrs)
    if stored is None:
        record.write_grid(study, spec.to_dict())
    elif stored != spec.to_dict():
        raise ConfigError(
            f"grid {name!r} exists with sizes {stored['sizes'][0]}..{stored['sizes'][-1]} x "
            f"{stored['seeds']} seeds: give the same --sizes and --seeds, or another --study"
        )
    if from_record is not None and from_record.is_file():
        import_record(study, settings, json.loads(from_record.read_text()))
    have = {
        (r.d_model, r.replicate)
        for r in map(record.read_run, study.get_trials(deepcopy=False))
        if r.state in _KEPT
    }
    missing = [c for c in spec.cells if c not in have]
    for d, rep in missing:
        seed = run_seed(settings.search.base_seed, settings.task.ops, d, rep)
        study.enqueue_trial({PARAM: d}, user_attrs=record.queued_attrs(d, rep, seed))
    return name, len(missing)


def import_record(study: optuna.Study, settings: StudySettings, rec: dict) -> int:
    """Add the runs of the grid record ``rec`` that ``study`` has not completed (a grid trained
    on another machine, or in an earlier session whose database is gone); a record of other
    settings is refused. Returns the runs added. Their checkpoints stay where they were made."""
    if rec.get("settings") != settings.to_attrs():
        raise ConfigError(
            f"grid record of study {rec.get('study')!r} was made with other settings than these:"
            " give the same options, or another --out folder"
        )
    done = {
        (r.d_model, r.replicate)
        for r in map(record.read_run, study.get_trials(deepcopy=False))
        if r.complete
    }
    search = settings.search
    dist = IntDistribution(search.d_min, search.d_max)
    added = 0
    for run in rec["runs"]:
        if (run["d"], run["replicate"]) in done:
            continue
        study.add_trial(
            optuna.create_trial(
                state=TrialState.COMPLETE,
                params={PARAM: run["d"]},
                distributions={PARAM: dist},
                value=run["value"],
                user_attrs=record.imported_attrs(run),
            )
        )
        added += 1
    if added:
        log.info("grid %s: %d runs taken from its record", study.study_name, added)
    return added


def export_record(view: record.StudyView, path: Path) -> dict:
    """The grid ``view`` as a record (its completed runs, each at every budget checkpoint, the
    parameter counts, chance, settings and estimate), written to ``path`` whole or not at all.
    Its commit is the one the grid began at: kept from the record there, so a grid continued in
    a fresh database (a study made today) leaves a record with nothing new as it was."""
    grid = record.read_grid(view.attrs)
    if grid is None:
        raise ConfigError(f"study {view.name!r} is not a grid: `threshold grid` makes one")
    settings = view.settings
    counts = {d: param_count(settings.model_config(d)) for d in grid["sizes"]}
    cells: dict[tuple[int, int], record.RunRecord] = {}  # a cell's first run: a cell trained
    for r in view.completed:  # twice (a retry enqueued twice, before fail_stale's lock) is one
        cells.setdefault((r.d_model, r.replicate or 0), r)
    runs = [cells[c] for c in sorted(cells)]
    rec = {
        "kind": RECORD_KIND,
        "study": view.name,
        "version": version(),
        "git_commit": _begun_at(path) or view.attrs.get("git_commit") or git_commit(),
        "settings": settings.to_attrs(),
        "grid": grid,
        "measure": settings.task.measured_op,
        "decoding": settings.train.decoding,
        "chance": view.chance,
        "level": settings.search.level,
        "chance_corrected": settings.search.chance_corrected,
        "checkpoint_steps": list(settings.train.checkpoint_steps),
        "params": {str(d): c["total"] for d, c in counts.items()},
        "params_non_embedding": {str(d): c["non_embedding"] for d, c in counts.items()},
        "n_runs": len(runs),
        "n_cells": len(grid["sizes"]) * grid["seeds"],
        "cpu_s": round(sum(r.cpu_s or 0.0 for r in runs), 1),
        "train_s": round(sum(r.train_s or 0.0 for r in runs), 1),
        "estimate": view.estimate.to_dict() if view.estimate is not None else None,
        "runs": [_run_row(r) for r in runs],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, text=True) as f:
        json.dump(rec, f, indent=1, sort_keys=True)
        f.write("\n")
    return rec


def _begun_at(path: Path) -> str | None:
    try:
        return json.loads(path.read_text()).get("git_commit")
    except (OSError, ValueError, AttributeError):
        return None


def _run_row(r: record.RunRecord) -> dict:
    row = asdict(r)
    keep = (
        "value", "params_total", "params_non_embedding", "seed", "replicate", "accuracy",
        "strict_accuracy", "sampled_accuracy", "steps", "stop_reason", "train_s", "cpu_s",
        "worker",
    )  # fmt: skip
    out = {"d": r.d_model, **{k: row[k] for k in keep}}
    out["budget"] = sorted(r.budget, key=lambda b: b["step"])
    return out


def records_table(folder: Path = GRID_DIR) -> list[dict]:
    """A row for each grid record in ``folder``: its task and budget, sizes, seeds, runs done
    of its cells, CPU hours, and the reading of all its runs at its end (located or bound)."""
    rows = []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(rec, dict) or rec.get("kind") != RECORD_KIND:
            continue
        task = json.loads(rec["settings"]["task"])
        train = json.loads(rec["settings"]["train"])
        runs = [(r["d"], r["params_total"], r["value"]) for r in rec["runs"]]
        rows.append(
            {
                "study": rec["study"],
                "record": str(path),
                "task": f"{task['testbed']}{task['n']} {'+'.join(task['ops'])}",
                "measure": rec["measure"],
                "recipe": train["recipe"],
                "steps": train["max_steps"],
                "checkpoints": rec["checkpoint_steps"],
                "sizes": rec["grid"]["sizes"],
                "seeds": rec["grid"]["seeds"],
                "runs": rec["n_runs"],
                "cells": rec["n_cells"],
                "cpu_h": rec["cpu_s"] / 3600,
                "answer": answer(runs, rec["estimate"]),
            }
        )
    return rows
