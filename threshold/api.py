"""The Python API's one call: :func:`find_threshold`, ``threshold find`` without the command line.

It loads the search (Optuna, SQLAlchemy, scipy) at import; the package's front door
(``threshold/__init__.py``), which every module of the package runs first, hands it out on first
use so that ``import threshold.tasks`` loads none of it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path

from threshold.config import MODEL_FIELDS, TASK_FIELDS, TRAIN_FIELDS, Execution
from threshold.errors import ConfigError
from threshold.search.bounds import answer_words
from threshold.search.find import run_search
from threshold.search.spec import StudySettings

__all__ = ["find_threshold"]


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

    The study lives in ``storage`` (default ``$THRESHOLD_STORAGE`` or
    ``sqlite:///studies/threshold.db``); calling again with the same settings resumes it.
    ``options`` are the other settings of ``threshold find`` by their long names: ``mod``,
    ``testbed``, ``depth``, ``arity`` ("2-3"), ``p_nest``, ``n_train``, ``n_test``,
    ``split_seed``, ``steps``, ``d_lo``, ``d_hi``, ``precision``, ``budget``, ``level``,
    ``chance_corrected``, ``seed``, ``pretrain`` ("max,med"), ``weights`` ("add=2"),
    ``match_exposure``, ``recipe`` ("fast" or "paper") and any recipe field (``weight_decay``,
    ``init_std``, ``checkpoints``, ...: threshold.config). ``workers`` processes train
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
    params = inspect.signature(StudySettings.from_options).parameters
    named = [k for k, p in params.items() if p.kind != inspect.Parameter.VAR_KEYWORD]
    known = [*named, *TRAIN_FIELDS, *MODEL_FIELDS, *TASK_FIELDS]  # recipe fields: **overrides
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ConfigError(f"find_threshold() has no option {unknown[0]!r}: use {', '.join(known)}")
    for key, value in options.items():  # the command line's types, checked as it checks them
        if key in params and params[key].default is not None:
            _check_kind(key, value, params[key].default)
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
    if outcome.estimate is None:
        return None
    ans = outcome.answer
    located = bool(ans and ans["located"])
    bound = None if located or ans is None else {k: ans[k] for k in ("kind", "params", "d")}
    return outcome.estimate | {"located": located, "bound": bound, "answer": answer_words(ans)}


_KIND_WORDS = {bool: "True or False", int: "an integer", float: "a number", str: "a string"}


def _check_kind(key: str, value, default) -> None:
    """Refuse ``value`` for option ``key`` unless it has the kind of its default (an int where
    a float goes is fine; a bool is not a number)."""
    kinds = {bool: (bool,), int: (int,), float: (int, float), str: (str,)}
    allowed = kinds.get(type(default))
    if allowed is None:
        return
    fits = isinstance(value, allowed) and (type(default) is bool or not isinstance(value, bool))
    if not fits:
        raise ConfigError(
            f"{key} {value!r} is not allowed: give {_KIND_WORDS[type(default)]}, like {default!r}"
        )
