"""The search benchmark's defaults, and its families table's ratios to the shape-known oracle
and coverage intervals."""

from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from threshold.config import TrainConfig
from threshold.search.bench.bench_table import coverage_interval, oracle_column, vs_oracle
from threshold.search.bench.benchmark import _worker_start, bench_families
from threshold.search.bench.families import CHANCE
from threshold.search.bench.simulate import listops_table
from threshold.search.sampler import policy_settings
from threshold.search.settings import SearchConfig, SearchSettings
from threshold.search.spec import StudySettings
from threshold.tasks import TaskConfig

CHECKPOINTS = (12, 24, 48)


@pytest.mark.parametrize(
    ("column", "runs", "against"),
    [
        ("12", 12, "oracle_12"),
        ("48", 47, "oracle"),  # a trajectory that ended at the range's edge: still the 48 column
        ("stop", 22.5, "oracle_stop"),
        ("sampler_read_24", 24, "oracle_24"),
        ("oracle_fit_adaptive_cost_read_12", 12, "oracle_12"),
        ("oracle_fit", 48, "oracle"),
        ("grid", 48, "oracle"),
        ("oracle", 48, None),
        ("oracle_12", 12, None),
        ("oracle_stop", 7, None),
    ],
)
def test_each_column_is_measured_against_the_oracle_with_as_many_runs(column, runs, against):
    assert oracle_column(column, runs, CHECKPOINTS) == against


def test_a_design_of_another_number_of_runs_has_no_oracle_to_be_measured_against():
    assert oracle_column("grid", 48, (6, 9)) is None


def test_the_ratio_resamples_the_studies_in_pairs():
    """Errors of twice the oracle's on every study give 2 exactly, however the studies are
    drawn; drawn apart, the two medians would scatter the ratio."""
    rng = np.random.default_rng(0)
    theirs = rng.lognormal(-3.0, 1.0, 40)  # (n_studies,) |ln error|
    mine = [
        {"48": {"error": -2 * e, "compute": 3.0}, "oracle": {"error": e, "compute": 2.0}}
        for e in theirs
    ]
    ratio = vs_oracle(mine, "48", "oracle", np.random.default_rng(1))
    assert ratio["against"] == "oracle" and ratio["error"] == pytest.approx(2.0)
    assert ratio["error_90"] == pytest.approx([2.0, 2.0])
    assert ratio["compute"] == pytest.approx(1.5)


def test_the_ratio_interval_holds_its_estimate_and_narrows_with_studies():
    rng = np.random.default_rng(2)
    widths = []
    for n in (40, 640):
        ours, theirs = rng.lognormal(-2.0, 1.0, n), rng.lognormal(-2.7, 1.0, n)
        mine = [
            {"48": {"error": a, "compute": 1.0}, "oracle": {"error": b, "compute": 1.0}}
            for a, b in zip(ours, theirs, strict=True)
        ]
        ratio = vs_oracle(mine, "48", "oracle", np.random.default_rng(3))
        lo, hi = ratio["error_90"]
        assert lo < ratio["error"] < hi
        widths.append(hi / lo)
    assert widths[1] < widths[0] ** 0.5  # 16x the studies: about a quarter of the log width


def test_coverage_intervals_are_jeffreys_intervals():
    lo, hi = coverage_interval(34, 40)  # 0.85: not told from 0.9 by 40 studies
    assert lo < 0.85 < hi and hi > 0.9
    assert coverage_interval(0, 40)[0] == pytest.approx(0.0, abs=1e-4)
    lo, hi = coverage_interval(102, 120)  # 0.85 of 120: short of 0.9
    assert hi < 0.9


def test_the_benchmark_reads_with_the_settings_of_the_tools_defaults():
    """``bench_families`` without settings (Python) searches as ``threshold bench search`` does
    (the settings of a study of the tool's defaults): the same size table, down to d 2, where
    runs of shallow studies go. Before, the library's table began at d 4, and shallow studies
    read from Python were not those of the command."""
    defaults = StudySettings(TaskConfig(ops=("add",)), TrainConfig(), SearchConfig())
    assert SearchSettings(listops_table(), chance=CHANCE) == policy_settings(defaults, CHANCE)


def test_a_benchmark_process_runs_one_blas_thread():
    """The benchmark's processes are as many as the cores asked for: each runs one BLAS thread
    (OpenBLAS would start one per core, and they spin against each other)."""
    with ProcessPoolExecutor(1, mp_context=get_context("spawn"), initializer=_worker_start) as pool:
        libraries = pool.submit(threadpool_info).result()
    assert libraries and all(lib["num_threads"] == 1 for lib in libraries)


def test_the_sampler_rows_keep_their_intervals_width():
    out = bench_families(n_studies=2, seed=1, families=("bimodal",), checkpoints=(6, 12),
                         rows=("sampler",))["families"]["bimodal"]  # fmt: skip
    assert out["6"]["median_width_ratio"] > 1.0 and out["12"]["median_width_ratio"] > 1.0


@pytest.mark.slow  # psignifit's grid posterior: seconds a fit (the bench extra)
def test_psignifit_reads_the_samplers_runs_beside_ours():
    pytest.importorskip("psignifit")

    out = bench_families(n_studies=1, seed=1, families=("bimodal",), checkpoints=(12,),
                         rows=("sampler", "peer"))["families"]["bimodal"]  # fmt: skip
    assert out["peer_12"]["median_runs"] == out["12"]["median_runs"] == 12
    assert out["peer_12"]["median_width_ratio"] > 1.0
