"""A study's note and figure where optuna-dashboard reads them, written without importing it.

optuna-dashboard keeps a study's Markdown note and its custom plotly figures in the study's
system attributes, each cut into pieces of at most 2,045 characters (an attribute's limit on
some storages), the note with a version number. Importing ``optuna_dashboard`` loads its web
server and, through Optuna's fANOVA importance, scikit-learn: 1-1.5 s of CPU in every worker
process, and a worker writes its study's note after each run. These functions write and read
the keys of its ``save_note``, ``get_note`` and ``save_plotly_graph_object`` (optuna-dashboard
0.21); ``tests/test_search_notes.py`` reads what they write with optuna-dashboard's own code.

They reach the study's system attributes through ``study._storage``, as optuna-dashboard's own
functions do: Optuna 5 has no public way to them from a study (``Study.set_system_attr`` and
``Study.system_attrs`` are gone), and the dashboard reads a note and figures from nowhere else
(user attributes it lists as such, not as the note).
"""

from __future__ import annotations

import math

import optuna

__all__ = ["get_note", "save_figure", "save_note"]

PIECE = 2045  # characters an attribute holds (optuna-dashboard's SYSTEM_ATTR_MAX_LENGTH)
NOTE_VERSION = "dashboard:note_ver"
NOTE_PIECES = "dashboard:note_str:"  # + piece number
FIGURE_PIECES = "dashboard:plot_data:"  # + figure id + ":" + piece number


def get_note(study: optuna.Study) -> str:
    """The study's note ("" when it has none)."""
    attrs = study._storage.get_study_system_attrs(study._study_id)
    if NOTE_VERSION not in attrs:
        return ""
    return _joined(attrs, NOTE_PIECES)


def save_note(study: optuna.Study, body: str) -> None:
    """Write ``body`` as the study's note, one version up."""
    storage, study_id = study._storage, study._study_id
    attrs = storage.get_study_system_attrs(study_id)
    storage.set_study_system_attr(study_id, NOTE_VERSION, attrs.get(NOTE_VERSION, 0) + 1)
    _write(storage, study_id, attrs, NOTE_PIECES, body)


def save_figure(study: optuna.Study, figure_id: str, figure_json: str) -> None:
    """Write a plotly figure (its ``to_json()``) as the study's figure ``figure_id``, in place
    of an earlier one of that id."""
    storage, study_id = study._storage, study._study_id
    attrs = storage.get_study_system_attrs(study_id)
    _write(storage, study_id, attrs, f"{FIGURE_PIECES}{figure_id}:", figure_json)


def _write(storage, study_id: int, attrs: dict, prefix: str, text: str) -> None:
    """``text`` in pieces under ``prefix``; the pieces of a longer earlier text emptied (the
    reader joins as many pieces as there are keys)."""
    n = math.ceil(len(text) / PIECE)
    for i in range(n):
        storage.set_study_system_attr(study_id, f"{prefix}{i}", text[i * PIECE : (i + 1) * PIECE])
    before = sum(key.startswith(prefix) for key in attrs)
    for i in range(n, before):
        storage.set_study_system_attr(study_id, f"{prefix}{i}", "")


def _joined(attrs: dict, prefix: str) -> str:
    count = sum(key.startswith(prefix) for key in attrs)
    return "".join(attrs[f"{prefix}{i}"] for i in range(count))
