"""The families table's numbers: a column's medians and shares over the studies, its coverage
with an interval, and its error and compute as ratios to the shape-known oracle's with as many
runs on the same studies (``threshold.search.bench.benchmark.bench_families``)."""

from __future__ import annotations

import numpy as np
from scipy.stats import beta

__all__ = ["coverage_interval", "family_row", "oracle_column", "vs_oracle"]


def family_row(rows: list[dict], grid_compute: float) -> dict:
    """One column over the studies, from each study's score (``runs``, ``compute``, ``covered``:
    None for a reader that gives no interval, ``error``: ln(estimate / truth)); compute as a
    share of the dense grid's ``grid_compute``."""
    err = np.abs([r["error"] for r in rows])
    covered = None if rows[0]["covered"] is None else np.array([r["covered"] for r in rows])
    return (
        {
            "median_runs": float(np.median([r["runs"] for r in rows])),
            "compute_vs_grid": float(np.mean([r["compute"] for r in rows]) / grid_compute),
            "median_compute_vs_grid": float(np.median([r["compute"] for r in rows]) / grid_compute),
            "coverage": None if covered is None else float(np.mean(covered)),
            "coverage_90": None
            if covered is None
            else coverage_interval(int(covered.sum()), covered.size),
            "median_abs_log_error": float(np.median(err)),
            "within_20": float(np.mean(np.abs(np.expm1([r["error"] for r in rows])) <= 0.2)),
            "median_signed_log_error": float(np.median([r["error"] for r in rows])),
        }
        | (  # the 90% interval's median width as hi / lo in parameters, where it was kept
            {"median_width_ratio": float(np.exp(np.median([r["width"] for r in rows])))}
            if rows[0].get("width") is not None
            else {}
        )
        | (  # a form-picking fit's rows: how often it picked the truth's form
            {"picked_true_form": float(np.mean([r["picked_true"] for r in rows]))}
            if "picked_true" in rows[0]
            else {}
        )
    )


def coverage_interval(hits: int, n: int) -> list[float]:
    """A 90% interval of a share seen as ``hits`` of ``n`` (Jeffreys': the beta(1/2, 1/2)
    prior's posterior, 5% either side)."""
    return [float(beta.ppf(q, hits + 0.5, n - hits + 0.5)) for q in (0.05, 0.95)]


def oracle_column(column: str, runs: float, checkpoints: tuple[int, ...]) -> str | None:
    """The shape-known oracle's column a column is measured against: the oracle with as many
    runs (a checkpoint's, by the name's last part; the largest checkpoint's for a design of
    that many runs), or to the precision for the own stop; None for the oracle's own columns
    and a design of another number of runs (the grid's 48 beside other checkpoints)."""
    n = max(checkpoints)
    if column in ("oracle", "oracle_stop") or (column[:7] == "oracle_" and column[7:].isdigit()):
        return None
    if column in ("stop", "psi_stop", "psi_read_stop"):  # own stops: the oracle to the precision
        return "oracle_stop"
    tail = column.rsplit("_", 1)[-1]
    k = int(tail) if tail.isdigit() else n if runs == n else None
    return None if k is None else "oracle" if k == n else f"oracle_{k}"


def vs_oracle(
    mine: list[dict], column: str, reference: str, rng: np.random.Generator, draws: int = 2000
) -> dict:
    """A column's median |ln error| over the shape-known oracle's on the same studies, with a
    90% interval from resampling the studies (both columns together), and its mean compute over
    the oracle's."""
    ours = np.abs([row[column]["error"] for row in mine])  # (n_studies,)
    theirs = np.abs([row[reference]["error"] for row in mine])
    pick = rng.integers(0, ours.size, size=(draws, ours.size))  # (draws, n_studies)
    ratios = np.median(ours[pick], axis=1) / np.median(theirs[pick], axis=1)
    compute = [np.mean([row[c]["compute"] for row in mine]) for c in (column, reference)]
    return {
        "against": reference,
        "error": float(np.median(ours) / np.median(theirs)),
        "error_90": [float(q) for q in np.quantile(ratios, [0.05, 0.95])],
        "compute": float(compute[0] / compute[1]),
    }
