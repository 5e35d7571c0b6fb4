"""The Python API: `threshold.find_threshold` runs the same search as `threshold find`."""

import optuna
import pytest

import threshold
from threshold.search.spec import StudySettings


def test_find_threshold_runs_a_tiny_search_and_resumes_it(tmp_path, monkeypatch):
    monkeypatch.setenv("THRESHOLD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("THRESHOLD_ARTIFACTS", str(tmp_path / "art"))
    url = f"sqlite:///{tmp_path}/s.db"
    options = dict(mod=5, n_train=2000, n_test=100, steps=60, budget=3, d_lo=4, d_hi=16)
    estimate = threshold.find_threshold("max", storage=url, device="cpu", batch=3, **options)
    assert estimate["n_runs"] == 3
    lo, hi = estimate["interval_params"]
    assert lo <= estimate["params_p80"] <= hi
    (summary,) = optuna.get_all_study_summaries(url)
    assert summary.n_trials == 3
    settings = StudySettings.from_options("max", **options)
    assert summary.study_name == settings.default_name()
    again = threshold.find_threshold("max", storage=url, device="cpu", **options)
    assert again == estimate  # resumed: its budget was used, nothing more to run


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"modulus": 5}, "no option 'modulus'"),
        ({"tasks": "max,sum"}, "'sum'"),
        ({"workers": -1}, "--workers -1"),
        ({"batch": 0}, "--batch 0"),
        ({"arity": "2-x"}, "arity '2-x'"),
        ({"recipe": "paper", "weight_decay": 2.0}, "weight_decay 2.0"),
        ({"recipe": "slow"}, "recipe 'slow'"),
    ],
)
def test_find_threshold_refuses_bad_settings_before_writing(tmp_path, kwargs, named):
    url = f"sqlite:///{tmp_path}/s.db"
    with pytest.raises(threshold.ConfigError, match=named):
        threshold.find_threshold(storage=url, **kwargs)
    assert not (tmp_path / "s.db").exists()
