"""threshold: find the smallest recurrent transformer that learns a task mixture.

From Python::

    import threshold
    estimate = threshold.find_threshold(tasks="max,med,add", measure="add", budget=20)
    estimate["params_p80"], estimate["interval_params"]
"""

from __future__ import annotations

from pathlib import Path

from threshold.errors import CheckpointError, ConfigError, ThresholdError
from threshold.meta import version

__version__ = version()
__all__ = ["CheckpointError", "ConfigError", "ThresholdError", "__version__", "find_threshold"]


def find_threshold(
    tasks: str | tuple[str, ...] = "max",
    measure: str | None = None,
    storage: str | None = None,
    *,
    study: str | None = None,
    workers: int = 1,
    batch: int = 1,
    device: str = "auto",
    heartbeat_s: int = 30,
    cache_dir: str | Path | None = None,
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
    ``init_std``, ``checkpoints``, ...: threshold.config). ``workers`` processes train (``batch``
    trials each at once, on ``device``); ``workers=0`` only creates the study, for workers
    started elsewhere (``threshold worker``, docs/cluster.md).

    Returns the estimate stored on the study: ``params_p80`` (the 80% point in parameters),
    ``interval_params`` (its 90% interval), ``d_p80``, ``midpoint_params``, ``asymptote``,
    ``n_runs`` and more; None when no run completed. Bad settings raise :class:`ConfigError`
    before anything is written; an interrupt stops the workers and raises KeyboardInterrupt.
    """
    import inspect

    from threshold.config import MODEL_FIELDS, TRAIN_FIELDS
    from threshold.search.find import run_search
    from threshold.search.spec import StudySettings

    params = inspect.signature(StudySettings.from_options).parameters
    named = [k for k, p in params.items() if p.kind != inspect.Parameter.VAR_KEYWORD]
    known = [*named, *TRAIN_FIELDS, *MODEL_FIELDS]  # the recipe's fields go to **overrides
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ConfigError(f"find_threshold() has no option {unknown[0]!r}: use {', '.join(known)}")
    settings = StudySettings.from_options(tasks=tasks, measure=measure, **options)
    outcome = run_search(
        settings,
        storage,
        study,
        workers=workers,
        batch=batch,
        device=device,
        heartbeat_s=heartbeat_s,
        cache_dir=None if cache_dir is None else Path(cache_dir),
        poll_s=1.0,
    )
    return outcome.estimate
