"""The search's benchmarks, apart from the search itself: simulated studies of the sampler
against a dense grid, an oracle and the Ψ-method (:mod:`~.benchmark`, :mod:`~.families`,
:mod:`~.simulate`, :mod:`~.fit_oracle`, :mod:`~.psi`, :mod:`~.bench_table`), replays of real
recorded grids (:mod:`~.recorded`, :mod:`~.replay`, :mod:`~.stops`, :mod:`~.peer`), and the
lend of a GPU (:mod:`~.gpu`, ``threshold bench gpu``). Nothing in the search imports from here.
Import from the modules.
"""

__all__: list[str] = []
