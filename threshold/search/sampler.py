"""The Optuna adapter: a sampler that asks the search policy for the next size.

Its state is the study: every call reads the trials and recomputes the decision, so a resumed study
or a second worker carries on where the others are. Decisions are made in trial-number order (a
trial waits, briefly, for earlier trials to record theirs), and each decision, with the replicate
index and the run seed it implies, is written on its trial before training starts. Running and
waiting trials count as pending, so parallel workers do not duplicate a proposal. Trials that
already carry a size (a retried trial, or one enqueued by hand) bypass the policy.
"""

from __future__ import annotations

import logging
import time

import optuna
from optuna.distributions import IntDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState

from threshold.search import runs
from threshold.search.bounds import answer, answer_words, with_size_words
from threshold.search.fit import transition_estimate
from threshold.search.objective import ObjectiveSettings
from threshold.search.policy import SearchSettings, decide
from threshold.search.settings import run_seed

__all__ = [
    "PARAM",
    "QueueOnly",
    "TransitionSampler",
    "policy_settings",
    "run_seed",
    "split_trials",
]

log = logging.getLogger(__name__)

PARAM = "d_model"  # the Optuna parameter name, as in ModelConfig
CANCEL = "threshold:cancel"  # system attribute: the policy said stop after this trial began
_PENDING = (TrialState.RUNNING, TrialState.WAITING)


def policy_settings(settings, chance: float) -> SearchSettings:
    """The policy's view of a study (:class:`~threshold.search.spec.StudySettings`, or an
    objective's :class:`~threshold.search.objective.ObjectiveSettings`): its ``policy(chance)``,
    sizes with their parameter counts, bracket, stop rule."""
    return settings.policy(chance)


def split_trials(
    trials: list[FrozenTrial], exclude: int | None = None
) -> tuple[list[tuple[int, float]], list[int]]:
    """Completed (d, accuracy) pairs and the sizes of pending trials, leaving out ``exclude``."""
    return runs.split_runs(map(runs.read_run, trials), exclude)


class TransitionSampler(BaseSampler):
    """The policy's next size for each trial. ``settings``: a study's settings, anything with
    ``policy(chance)`` (the :class:`SearchSettings` it is searched by) and ``seed_key`` (what
    its run seeds derive from beside the size: a mixture's ops, an objective's name)."""

    def __init__(self, settings, chance: float, wait_s: float = 30.0) -> None:
        self.settings = settings
        self.policy = settings.policy(chance)
        self.distribution = IntDistribution(self.policy.d_min, self.policy.d_max)
        # Longest wait for an earlier trial's decision (its worker may have died).
        self.wait_s = wait_s

    def infer_relative_search_space(self, study, trial):
        return {PARAM: self.distribution}

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial, search_space) -> dict:
        if PARAM not in search_space or PARAM in trial.params:
            return {}
        # taken by this process: a kill -9 from here on is seen at once (study._dead_here)
        study._storage.set_trial_system_attr(
            trial._trial_id, runs.TAKEN_BY, runs.taken_by(trial.number)
        )
        if runs.SEED in trial.user_attrs:  # decided already: the retry of a trial whose
            # worker died after the decision, before the size became a parameter
            return {PARAM: trial.user_attrs[PARAM]} if PARAM in trial.user_attrs else {}
        trials = self._after_earlier_decisions(study, trial.number)
        completed, pending = split_trials(trials, exclude=trial.number)
        decision = decide(self.policy, completed, pending)
        storage, tid = study._storage, trial._trial_id
        if decision.stop:  # another worker's trial began first and used the last slot
            storage.set_trial_system_attr(tid, CANCEL, decision.reason)
            runs.write_cancel(storage, tid, decision.reason)
            return {PARAM: self.policy.d_hi}
        seed = self.policy.run_seed(self.settings.seed_key, decision.d, decision.replicate)
        runs.write_decision(storage, tid, decision.d, decision.replicate, seed, decision.info)
        return {PARAM: decision.d}

    def _after_earlier_decisions(self, study: optuna.Study, number: int) -> list[FrozenTrial]:
        """All trials, once every earlier pending trial has recorded its size (or time is up)."""
        deadline = time.monotonic() + self.wait_s
        while True:
            trials = study.get_trials(deepcopy=False)
            undecided = [
                t.number
                for t in trials
                if t.number < number
                and t.state in _PENDING
                and PARAM not in t.params
                and PARAM not in t.user_attrs
                and CANCEL not in t.system_attrs
            ]
            if not undecided or time.monotonic() > deadline:
                if undecided:
                    log.warning("trials %s recorded no decision in time; going on", undecided)
                return trials
            time.sleep(0.1)

    # A plain Optuna study: ``optuna.create_study(sampler=TransitionSampler(...))`` with the
    # user's own loop (docs/your-own-experiment.md#your-own-optuna-loop).

    @classmethod
    def for_objective(cls, name: str, sizes, params=None, **search) -> TransitionSampler:
        """A sampler for a plain Optuna study of objective ``name`` over ``sizes`` (with
        ``params`` a count a size, and ``chance`` and the search's other settings as
        :meth:`ObjectiveSettings.make` takes them)."""
        settings = ObjectiveSettings.make(name, sizes, params, **search)
        return cls(settings, settings.chance)

    def suggest(self, trial: optuna.Trial) -> tuple[int, int]:
        """In an objective: the size and the seed to run (the size suggested as ``d_model``);
        ``optuna.TrialPruned`` where the policy stopped the study after the trial began (a
        parallel worker took the last slot), which ``optimize`` records and goes on from."""
        size = trial.suggest_int(PARAM, self.distribution.low, self.distribution.high)
        if CANCEL in trial.storage.get_trial_system_attrs(trial._trial_id):
            raise optuna.TrialPruned("the study is done")
        seed = runs.read_seed(trial)
        if seed is None:  # enqueued by hand: a replicate past every earlier one
            seed = self.policy.run_seed(self.settings.seed_key, size, trial.number)
            runs.write_seed(trial, seed)
        params = dict(self.policy.params_of_d)[size]
        trial.storage.set_trial_user_attr(trial._trial_id, runs.PARAMS_TOTAL, params)
        return size, seed

    def stop(self, study: optuna.Study, trial: FrozenTrial) -> None:
        """An ``optimize`` callback: ``study.stop()`` once the policy stops (its precision, its
        budget, or a transition beyond the sizes)."""
        completed, pending = split_trials(study.get_trials(deepcopy=False))
        if decide(self.policy, completed, pending).stop:
            study.stop()

    def answer(self, study: optuna.Study) -> dict | None:
        """The study's estimate (as :func:`threshold.find_transition` returns it, without
        ``study``): the 80% point, its 90% interval, located or a bound; None before a run."""
        trials = study.get_trials(deepcopy=False)
        completed, _ = split_trials(trials)
        if not completed:
            return None
        estimate = transition_estimate(self.policy, completed)
        rows = [(r.d_model, r.params_total, r.value) for r in map(runs.read_run, trials)]
        found = answer([row for row in rows if row[1] and row[2] is not None], estimate)
        found = with_size_words(found, self.settings.size_name, self.settings.counted)
        located = bool(found and found["located"])
        return estimate | {"located": located, "answer": answer_words(found)}

    def sample_independent(self, study, trial, param_name, param_distribution):
        # Only reached for parameters outside the relative space: this study has none.
        raise ValueError(f"parameter {param_name!r} is not searched by threshold")


class QueueOnly(BaseSampler):
    """A dense grid's sampler (:mod:`threshold.search.grid`): it places nothing. Its trials are
    queued with their sizes; one that finds the queue empty (another worker took the last
    cell first) is marked cancelled, and the worker tells it failed without training it."""

    def infer_relative_search_space(self, study, trial):
        return {}

    def sample_relative(self, study, trial, search_space) -> dict:
        return {}

    def sample_independent(self, study, trial, param_name, param_distribution):
        storage, tid = study._storage, trial._trial_id
        storage.set_trial_system_attr(tid, CANCEL, "grid: nothing left to run")
        runs.write_cancel(storage, tid, "grid: nothing left to run")
        return param_distribution.low
