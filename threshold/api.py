"""The Python API: :func:`find_threshold`, ``threshold find`` without the command line, and
:func:`find_transition` for anyone's objective, with :func:`ask` and :func:`tell` for runs
launched elsewhere.

It loads the search (Optuna, SQLAlchemy, scipy) at import; the package's front door
(``threshold/__init__.py``), which every module of the package runs first, hands it out on first
use so that ``import threshold.tasks`` loads none of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from threshold.config import Execution, resolve_storage
from threshold.errors import ConfigError
from threshold.options import EXAMPLES, SETTINGS, Option
from threshold.search import objective_run
from threshold.search.bounds import answer_words
from threshold.search.find import Interrupted, prepare_study, run_search, snapshot
from threshold.search.objective import ObjectiveSettings, load_objective, objective_path
from threshold.search.spec import StudySettings

__all__ = ["ask", "find_threshold", "find_transition", "tell"]


def find_threshold(
    tasks: str | tuple[str, ...] = "max",
    measure: str | None = None,
    storage: str | None = None,
    *,
    study: str | None = None,
    workers: int = 1,
    trials_at_once: int | None = None,
    device: str = "auto",
    heartbeat_s: int | None = None,
    cache_dir: str | Path | None = None,
    on_run: Callable[[dict, dict], None] | None = None,
    **options,
) -> dict | None:
    """Locate the learning transition of ``tasks`` (measured on ``measure``, default the hardest
    op), as ``threshold find`` does, and return its estimate.

    The study lives in ``storage`` (default: :func:`threshold.config.resolve_storage`'s,
    ``$THRESHOLD_STORAGE`` or one SQLite file); calling again with the same settings resumes it.
    ``options`` are the other settings of ``threshold find`` by their long names (the task's,
    the search's and the recipe's: :data:`threshold.options.SETTINGS`), e.g. ``mod``, ``d_hi``,
    ``recipe`` ("fast", "small" or "paper"), ``weight_decay``, ``checkpoints`` ((0.25, 0.5, 1) or
    "0.25,0.5,1"), ``weights`` ("add=2"). ``workers`` processes train
    (``trials_at_once`` trials each at once, on ``device``): :class:`threshold.config.Execution`.
    ``on_run(run, study)`` is called as each run ends: ``run`` a dict (``number``, ``state``,
    ``d_model``, ``params_total``, ``seed``, ``accuracy``, ``stop_reason``, ``seconds``),
    ``study`` the study then (its ``estimate`` and every trial); nothing is printed.

    Returns the estimate stored on the study: ``params_p80`` (the posterior's median of the 80%
    point in parameters), ``interval_params`` (its 90% interval), ``d_p80``, ``midpoint_params``,
    ``asymptote``, ``n_runs`` and more, and whether the runs locate it: ``located`` (True where
    at least two runs on each side of it fall where the posterior says); else ``bound`` (its
    ``kind``, "lower bound" (the point lies above ``params``, at d ``d``), "upper bound" (at or
    below it) or "none", as :func:`threshold.search.bounds.locate` gives it) and the
    ``params_p80`` beside it is the prior's reach, context only. ``answer`` says it in one line,
    as ``threshold find`` does. None when no run completed. Bad settings and arguments raise
    :class:`ConfigError` before anything is written; an interrupt stops the workers and raises
    KeyboardInterrupt.
    """
    if on_run is not None and not callable(on_run):
        raise ConfigError(
            f"on_run {on_run!r} is not callable: give a function of (run, study), or None"
        )
    unknown = sorted(set(options) - set(SETTINGS))
    if unknown:
        raise ConfigError(
            f"find_threshold() has no option {unknown[0]!r}: use {', '.join(SETTINGS)}"
        )
    for key, value in options.items():  # the command line's kinds, checked as it checks them
        if value is not None:
            _check_kind(SETTINGS[key], value)
    settings = StudySettings.from_options(tasks=tasks, measure=measure, **options)
    execution = Execution().but(
        storage=storage,
        workers=workers,
        trials_at_once=trials_at_once,
        device=device,
        heartbeat_s=heartbeat_s,
        cache_dir=cache_dir,
    )
    outcome = run_search(settings, execution, study, poll_s=1.0, on_run=on_run)
    return _result(outcome.estimate, outcome.answer)


def _result(estimate: dict | None, ans: dict | None) -> dict | None:
    """The estimate with whether the runs locate it, its bound if not, and its one line."""
    if estimate is None:
        return None
    located = bool(ans and ans["located"])
    bound = None if located or ans is None else {k: ans[k] for k in ("kind", "params", "d")}
    return estimate | {"located": located, "bound": bound, "answer": answer_words(ans)}


def find_transition(
    objective: Callable | str,
    sizes: str | Iterable[int],
    *,
    params: Iterable[int] | Callable[[int], int] | None = None,
    chance: float,
    level: float = 0.8,
    chance_corrected: bool = False,
    precision: float = 2.5,
    budget: int = 40,
    bracket: tuple[int, int] | None = None,
    seed: int = 0,
    size_name: str = "size",
    storage: str | None = None,
    study: str | None = None,
    workers: int = 1,
    heartbeat_s: int | None = None,
    oversubscribe: bool = False,
) -> dict:
    """Locate the transition of anyone's experiment: the smallest size at which
    ``objective(size, seed)`` reaches ``level`` x its asymptotic accuracy, with the sampler,
    posterior and stop of :func:`find_threshold`.

    ``objective`` trains a model of ``size`` with ``seed`` and returns its accuracy (a number
    in [0, 1], or a dict with ``accuracy`` and other metrics, recorded on the trial); a function
    or its import path ``"pkg.module:function"``. ``sizes``: ``"4..256"``, ``"4,8,16"`` or the
    integers; ``params`` the parameter count of each size (a list in their order, or a function
    of the size; default the size itself: the search works in ln of it); ``chance`` the accuracy
    of a run that learns nothing; ``bracket`` the first sizes run (default the smallest and the
    largest); ``size_name`` the size axis in your words, as reports show it. The study lives in
    ``storage`` (default: ``$THRESHOLD_STORAGE`` or one SQLite file) under ``study`` (default:
    derived from the settings); calling again resumes it. ``workers`` 1 calls the objective in
    this process; K > 1 starts K processes that import it by its path; 0 creates the study and
    runs nothing (:func:`ask` and :func:`tell`, or ``threshold worker`` elsewhere, run it).

    Returns the estimate, as :func:`find_threshold`'s (``params_p80``, ``interval_params``,
    ``d_p80`` the size, ``located`` or ``bound``, ``answer``), with ``study``: its name (alone
    where no run completed). An interrupt fails the running trial, to be run again on resuming,
    and raises KeyboardInterrupt.
    """
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 0:
        raise ConfigError(f"workers {workers!r} is not allowed: give 0 or more")
    if isinstance(objective, str) and workers == 0 and ":" not in objective:
        path = objective  # a name for runs launched elsewhere: nothing imports it
    else:
        path = objective_path(objective)
    if path is None:
        if workers > 1:
            raise ConfigError(
                f"objective {objective!r} cannot be imported by a worker process: give its "
                "import path, 'pkg.module:function', of a function in a module, or workers=1"
            )
        path = f"{getattr(objective, '__module__', '')}:{getattr(objective, '__qualname__', '')}"
    settings = ObjectiveSettings.make(
        path,
        sizes,
        params,
        chance=chance,
        level=level,
        chance_corrected=chance_corrected,
        precision=precision,
        budget=budget,
        bracket=bracket,
        seed=seed,
        size_name=size_name,
    )
    execution = Execution().but(
        storage=storage,
        workers=max(workers, 1),
        device="cpu",
        heartbeat_s=heartbeat_s,
        oversubscribe=oversubscribe,
    )
    if workers != 1:
        outcome = run_search(settings, execution, study, poll_s=1.0, create_only=workers == 0)
        return (_result(outcome.estimate, outcome.answer) or {}) | {"study": outcome.study}
    name, url = prepare_study(settings, execution, study)
    fn = objective if callable(objective) else load_objective(path)
    try:
        objective_run.run_objective_worker(name, url, fn, execution.heartbeat_s)
    except KeyboardInterrupt:
        raise Interrupted(name) from None
    final = snapshot(url, name)
    return (_result(final["estimate"], final["answer"]) or {}) | {"study": name}


def ask(study: str, storage: str | None = None, n: int = 1) -> dict:
    """The next ``n`` runs of an objective's study (made by :func:`find_transition` or
    ``threshold find --objective``), each ``{"trial", "size", "seed", "params"}``: train
    them anywhere, then :func:`tell` each. ``stop`` says why fewer came (else None)."""
    return objective_run.ask(study, resolve_storage(storage), n)


def tell(
    study: str,
    trial: int,
    accuracy: float | dict | None = None,
    storage: str | None = None,
    failed: bool = False,
) -> dict:
    """Record trial ``trial``'s accuracy (or a dict with ``accuracy`` and metrics), or that
    it ``failed``; returns the study's estimate, its answer, located or bound, and status."""
    out = objective_run.tell(study, resolve_storage(storage), trial, accuracy, failed)
    return out | {"answer_words": answer_words(out["answer"])}


_KIND_WORDS = {bool: "True or False", int: "an integer", float: "a number", str: "a string"}


def _check_kind(option: Option, value) -> None:
    """Refuse ``value`` unless it has the option's kind (an int where a float goes is fine; a
    bool is not a number); a list, or pairs, as text or as a sequence (a dict)."""
    if option.text:
        plain = (str, dict) if option.kind is dict else (str, tuple, list)
        if not isinstance(value, plain):
            raise ConfigError(
                f"{option.name} {value!r} is not allowed: give a string like "
                f"{EXAMPLES.get(option.name, '1,2')!r}, or a {plain[1].__name__}"
            )
        return
    allowed = {bool: (bool,), int: (int,), float: (int, float), str: (str,)}[option.kind]
    if not isinstance(value, allowed) or (option.kind is not bool and isinstance(value, bool)):
        raise ConfigError(
            f"{option.name} {value!r} is not allowed: give {_KIND_WORDS[option.kind]}"
        )
