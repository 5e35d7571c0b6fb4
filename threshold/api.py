"""The Python API's one call: :func:`find_threshold`, ``threshold find`` without the command line.

It loads the search (Optuna, SQLAlchemy, scipy) at import; the package's front door
(``threshold/__init__.py``), which every module of the package runs first, hands it out on first
use so that ``import threshold.tasks`` loads none of it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from threshold.config import Execution
from threshold.errors import ConfigError
from threshold.options import EXAMPLES, SETTINGS, Option
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
    if outcome.estimate is None:
        return None
    ans = outcome.answer
    located = bool(ans and ans["located"])
    bound = None if located or ans is None else {k: ans[k] for k in ("kind", "params", "d")}
    return outcome.estimate | {"located": located, "bound": bound, "answer": answer_words(ans)}


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
