"""A worker's batch: trials asked of one study or several, trained by one call of the engine
(or a few), each told into its own study as its run ends.

Each trial trains one model at the size its study's sampler chose, with the seed recorded on the
trial, uploads its checkpoint to the artifact store, records per-op metrics on the trial and
refreshes its study's transition estimate. A batch asks each study for up to K trials
(:func:`run_batch`; K = 1 is no special case); a thread beats the heartbeats of the running trials,
so stale trials of killed workers are failed and retried (same size, same seed) before each new
round. Each run keeps its training state beside the checkpoints while it trains
(:func:`~threshold.search.study.training_state_path`), and a trial interrupted (SIGINT, SIGTERM) is
enqueued again as it was, so whichever worker runs the retry, of an interrupted or of a killed one,
continues the run where its state left it. The workers over it: :mod:`threshold.search.worker`
(one study), :mod:`threshold.search.shared` (a suite's studies on one device).

For the tests of kills and signals, ``THRESHOLD_TEST_HOLD`` naming a file makes a worker stop
mid-run at a known point (:mod:`threshold.search.holds`), however short its runs are.
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import optuna
from optuna.artifacts import upload_artifact
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState

from threshold.config import Execution, ModelConfig, TrainConfig, param_count, pretrain_task
from threshold.errors import ConfigError
from threshold.interrupt import interrupted, raise_if_interrupted
from threshold.model import RecurrentTransformer
from threshold.search import record
from threshold.search.holds import HOLD_AT_ENV, HOLD_ENV, held_at_evaluation, hold
from threshold.search.notes import NoteRender
from threshold.search.objective import ObjectiveSettings
from threshold.search.sampler import PARAM, QueueOnly, TransitionSampler, run_seed
from threshold.search.spec import StudySettings
from threshold.search.study import ask_trial, load_study, training_state_path
from threshold.search.trials import (
    Cancelled,
    Heartbeats,
    decided_size,
    enqueue_again,
    finished,
    next_step,
    refresh_estimate,
)
from threshold.tasks import TaskData, load_task_data
from threshold.train import Run, TrainResult, chance_rate, train_runs
from threshold.train.checkpoint import save_checkpoint
from threshold.train.pretrain import pretrained_many

__all__ = [
    "Batch",
    "Joined",
    "join_study",
    "pack_log",
    "pack_words",
    "run_batch",
]

log = logging.getLogger(__name__)
pack_log = logging.getLogger(f"{__name__}.packs")  # a line an engine call: its packs


@dataclass
class _Trial:
    """A trial whose size, seed and model are decided, ready to train."""

    trial: optuna.Trial
    model_cfg: ModelConfig
    cfg: TrainConfig  # the study's training settings with this run's seed
    init: RecurrentTransformer | None  # the pretrained model a transfer run continues


def _begin(trial: optuna.Trial, settings: StudySettings, sampler) -> _Trial:
    """Size (from the sampler, or fixed by a retry), seed and model config of ``trial``, recorded
    on it; :class:`Cancelled` when the policy stopped the study after the trial was made."""
    d = decided_size(trial, sampler)
    seed = record.read_seed(trial)  # the decision's (or, on a retry, the failed trial's)
    if seed is None:  # enqueued by hand: derive a seed that no earlier run at d used
        earlier = [
            t
            for t in trial.study.get_trials(deepcopy=False)
            if t.number < trial.number and t.params.get(PARAM) == d
        ]
        seed = run_seed(settings.search.base_seed, settings.task.ops, d, len(earlier))
        record.write_seed(trial, seed)
    model_cfg = settings.model_config(d)
    counts = param_count(model_cfg)
    record.write_size(trial, f"{socket.gethostname()}:{os.getpid()}", counts)
    return _Trial(trial, model_cfg, replace(settings.train, seed=seed), None)


def _pretrain(runs: list[_Trial], settings: StudySettings, cache_dir, device) -> None:
    """With ``--pretrain``, each run's model pretrained at its size and seed (cached; the ones
    not cached train together), recorded on its trial and set as the model it continues."""
    if not settings.pretrain or not runs:
        return
    source = pretrain_task(settings.task, settings.pretrain)
    done = pretrained_many(source, [(r.model_cfg, r.cfg) for r in runs], cache_dir, None, device)
    for run, pre in zip(runs, done, strict=True):
        record.write_pretrain(run.trial, pre.metrics["accuracy"], pre.metrics["steps"])
        run.init = pre.model


def _record(run: _Trial, result: TrainResult, settings: StudySettings, store) -> float:
    """Upload the checkpoint and record the metrics of a finished run; its measured accuracy."""
    trial, cfg = run.trial, run.cfg
    metrics = result.metrics()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"trial{trial.number}-d{run.model_cfg.d_model}-seed{cfg.seed}.ckpt"
        stored = metrics | {"trial": trial.number, "study": trial.study.study_name}
        digest = save_checkpoint(path, result.model, settings.task, cfg.to_dict(), stored)
        artifact_id = upload_artifact(
            artifact_store=store, file_path=str(path), study_or_trial=trial
        )
    record.write_result(trial, artifact_id, digest, metrics)
    scored = metrics["sampled_accuracy" if cfg.decoding == "sampled" else "accuracy"]
    return scored[settings.task.measured_op]


def _reporter(trial: optuna.Trial, measure: str) -> Callable:
    """Report the measured op's accuracy at each evaluation as the trial's intermediate value.

    A retry (of an interrupted or a killed run) holds the accuracies its failed trial reported,
    and its run resumes from a state saved up to a minute before the last of them, or from step 0
    when the state is gone: those steps come again. They are skipped, read once here, so the
    values held stand and Optuna does not warn "already reported" once a step.
    """
    held = set(trial.storage.get_trial(trial._trial_id).intermediate_values)

    def report(progress) -> None:
        raise_if_interrupted()  # a signal dropped inside a finalizer stops the run here
        acc = progress.val_accuracy.get(measure)
        if acc is not None and progress.step not in held:
            trial.report(acc, progress.step)

    return report


@dataclass
class Joined:
    """A study as a worker runs it: its settings, task data and sampler (a dense grid runs its
    queue, no sampler's choice), and the words of its dashboard note (none: no note)."""

    study: optuna.Study
    settings: StudySettings
    data: TaskData
    sampler: TransitionSampler
    grid: bool
    notes: NoteRender | None = None
    url: str = ""  # its storage's, for :func:`~threshold.search.study.ask_trial`'s lock

    def next_step(self) -> str:
        return next_step(self.study, self.sampler, self.url, self.grid)


def join_study(name: str, storage, execution: Execution, notes: NoteRender | None) -> Joined:
    """Study ``name`` of ``storage`` loaded to run, its task data from ``execution``'s cache; an
    objective's study is refused (its runs are the user's function, not members of a pack)."""
    study, settings = load_study(name, storage)
    if isinstance(settings, ObjectiveSettings):
        raise ConfigError(
            f"study {name!r} calls an objective (a function of yours), whose runs cannot share "
            f"packs with other studies: give it a worker of its own (`threshold worker --study "
            f"{name}`)"
        )
    data = load_task_data(settings.task, execution.cache_dir)
    measured = data.test[data.config.measured_op]
    sampler = TransitionSampler(settings, chance_rate(measured, settings.train.decoding))
    grid = record.read_grid(study.user_attrs) is not None  # a dense grid: its queue, no sampler
    study.sampler = QueueOnly() if grid else sampler
    return Joined(study, settings, data, sampler, grid, notes, execution.storage_url)


@dataclass
class Batch:
    """What :func:`run_batch` did: trials run by study name, the studies whose policy
    cancelled a trial, and each call of the engine as (runs, studies they came from, its packs
    each as (members, studies))."""

    ran: dict[str, int]
    cancelled: set[str]
    calls: list[tuple[int, int, list[tuple[int, int]]]]


def run_batch(
    joined: list[Joined], k: int, store, execution: Execution, device, share: bool | None = None
) -> Batch:
    """Up to ``k`` trials of each study of ``joined`` trained together (each study asked by its
    own sampler, its first trial without asking: the caller found it runnable).

    All train in one call of the engine (one a number of torch threads: calls one after the
    other), which packs members of the same model shape by width (studies of another vocabulary
    or context in packs of their own, beside them). A run that ends is told at once, into its own
    study (checkpoint, metrics, estimate); if training is stopped, the unfinished trials are told
    failed, and those interrupted are enqueued again to go on. ``share``: the engine's (default:
    on a GPU).
    """
    runs: list[tuple[Joined, _Trial]] = []
    reporters: list[Callable] = []  # runs[i]'s
    live: dict[int, tuple[Joined, _Trial]] = {}
    cancelled: set[str] = set()
    calls: list[tuple[int, int, list[tuple[int, int]]]] = []
    reported: set[int] = set()
    taken: set[int] = set()  # runs whose trial was told elsewhere: trained on, never told here
    call: list[int] = []  # positions in runs of the engine call training now

    def lost(i: int) -> None:
        """Run i's trial was told by another worker (failed as stale: this worker's beats went
        unheard): the run trains on with its pack, and nothing more of it is written."""
        run = live.pop(i)[1]
        taken.add(i)
        beats.forget(run.trial)
        log.warning(
            "trial %d (d = %d) was told by another worker meanwhile (its heartbeat went unheard):"
            " this worker writes nothing more of it", run.trial.number, run.model_cfg.d_model,
        )  # fmt: skip

    def progress(i: int, p) -> None:  # called every eval_every steps and at the last
        if p.resumed or i in taken:  # a resumed run's notice repeats what it saved
            return
        try:
            reporters[i](p)
        except UpdateFinishedTrialError:
            lost(i)
            return
        reported.add(i)
        held = os.environ.get(HOLD_AT_ENV, "training") == "training"
        if os.environ.get(HOLD_ENV) and held and all(j in reported and j in live for j in call):
            hold(runs[call[0]][0].study, len(call), Path(os.environ[HOLD_ENV]))

    def done(i: int, result: TrainResult) -> None:
        if i in taken:
            return
        of, run = live[i]  # live until told: an interrupt while recording fails it and enqueues it
        if os.environ.get(HOLD_ENV) and os.environ.get(HOLD_AT_ENV) == "writing":
            hold(of.study, len(call), Path(os.environ[HOLD_ENV]))  # trained, nothing written yet
        try:
            value = _record(run, result, of.settings, store)
        except UpdateFinishedTrialError:
            lost(i)
            return
        of.study.tell(run.trial, value, skip_if_finished=True)  # told since: Optuna logs it
        del live[i]
        log.info(  # one line a run (Optuna logs a finished trial only under study.optimize)
            "trial %d: d = %d accuracy %.3f (%s, %d steps, %.0f s)%s",
            run.trial.number, run.model_cfg.d_model, value, result.stop_reason, result.steps,
            result.wall_s, f" of {of.study.study_name}" if len(joined) > 1 else "",
        )  # fmt: skip
        beats.forget(run.trial)
        refresh_estimate(of.study, of.sampler, of.notes)

    with Heartbeats(joined[0].study, execution.heartbeat_s) as beats:  # one storage: all trials
        try:
            for of in joined:
                if _begin_many(of, k, beats, runs, live, reporters):
                    cancelled.add(of.study.study_name)
                mine = [r for o, r in runs if o is of]
                _pretrain(mine, of.settings, execution.cache_dir, device)
            for positions in _calls(runs):
                call[:] = positions
                _train_call(runs, positions, execution, device, share, progress, done, calls)
        except BaseException as e:  # told trials stay told; the others fail, to be run again
            cut = interrupted(e)
            for of in joined:
                # a signal can strike between a run's tell and its del; with no run live (the
                # error came before any began: the storage, say) the storage is not asked again
                mine = [r for o, r in live.values() if o is of]
                told = finished(of.study) if mine else set()
                for run in (r for r in mine if r.trial.number not in told):
                    of.study.tell(run.trial, state=TrialState.FAIL)
                    if cut:
                        enqueue_again(of.study, run.trial)
            if cut and not isinstance(e, KeyboardInterrupt):
                raise KeyboardInterrupt from e  # the process ends as the signal asked
            raise
    ran = {of.study.study_name: sum(o is of for o, _ in runs) for of in joined}
    return Batch(ran, cancelled, calls)


def _begin_many(of: Joined, k: int, beats, runs: list, live: dict, reporters: list) -> bool:
    """Up to ``k`` trials of ``of`` asked and begun, added to ``runs``, ``live`` and
    ``reporters``; whether the policy cancelled one (the study stopped meanwhile)."""
    mine = 0
    while mine < k and (not mine or of.next_step() == "run"):
        trial = ask_trial(of.study, of.url)
        beats.add(trial)
        try:
            run = _begin(trial, of.settings, of.sampler)
        except Cancelled as e:
            log.info("trial %d cancelled: %s", trial.number, e)
            of.study.tell(trial, state=TrialState.FAIL)
            beats.forget(trial)
            return True
        except BaseException:
            of.study.tell(trial, state=TrialState.FAIL)
            raise
        if os.environ.get(HOLD_ENV) and os.environ.get(HOLD_AT_ENV) == "deciding":
            hold(of.study, 1, Path(os.environ[HOLD_ENV]))  # decided, not yet training
        live[len(runs)] = (of, run)
        runs.append((of, run))
        reporters.append(_reporter(trial, of.settings.task.measured_op))
        mine += 1
    return False


def _calls(runs: list[tuple[Joined, _Trial]]) -> list[list[int]]:
    """Positions of ``runs`` by the engine call that trains them: one call a number of torch
    threads (the engine sets them for a whole call, and they change a run's arithmetic), so a
    suite's runs train in one call however their tasks differ (the engine packs each model shape
    apart)."""
    calls: dict[int, list[int]] = {}
    for i, (_, run) in enumerate(runs):
        calls.setdefault(run.cfg.threads, []).append(i)
    return list(calls.values())


def _train_call(runs, positions, execution, device, share, progress, done, calls) -> None:
    """One call of the engine over ``runs`` at ``positions``; its packs' line logged, and the
    call added to ``calls`` (see :class:`Batch`)."""
    fed = {}  # one data object a study: the engine evaluates the members that share it together
    for i in positions:
        of = runs[i][0]
        fed.setdefault(id(of), held_at_evaluation(of.data, of.study, len(positions)))
    members = [
        Run(r.model_cfg, fed[id(of)], r.cfg, r.init, _state_path(execution, r))
        for of, r in (runs[i] for i in positions)
    ]
    studies = len({id(runs[i][0]) for i in positions})

    def planned(engine_packs: list[list[int]]) -> None:
        shapes = []
        for pack in engine_packs:
            widths = [runs[positions[m]][1].model_cfg.d_model for m in pack]
            of = {id(runs[positions[m]][0]) for m in pack}
            shapes.append((len(pack), len(of), min(widths), max(widths)))
        calls.append((len(positions), studies, [s[:2] for s in shapes]))
        pack_log.info("%s", pack_words(len(positions), studies, shapes))

    train_runs(
        members,
        device,
        lambda m, p: progress(positions[m], p),
        lambda m, result: done(positions[m], result),
        _progress_every([runs[i][1] for i in positions]),
        share=share,
        save_every_s=execution.save_every_s,
        on_packs=planned,
    )


def pack_words(runs: int, studies: int, shapes: list[tuple[int, int, int, int]]) -> str:
    """The line of an engine call's packs, each (members, studies, least d, widest d):
    ``"12 runs of 4 studies in 3 packs: 8 members of 3 studies (d 32-40), ..."``; packs of
    one member said once."""
    alone = sum(s[0] == 1 for s in shapes)
    words = [f"{m} members of {_studies(n)} (d {lo}-{hi})" for m, n, lo, hi in shapes if m > 1]
    words += [f"{alone} of one member each"] if alone else []
    head = f"{_count(runs, 'run')} of {_studies(studies)} in {_count(len(shapes), 'pack')}"
    return f"{head}: {', '.join(words)}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' if n != 1 else ''}"


def _studies(n: int) -> str:
    return f"{n} stud{'y' if n == 1 else 'ies'}"


def _progress_every(runs: list[_Trial]) -> int:
    """Steps between progress reports: the runs' validation interval; with the hold at training
    (tests), also halfway through the shortest run, so that the hold is mid-run where the run
    validates only at its end (a progress report changes nothing of the run)."""
    every = min(r.cfg.eval_every for r in runs)
    if os.environ.get(HOLD_ENV) and os.environ.get(HOLD_AT_ENV, "training") == "training":
        every = min(every, *(max(1, r.cfg.max_steps // 2) for r in runs))
    return every


def _state_path(execution: Execution, run: _Trial) -> Path:
    study = run.trial.study.study_name
    return training_state_path(execution.storage_url, study, run.model_cfg.d_model, run.cfg.seed)
