"""Transition search: the maths (grid posterior, policy, fit, benchmark) and the Optuna side.

A package face only: it re-exports nothing, so importing any one module of the search (the
settings of a study, the record) loads that module and what it needs, not the whole search (the
benchmark and the simulator load scipy.optimize: about 2 s). Import from the modules:

- the maths, plain arrays and numbers, no torch and no Optuna storage: :mod:`~.posterior`
  (:class:`PosteriorSettings`, ``level_fraction``), :mod:`~.policy` (``decide``, ``bracket``,
  ``search_range``), :mod:`~.fit` (``fit_logistic``, ``transition_estimate``),
  :mod:`~.settings` (:class:`SearchSettings`), :mod:`~.simulate` (:class:`ResponseModel`,
  ``make_truth``, ``listops_table``), :mod:`~.benchmark` (``bench_search``, ``METHODS``) and
  :mod:`~.bench_table` (its families table's numbers: ratios to the oracle, intervals);
- a study's settings: :mod:`~.spec` (:class:`StudySettings`);
- the Optuna side: :mod:`~.study` (the only one that opens a storage), :mod:`~.record` (what a
  study stores, read into views), :mod:`~.sampler` (the adapter), :mod:`~.worker`, :mod:`~.find`
  (a search's worker processes, followed).
"""

__all__: list[str] = []
