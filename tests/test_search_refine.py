"""The reading's finer grid where the posterior's mass lies (``posterior.refine.refined``)."""

import dataclasses

import numpy as np
import pytest
from scipy.special import expit

from threshold.errors import ConfigError
from threshold.search import posterior as post
from threshold.search.bench.simulate import listops_table
from threshold.search.fit import transition_estimate
from threshold.search.policy import decide, posterior_of, read_posterior
from threshold.search.posterior.hypothesis import split_gaps
from threshold.search.settings import SearchSettings

CHANCE = 0.15


def graded_runs(slope: float, top: float, x80: float = 10.0, sd: float = 0.01, seed: int = 0):
    """48 graded runs on a logistic curve (asymptote ``top``, 80% point x80), mostly below the
    80% point as the sampler's runs lie, and two at the top."""
    share = (0.8 * top - CHANCE) / (top - CHANCE)
    mid = x80 - np.log(share / (1.0 - share)) / slope
    x = np.append(np.repeat(np.linspace(x80 - 2.0 / slope, x80 + 0.3, 6), 8)[:46], [12.5, 12.5])
    noise = np.random.default_rng(seed).normal(0.0, sd, x.size)
    return x, np.clip(CHANCE + (top - CHANCE) * expit(slope * (x - mid)) + noise, 0.0, 1.0)


def read(cfg: post.PosteriorSettings, x, y):
    """The coarse reading and the refined one: (grid, weights) each."""
    grid = post.make_grid(cfg.reading(), CHANCE, 0.8, False, 8.0, 13.0)
    log_w = grid.log_prior + post.log_likelihood(grid, x, y)
    fine, fine_log_w = post.refined(grid, log_w, x, y, 0.8, False)
    return (grid, post.normalize(log_w)), (fine, post.normalize(fine_log_w))


SMALL = post.PosteriorSettings(  # graded seeds only: a grid small enough to split everywhere
    slopes=(1.0, 1.5, 2.3, 3.5),
    asymptotes=(0.8, 0.85, 0.9, 0.95, 1.0),
    concentrations=(5.0, 25.0),
    partial_shares=(0.0, 0.0),
    plateau_gaps=(),
)


@pytest.mark.parametrize(("slope", "top"), [(1.8, 0.93), (2.9, 0.965), (1.3, 0.915)])
def test_the_refined_reading_is_the_posterior_on_a_grid_finer_everywhere(slope, top):
    """A curve whose slope and ceiling fall between the grid's: the refined reading halves
    each step (locations, slopes in ln, ceilings) over the cells that hold the mass only, and
    reads the runs as a grid halved everywhere does, where the coarse grid reads them apart."""
    x, y = graded_runs(slope, top)
    (grid, w), (fine, fine_w) = read(SMALL, x, y)
    cfg = grid.settings
    assert np.diff(fine.mids).max() == pytest.approx(cfg.m_step / 2)
    coarse_step = np.diff(np.log(grid.slopes)).max()
    assert np.diff(np.log(fine.slopes)).max() == pytest.approx(coarse_step / 2)
    assert np.diff(np.unique(fine.asymptotes)).max() == pytest.approx(0.025)
    everywhere = dataclasses.replace(
        cfg,
        slopes=tuple(split_gaps(np.array(cfg.slopes), 2, log=True)),
        asymptotes=tuple(split_gaps(np.array(cfg.asymptotes), 2, log=False)),
        m_step=cfg.m_step / 2,
        refine_split=1,
    )
    dense = post.make_grid(everywhere, CHANCE, 0.8, False, 8.0, 13.0)
    dense_w = post.normalize(dense.log_prior + post.log_likelihood(dense, x, y))
    assert fine.mid.size < dense.mid.size / 4
    coarse, refined, want = (
        post.summarize(g, v, 8.0, 13.0) for g, v in ((grid, w), (fine, fine_w), (dense, dense_w))
    )
    for q in ("x80_median", "x80_lo", "x80_hi"):
        assert getattr(refined, q) == pytest.approx(getattr(want, q), abs=0.01)
    apart = [
        abs(getattr(s, q) - getattr(want, q))
        for s in (coarse, refined)
        for q in ("x80_median", "x80_lo", "x80_hi")
    ]
    assert sum(apart[3:]) < 0.5 * sum(apart[:3])


def test_a_wide_posterior_no_runs_or_a_split_of_1_keep_the_coarse_reading():
    """Four runs leave the posterior too wide for the finer grid to pay (nor can its steps
    move the reading); no runs, or ``refine_split=1``, read on the coarse grid alone."""
    x, y = np.array([8.5, 10.0, 11.5, 12.5]), np.array([0.16, 0.4, 0.85, 0.95])
    (grid, w), (fine, fine_w) = read(post.PosteriorSettings(), x, y)
    assert fine is grid and np.array_equal(fine_w, w)
    x, y = graded_runs(1.8, 0.93)
    (grid, w), (fine, fine_w) = read(post.PosteriorSettings(refine_split=1), x, y)
    assert fine is grid and np.array_equal(fine_w, w)
    empty = np.zeros(0)
    assert post.refined(grid, w, empty, empty, 0.8, False)[0] is grid
    with pytest.raises(ConfigError, match="refine_split"):
        post.PosteriorSettings(refine_split=0)


def test_the_study_reports_the_refined_reading_and_decides_on_the_coarse_one():
    """``transition_estimate`` (what a study reports) reads the runs on the finer grid;
    ``decide`` (its stop among it) on the posterior itself, so a decision costs no more."""
    settings = SearchSettings(listops_table(), chance=CHANCE)
    x, y = graded_runs(1.8, 0.93)
    d = np.array([settings.nearest(float(v)) for v in settings.d_of(x)])
    runs = list(zip(d.tolist(), y.tolist(), strict=True))
    grid, _, _ = posterior_of(settings, runs)
    fine, _, _ = read_posterior(settings, runs)
    assert fine.mid.size and np.diff(fine.mids).max() < np.diff(grid.mids).max()
    est = transition_estimate(settings, runs)
    off = dataclasses.replace(
        settings, posterior=dataclasses.replace(settings.posterior, refine_split=1)
    )
    assert (
        transition_estimate(off, runs)["params_p80"]
        == decide(settings, runs, []).estimate["params_p80"]
    )
    assert est["params_p80"] != decide(settings, runs, []).estimate["params_p80"]
