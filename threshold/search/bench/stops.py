"""Stop rules judged on dense grids of real runs after the fact (``bench search --stops``).

Where the sampler stops does not change where it places its runs: ``decide`` chooses the same
next run whatever the stop would say. So one trajectory with the stop switched off, read after
every run, shows where each rule would have stopped it and what it would have read there. Each
dense grid is replayed once a seed order (as :func:`threshold.search.bench.replay.replay_grid`
does), each replay read at every run count from the bracket's 3 to ``n_max``.

Rules (:data:`RULES`): ``width``, the tool's own (the 90% interval within the precision, or the
mass beyond an end of the allowed range: :func:`replay.stops`); and ``settled K D``: that,
once the median 80% point of the last K + 1 readings spans at most D nats (the reading has
settled, not only narrowed); and ``floor N``: the width, but not before N runs (a guard
against an early stop on seeds that split). Each is scored against two references of the whole
grid: our posterior's reading (the replay's) and a model-free one (:func:`isotonic_x80`: the
monotone least-squares curve through every run, where it reaches the level, interpolated in
ln(params)), so that a rule is not judged by the model it uses alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sklearn.isotonic import IsotonicRegression

from threshold.errors import ConfigError
from threshold.search.bench.recorded import RecordedGrid, load_grids
from threshold.search.bench.replay import reading, sampler_path, stops, user_grid
from threshold.search.posterior import level_target
from threshold.search.settings import SearchSettings

__all__ = ["RULES", "Rule", "bench_stops", "isotonic_x80", "rule_stop"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Rule:
    """Stop once the tool's own rule holds, after at least ``floor`` runs and, with ``settle``
    > 0, once the last ``settle`` + 1 readings' medians span at most ``nats``."""

    name: str
    settle: int = 0
    nats: float = 0.0
    floor: int = 0


RULES = (
    Rule("width"),
    Rule("settled 2 0.05", 2, 0.05),
    Rule("settled 3 0.1", 3, 0.1),
    Rule("settled 3 0.05", 3, 0.05),
    Rule("settled 4 0.1", 4, 0.1),
    Rule("settled 4 0.2", 4, 0.2),
    Rule("floor 12", floor=12),  # the width, but no stop before 12 runs (seeds that split)
    Rule("floor 16", floor=16),
)


def isotonic_x80(settings: SearchSettings, runs) -> float:
    """The model-free 80% point of runs (d, accuracy), in ln(params): the monotone
    least-squares fit of accuracy on ln(params), its asymptote its value at the largest size,
    the level reached (``level_target``) interpolated linearly between sizes."""
    x = settings.x_of(np.array([d for d, _ in runs]))
    y = np.array([a for _, a in runs], dtype=float)
    xs = np.unique(x)
    f = IsotonicRegression(increasing=True).fit(x, y).predict(xs)  # (U,)
    target = float(level_target(f[-1], settings.chance, settings.level, settings.chance_corrected))
    i = int(np.argmax(f >= target))
    if i == 0 or f[i] == f[i - 1]:
        return float(xs[i])
    return float(xs[i - 1] + (target - f[i - 1]) / (f[i] - f[i - 1]) * (xs[i] - xs[i - 1]))


def rule_stop(rule: Rule, path: list[dict], stopped: list[bool]) -> int:
    """The index in ``path`` (readings after 3, 4, ... runs) where ``rule`` stops: the first
    reading of at least ``rule.floor`` runs where the tool's rule holds (``stopped``) and, for
    a settled rule, the last ``rule.settle`` + 1 medians span at most ``rule.nats``; the last
    reading if none."""
    for i, own in enumerate(stopped):
        if not own or path[i]["runs"] < rule.floor:
            continue
        if rule.settle == 0:
            return i
        if i >= rule.settle:
            xs = [r["x"] for r in path[i - rule.settle : i + 1]]
            if max(xs) - min(xs) <= rule.nats:
                return i
    return len(path) - 1


def _replays(grid: RecordedGrid, orders: int, n_max: int) -> list[dict]:
    out = []
    for turn in range(orders):
        runs = sampler_path(grid, turn, n_max)
        path = [reading(grid.settings, runs[:n]) for n in range(3, len(runs) + 1)]
        stopped = [stops(grid.settings, runs[:n]) for n in range(3, len(runs) + 1)]
        users = user_grid(grid, turn)
        grid48 = reading(grid.settings, users) if users else None
        out.append({"turn": turn, "path": path, "stopped": stopped, "grid48": grid48})
    return out


def bench_stops(
    paths: list[Path],
    orders: int = 5,
    n_max: int = 24,
    precision: float = 2.5,
    on_grid: Callable[[int, int, RecordedGrid], None] | None = None,
) -> dict:
    """Every rule of :data:`RULES` on every located dense grid in ``paths``: per rule, over
    the replays, the median and largest run count at its stop, and against each reference the
    coverage of its 90% interval and the median |ln error|. ``on_grid(i, n, grid)`` is told as
    the i-th of the n dense grids begins."""
    grids = [g for g in load_grids(paths, precision) if g.dense]
    if not grids:
        raise ConfigError(f"no dense grid in {', '.join(map(str, paths))}: `threshold grid`")
    rows, refs = [], {}
    for i, g in enumerate(grids):
        if on_grid is not None:
            on_grid(i, len(grids), g)
        ref = reading(g.settings, sorted(g.runs, reverse=True))
        if ref["kind"] != "point":  # a bound: no point to judge a stop against
            continue
        refs[g.name] = {"ours": ref["x"], "isotonic": isotonic_x80(g.settings, g.runs)}
        rows += [r | {"grid": g.name} for r in _replays(g, orders, n_max)]
        logger.info("stops: %s, %d seed orders", g.name, orders)
    table = {}
    for rule in RULES:
        at = [(r, r["path"][rule_stop(rule, r["path"], r["stopped"])]) for r in rows]
        if not at:
            continue
        runs = [p["runs"] for _, p in at]
        table[rule.name] = {"replays": len(at), "median_runs": float(np.median(runs)),
                            "max_runs": int(max(runs))}  # fmt: skip
        table[rule.name] |= _scores(at, refs)
    users = [(r, r["grid48"]) for r in rows if r["grid48"] is not None]
    if users:  # the 48-run grid a user would run instead, beside the rules
        table["grid48"] = {"replays": len(users), "median_runs": 48.0, "max_runs": 48}
        table["grid48"] |= _scores(users, refs)
    return {"grids": sorted(refs), "references": refs, "orders": orders, "n_max": n_max,
            "rules": table, "replays": rows}  # fmt: skip


def _scores(at: list[tuple[dict, dict]], refs: dict) -> dict:
    """Coverage and median |ln error| of (replay, reading) pairs against each reference."""
    out = {}
    for ref in ("ours", "isotonic"):
        pairs = [(read, refs[r["grid"]][ref]) for r, read in at]
        out[f"coverage_{ref}"] = float(np.mean([p["lo"] <= t <= p["hi"] for p, t in pairs]))
        out[f"abs_error_{ref}"] = float(np.median([abs(p["x"] - t) for p, t in pairs]))
    return out
