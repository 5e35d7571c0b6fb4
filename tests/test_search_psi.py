"""The plain Ψ-method (threshold/search/bench/psi.py): its posterior, its pick, its row."""

import numpy as np
import pytest

from threshold.errors import ConfigError
from threshold.search.bench.benchmark import psi_scored
from threshold.search.bench.psi import PsiMethod, PsiSettings
from threshold.search.bench.simulate import listops_table
from threshold.search.settings import SearchSettings

SMALL = PsiSettings(n_x80=40, slopes=(1.0, 3.0, 9.0), asymptotes=(0.8, 0.9, 1.0), bins=8)


def _step(x: float, at: float) -> float:
    """A run of a clean transition at x = at: learned (0.97) above it, at chance below."""
    return 0.97 if x > at else 0.15


def test_the_posterior_finds_a_clean_step_and_its_interval_holds_it():
    psi = PsiMethod(8.0, 14.0, chance=0.15, settings=SMALL)
    for x in np.linspace(8.0, 14.0, 13):
        psi.update(x, _step(x, 11.0))
    s = psi.summary()
    assert s.x80_lo <= 11.0 <= s.x80_hi
    assert abs(s.x80_median - 11.0) < 0.5
    assert s.asymptote_mean > 0.9
    assert s.mass_below < 0.01 and s.mass_above < 0.01


def test_a_range_where_no_run_learned_puts_the_mass_above_it():
    psi = PsiMethod(8.0, 12.0, chance=0.15, settings=SMALL)
    for x in np.linspace(8.0, 12.0, 9):
        psi.update(x, 0.15)
    assert psi.summary().mass_above > 0.5


def test_the_pick_goes_between_learned_and_failed_runs_not_to_the_ends():
    psi = PsiMethod(8.0, 14.0, chance=0.15, settings=SMALL)
    for x in (8.0, 9.0, 13.0, 14.0):
        psi.update(x, _step(x, 11.0))
    xs = np.linspace(8.0, 14.0, 13)
    assert 9.0 < xs[psi.pick(xs)] < 13.0


def test_settings_refuse_what_cannot_be_a_likelihood():
    with pytest.raises(ConfigError):
        PsiSettings(lapse=1.0)
    with pytest.raises(ConfigError, match="asymptote"):
        PsiMethod(8.0, 14.0, chance=0.95, settings=SMALL)


def test_the_benchmark_row_scores_a_study_at_each_checkpoint_and_its_stop():
    settings = SearchSettings(listops_table(), chance=0.15, budget=12)
    truth_x = float(settings.x_of(40))

    def draw(d):
        return d, _step(float(settings.x_of(d)), truth_x)

    own, at, runs = psi_scored(settings, draw, (4, 8), truth_x)
    assert set(at) == {4, 8} and [at[k]["runs"] for k in (4, 8)] == [4, 8]
    assert 3 <= own["runs"] <= 12
    assert at[8]["compute"] > at[4]["compute"] > 0
    assert runs[4] == runs[8][:4] and len(runs["stop"]) == own["runs"]
