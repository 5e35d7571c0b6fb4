"""The study record: typed views of stored studies, old ones included, and the cheap stop check."""

import json
from dataclasses import replace

import optuna
import pytest
from optuna.distributions import IntDistribution
from optuna.trial import TrialState, create_trial

from threshold import ThresholdError
from threshold.search.record import (
    Estimate,
    read_studies,
    read_study,
    stop_status,
    write_analysis,
    write_estimate,
)
from threshold.search.study import open_storage

# The attributes of a study written by the code at 6479aa0, copied verbatim from a database it made
# (`threshold find --tasks max --steps 30 --budget 4 --d-lo 4 --d-hi 8 --n-test 200 --n-train 500`
# from an export of that commit): the train settings still say "bucketing", the chance rate lives
# only in the estimate, and the estimate JSON is what reports/*/results.json hold.
OLD_STUDY = "listops10-max-max-01ed19e4"
OLD_STUDY_ATTRS = {
    "task": '{"arity_max": 3, "arity_min": 2, "data_seed": 0, "depth": 2, "holdout": 0.05, '
    '"measure": null, "n": 10, "n_test": 200, "n_train": 500, "n_val": 500, "ops": ["max"], '
    '"p_nest": 0.25, "sadd_seed": 0, "split_seed": 0, "testbed": "listops"}',
    "train": '{"batch_size": 64, "betas": [0.9, 0.98], "bucket_chunk": 32, "bucketing": true, '
    '"eval_batch_size": 256, "eval_every": 250, "grad_clip": 1.0, "learned_acc": 0.99, '
    '"learned_tf": 0.99, "loss_on": "completion", "lr": 0.003, "max_steps": 30, '
    '"min_lr_ratio": 0.1, "seed": 0, "stuck_after": 0.5, "stuck_margin": 0.05, '
    '"stuck_window": 0.25, "threads": 1, "time_limit_s": null, "warmup_steps": 200, '
    '"weight_decay": 0.1}',
    "search": '{"base_seed": 0, "budget": 4, "chance_corrected": false, "d_hi": 8, "d_lo": 4, '
    '"d_max": 512, "d_min": 2, "level": 0.8, "precision": 2.5}',
    "version": "0.1.0",
    "git_commit": "unknown",
    "estimate": '{"asymptote": 0.8, "chance": 0.315, "chance_corrected": false, "d_p80": 11.63, '
    '"fit": null, "interval_d": [5.03, 28.26], "interval_params": [902.4, 12940.0], '
    '"interval_ratio": 14.35, "level": 0.8, "mass_beyond_range": [0.02213, 0.548], '
    '"method": "grid posterior median, 90% credible interval", "midpoint_d": 8.39, '
    '"midpoint_interval_params": [522.8, 7040.0], "midpoint_params": 1844.0, "n_runs": 4, '
    '"params_p80": 3008.0, "range_d": [4, 11], "seed_spread": {"acc_sd": 0.1175, '
    '"interval_ratio": 14.35, "learned_share": 0.0, "n_near": 2, "runs_for_precision": 33.8}}',
    "analysis:0": '{"attn_share": 0.4, "d_model": 8}',
}
# (d, value, params_total, params_non_embedding, seed, decision, train_s, strict, val) per trial
OLD_TRIALS = [
    (8, 0.235, 1720, 888, 4091621183, '{"phase": "bracket", "slot": 0}', 0.48, 0.005, 0.3),
    (4, 0.0, 668, 252, 376190861, '{"phase": "bracket", "slot": 1}', 0.48, 0.0, 0.016),
    (6, 0.03, 1146, 522, 2872289393, '{"phase": "bracket", "slot": 2}', 0.57, 0.0, 0.026),
    (
        11,
        0.0,
        2761,
        1617,
        2580741345,
        '{"cost": 1.055, "gain": 0.3363, "n_candidates": 12, "phase": "widen", "range_d": '
        '[4, 16], "score": 0.3188, "sd_x80": 0.9871}',
        0.34,
        0.0,
        0.0,
    ),
]


def old_database(url: str) -> None:
    """A study with the attribute layout 6479aa0 wrote, and a cancelled trial of its sampler."""
    study = optuna.create_study(study_name=OLD_STUDY, storage=url, direction="maximize")
    for key, value in OLD_STUDY_ATTRS.items():
        study.set_user_attr(key, value)
    for i, (d, value, total, non_emb, seed, decision, train_s, strict, val) in enumerate(
        OLD_TRIALS
    ):
        artifact = f"0000000{i}-ac89-4788-8fed-83fd8d3cab5b"
        attrs = {
            "accuracy": json.dumps({"max": value}),
            "checkpoint_artifact": artifact,
            "checkpoint_sha256": "96df0cdc" * 8,
            "d_model": d,
            "decision": decision,
            "params_non_embedding": non_emb,
            "params_total": total,
            "replicate": 0,
            "seed": seed,
            "steps": 30,
            "stop_reason": "max_steps",
            "strict_accuracy": json.dumps({"max": strict}),
            "train_s": train_s,
            "worker": "vm:8769",
        }
        study.add_trial(
            create_trial(
                params={"d_model": d},
                distributions={"d_model": IntDistribution(2, 512)},
                value=value,
                user_attrs=attrs,
                system_attrs={f"artifacts:{artifact}": "{}"},
                intermediate_values={30: val},
            )
        )
        frozen = study.get_trials(deepcopy=False)[-1]
        assert frozen.user_attrs == attrs
    study.add_trial(  # the sampler's stop after another worker's trial began (6479aa0 too)
        create_trial(
            state=TrialState.FAIL,
            params={"d_model": 8},
            distributions={"d_model": IntDistribution(2, 512)},
            user_attrs={"cancelled": "study done (budget)"},
            system_attrs={"threshold:cancel": "budget"},
        )
    )


def test_a_study_written_at_6479aa0_reads(tmp_path):
    url = f"sqlite:///{tmp_path}/old.db"
    old_database(url)
    view = read_study(url, OLD_STUDY)
    assert view.name == OLD_STUDY
    assert view.settings.task.ops == ("max",)
    assert view.settings.train.batch_order == "bucketed"  # what "bucketing": true ran
    assert view.settings.search.budget == 4
    assert [r.d_model for r in view.runs] == [8, 4, 6, 11, 8]
    assert [r.number for r in view.completed] == [0, 1, 2, 3]
    first = view.runs[0]
    assert (first.params_total, first.params_non_embedding, first.seed) == (1720, 888, 4091621183)
    assert first.accuracy == {"max": 0.235} and first.strict_accuracy == {"max": 0.005}
    assert (first.steps, first.stop_reason, first.train_s) == (30, "max_steps", 0.48)
    assert first.replicate == 0 and first.worker == "vm:8769"
    assert first.decision == {"phase": "bracket", "slot": 0}
    assert first.checkpoint.startswith("00000000-") and first.last_step == 30
    assert first.val_accuracy == 0.3
    assert view.runs[-1].cancelled == "study done (budget)"
    assert view.n_failed == 0 and view.n_running == 0  # a cancelled trial did not fail
    assert view.split() == ([(8, 0.235), (4, 0.0), (6, 0.03), (11, 0.0)], [])
    # No chance attribute then: it is read from the estimate.
    assert "chance" not in view.attrs and view.chance == 0.315
    stored = json.loads(OLD_STUDY_ATTRS["estimate"])
    assert view.estimate.to_dict() == stored  # the JSON that reports keep, unchanged
    assert view.estimate.params_p80 == 3008.0 and view.estimate.interval_params == (902.4, 12940.0)
    assert view.estimate.n_runs == 4 and view.estimate.range_d == (4, 11)
    assert view.analyses == {0: {"attn_share": 0.4, "d_model": 8}}
    assert view.attrs["version"] == "0.1.0" and "analysis:0" not in view.attrs
    assert view.stop.reason == "budget"  # 4 runs of a budget of 4
    assert view.stop.text == "stopped (budget): the budget of 4 runs is used"


def test_written_estimate_and_chance_read_back(tmp_path):
    url = f"sqlite:///{tmp_path}/old.db"
    old_database(url)
    study = optuna.load_study(study_name=OLD_STUDY, storage=url)
    estimate = json.loads(OLD_STUDY_ATTRS["estimate"]) | {"a_key_of_later": [1, 2]}
    write_estimate(study, estimate, 0.3)
    write_analysis(url, OLD_STUDY, 2, {"d_model": 6})
    view = read_study(open_storage(url, create=False), OLD_STUDY)
    assert view.chance == 0.3  # its own attribute wins over the estimate's copy
    assert view.estimate.to_dict() == estimate  # unknown keys kept
    assert Estimate.from_dict(estimate) == view.estimate
    assert set(view.analyses) == {0, 2}


def test_read_studies_leaves_out_foreign_studies_and_refuses_unknown_names(tmp_path):
    url = f"sqlite:///{tmp_path}/old.db"
    old_database(url)
    optuna.create_study(study_name="not-threshold", storage=url)
    assert [v.name for v in read_studies(url)] == [OLD_STUDY]
    with pytest.raises(ThresholdError, match="settings cannot be read"):
        read_studies(url, ["not-threshold"])
    with pytest.raises(ThresholdError, match="'nope' is not in this storage"):
        read_study(url, "nope")


@pytest.mark.parametrize(
    ("ratio", "mass", "n_runs", "fitted", "pending", "reason"),
    [
        (2.0, (0.0, 0.0), 5, 5, 0, "precision"),
        (2.0, (0.0, 0.0), 5, 5, 1, "precision"),  # finishing: one still running
        (2.0, (0.0, 0.0), 5, 4, 0, None),  # the estimate predates the 5th run
        (6.0, (0.0, 0.0), 5, 5, 0, None),
        (6.0, (0.0, 0.97), 5, 5, 0, "above_range"),
        (6.0, (0.97, 0.0), 5, 5, 0, None),  # below the range, but d_min is not reached
        (6.0, (0.0, 0.5), 9, 9, 1, "budget"),
    ],
)
def test_stop_status_from_the_stored_estimate(
    tmp_path, ratio, mass, n_runs, fitted, pending, reason
):
    """The policy's stop rules read off a stored estimate, as decide() would stop."""
    url = f"sqlite:///{tmp_path}/old.db"
    old_database(url)
    view = read_study(url, OLD_STUDY)
    search = replace(view.settings.search, budget=10, d_max=16)
    settings = replace(view.settings, search=search)
    estimate = Estimate.from_dict(
        {"n_runs": fitted, "interval_ratio": ratio, "mass_beyond_range": mass, "range_d": [4, 16]}
    )
    done = [replace(view.completed[0], number=i) for i in range(n_runs)]
    running = [replace(view.runs[0], number=n_runs + i, state="RUNNING") for i in range(pending)]
    status = stop_status(settings, estimate, [*done, *running])
    assert status.reason == reason
    assert status.text.startswith(
        "searching" if reason is None else "finishing" if pending else "stopped"
    )
