"""What a worker hands optuna-dashboard: a study's note in words and its figure (``NOTE_RENDER``).

The figure needs plotly, a dependency of the project that a lent GPU machine goes without (it
runs the working tree with the fewest wheels a lend needs, ``.ci/wheels``): there the note is
written without its figure, and the figure comes with the next note written here.
"""

from __future__ import annotations

from threshold.report.notes import note_markdown, result_words
from threshold.search.notes import NoteRender

try:
    from threshold.report.note_figure import transition_figure
except ImportError:  # no plotly: the note without its figure
    transition_figure = None

__all__ = ["NOTE_RENDER"]

NOTE_RENDER = NoteRender(note_markdown, transition_figure, result_words)
