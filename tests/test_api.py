"""The Python API: `threshold.find_threshold` runs the same search as `threshold find`."""

import optuna
import pytest

import threshold
from threshold.search.spec import StudySettings


def test_find_threshold_runs_a_tiny_search_and_resumes_it(tmp_path, monkeypatch):
    monkeypatch.setenv("THRESHOLD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("THRESHOLD_ARTIFACTS", str(tmp_path / "art"))
    url = f"sqlite:///{tmp_path}/s.db"
    # depth 1: 9-token sequences (depth 2: up to 60), whose decoding is most of a tiny run's CPU
    options = dict(mod=5, depth=1, n_train=2000, n_test=100, steps=60, budget=3, d_lo=4, d_hi=16)
    estimate = threshold.find_threshold(
        "max", storage=url, device="cpu", trials_at_once=3, **options
    )
    assert estimate["n_runs"] == 3
    lo, hi = estimate["interval_params"]
    assert lo <= estimate["params_p80"] <= hi
    (summary,) = optuna.get_all_study_summaries(url)
    assert summary.n_trials == 3
    settings = StudySettings.from_options("max", **options)
    assert summary.study_name == settings.default_name()
    again = threshold.find_threshold("max", storage=url, device="cpu", **options)
    assert again == estimate  # resumed: its budget was used, nothing more to run


def test_a_diverging_study_records_its_runs_and_says_each_as_it_ends(tmp_path, monkeypatch):
    """A learning rate of 1e4 makes every run's loss NaN: each run is a complete trial at the
    accuracy it measured, stopped as diverged, and the study goes on to its budget."""
    monkeypatch.setenv("THRESHOLD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("THRESHOLD_ARTIFACTS", str(tmp_path / "art"))
    url = f"sqlite:///{tmp_path}/s.db"
    # depth 1: a diverged model decodes to the end of its context (9 tokens, not 60)
    options = dict(mod=5, depth=1, n_train=2000, n_test=100, steps=30, budget=3, d_lo=4, d_hi=16,
                   lr=1e4)  # fmt: skip
    ended = []
    threshold.find_threshold(
        "max", storage=url, device="cpu", trials_at_once=3, on_run=lambda run, _: ended.append(run),
        **options,
    )  # fmt: skip
    assert [r["state"] for r in ended] == ["COMPLETE"] * 3
    assert {r["stop_reason"] for r in ended} == {"diverged"}
    assert all(0 <= r["accuracy"] <= 1 for r in ended)
    (summary,) = optuna.get_all_study_summaries(url)
    assert summary.n_trials == 3


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"modulus": 5}, "no option 'modulus'"),
        ({"tasks": "max,sum"}, "'sum'"),
        ({"workers": 0}, "--workers 0"),
        ({"trials_at_once": 0}, "--trials-at-once 0"),
        ({"arity": "2-x"}, "arity '2-x'"),
        ({"recipe": "paper", "weight_decay": 2.0}, "weight_decay 2.0"),
        ({"recipe": "slow"}, "recipe 'slow'"),
        ({"mod": "x"}, "mod 'x' is not allowed: give an integer"),
        ({"chance_corrected": 1}, "chance_corrected 1"),
        ({"on_run": "x"}, "on_run 'x' is not callable"),  # before training, not after it
        ({"weights": "max=1,max=2"}, "name op 'max' twice"),
        ({"warmup_steps": 500, "steps": 100}, "warmup_steps 500 is not below max_steps 100"),
    ],
)
def test_find_threshold_refuses_bad_settings_before_writing(tmp_path, kwargs, named):
    url = f"sqlite:///{tmp_path}/s.db"
    with pytest.raises(threshold.ConfigError, match=named):
        threshold.find_threshold(storage=url, **kwargs)
    assert not (tmp_path / "s.db").exists()
