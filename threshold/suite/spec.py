"""Suite files: a list of studies, transfer experiments, analyses and reports in one TOML file.

A suite (``studies/NAME.toml``) is ``threshold find`` written down: each ``[[study]]`` holds the
settings that ``find`` takes as options (``tasks``, ``measure``, ``mod``, ``steps``, ``budget``,
``d_hi``, ``pretrain``, ...) under a unique ``label``; a ``[defaults]`` table is merged into every
study (a study's own value wins). ``[[transfer]]`` tables are ``threshold transfer`` experiments,
``[[analysis]]`` and ``[[comparison]]`` tables are ``threshold analyze`` runs on the studies,
``[[survey]]`` tables ``threshold survey`` (every learned run of a study scored), and ``[[report]]``
tables add reports with their own baseline to the report of every study.

This module holds what a suite is: the keys each table takes with the kind of their values, and
the checked result (:class:`Suite` and the dataclasses of its parts). Reading and checking a file
is :mod:`threshold.suite.parse`; finding the line of a key is :mod:`threshold.suite.toml_lines`.
No torch or Optuna at import.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from threshold.errors import ConfigError
from threshold.suite.toml_lines import find_line
from threshold.tasks import TaskConfig

if TYPE_CHECKING:
    from threshold.search.study import StudySettings

__all__ = [
    "ALL_REPORT",
    "Analysis",
    "Comparison",
    "ReportSpec",
    "Suite",
    "SuiteError",
    "SuiteStudy",
    "Survey",
    "TransferSpec",
]

ALL_REPORT = "all"  # the report of every study, with the suite's baseline: always written
PICKS = ("at-transition", "largest")  # threshold.search.results.PICKS (a test keeps them equal)
MATCHES = ("size", "accuracy")  # `threshold analyze --compare --match`

# Value kinds, as a person reads them in an error message.
STR, INT, FLOAT, BOOL = "a string", "an integer", "a number", "true or false"
STRS, INTS, TABLE, TABLES = "a list of strings", "a list of integers", "a table", "[[tables]]"
EXAMPLES = {
    STR: '"text"',
    INT: "3",
    FLOAT: "2.5",
    BOOL: "true",
    STRS: '["max", "med"]',
    INTS: "[0, 1, 2]",
}

# The options of `threshold find`, by the config they go to.
TASK_KEYS = {
    "testbed": STR,  # listops or perm
    "tasks": STRS,  # the mixture
    "measure": STR,  # the op whose accuracy is the run's number (default: the hardest)
    "mod": INT,  # modulus n (listops) or degree k (perm)
    "depth": INT,
    "arity": STR,  # "MIN-MAX", as --arity
    "p_nest": FLOAT,
    "n_train": INT,
    "n_test": INT,
    "split_seed": INT,
}
TRAIN_KEYS = {"steps": INT}
SEARCH_KEYS = {
    "budget": INT,
    "precision": FLOAT,
    "d_lo": INT,
    "d_hi": INT,
    "level": FLOAT,
    "chance_corrected": BOOL,
    "seed": INT,  # the base seed run seeds derive from
}
SETTING_KEYS = {**TASK_KEYS, **TRAIN_KEYS, **SEARCH_KEYS, "pretrain": STRS}
STUDY_KEYS = {"label": STR, **SETTING_KEYS}
TRANSFER_KEYS = {
    "label": STR,
    **TASK_KEYS,
    "pretrain": STRS,
    "d": INT,
    "seeds": INTS,
    "steps": INT,
    "pretrain_steps": INT,
}
ANALYSIS_KEYS = {"study": STR, "pick": STR, "d": INT}
COMPARISON_KEYS = {"studies": STRS, "match": STR, "d": INT}
SURVEY_KEYS = {"study": STR, "min_accuracy": FLOAT}
REPORT_KEYS = {"name": STR, "baseline": STR, "studies": STRS, "transfers": STRS}
TOP_KEYS = {
    "name": STR,
    "description": STR,
    "storage": STR,
    "workers": INT,
    "batch": INT,
    "heartbeat": INT,
    "reports": STR,  # the folder of the suite's reports
    "baseline": STR,
    "defaults": TABLE,
    "study": TABLES,
    "transfer": TABLES,
    "analysis": TABLES,
    "comparison": TABLES,
    "survey": TABLES,
    "report": TABLES,
}
ARRAY_KEYS = {
    "study": STUDY_KEYS,
    "transfer": TRANSFER_KEYS,
    "analysis": ANALYSIS_KEYS,
    "comparison": COMPARISON_KEYS,
    "survey": SURVEY_KEYS,
    "report": REPORT_KEYS,
}
LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")  # no commas: --only takes a comma list


class SuiteError(ConfigError):
    """A suite file is not valid: the message is ``FILE:LINE: ...`` naming the key and the fix."""


@dataclass(frozen=True)
class SuiteStudy:
    """One ``[[study]]``: its label and the settings of its Optuna study."""

    label: str
    settings: StudySettings
    line: int  # of its [[study]] header

    @property
    def name(self) -> str:
        """The Optuna study name: derived from (a hash of) every setting, as ``find`` does."""
        return self.settings.default_name()


@dataclass(frozen=True)
class TransferSpec:
    """One ``[[transfer]]``: pretrain on ``pretrain``, continue on ``task``, vs from scratch."""

    label: str
    pretrain: tuple[str, ...]
    task: TaskConfig  # the target
    d: int  # embedding size of every model
    seeds: tuple[int, ...] = (0, 1, 2)
    steps: int = 20_000  # most steps on the target (as `threshold transfer --steps`)
    pretrain_steps: int = 20_000  # most pretraining steps
    line: int = 0

    def key(self) -> str:
        """A hash of every setting: the file of its result is named by it."""
        blob = json.dumps(
            [
                list(self.pretrain),
                self.task.to_dict(),
                self.d,
                list(self.seeds),
                self.steps,
                self.pretrain_steps,
            ],
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:8]


@dataclass(frozen=True)
class Analysis:
    """One ``[[analysis]]``: ``threshold analyze STUDY --at-transition|--largest|--d-model D``."""

    study: str  # label
    pick: str = "at-transition"
    d: int | None = None  # the best run at this d instead of ``pick``
    line: int = 0


@dataclass(frozen=True)
class Comparison:
    """One ``[[comparison]]``: ``threshold analyze --compare A B --match size|accuracy``."""

    studies: tuple[str, str]  # labels
    match: str = "size"
    d: int | None = None  # with match = "size": this d (default: the largest d both ran)
    line: int = 0


@dataclass(frozen=True)
class Survey:
    """One ``[[survey]]``: ``threshold survey STUDY --min-accuracy A``."""

    study: str  # label
    min_accuracy: float = 0.7
    line: int = 0


@dataclass(frozen=True)
class ReportSpec:
    """One report folder: studies (labels), transfer experiments (labels) and a baseline."""

    name: str
    studies: tuple[str, ...]
    transfers: tuple[str, ...] = ()
    baseline: str | None = None  # label of the study the reduction factors divide
    line: int = 0


@dataclass(frozen=True)
class Suite:
    path: Path
    name: str
    studies: tuple[SuiteStudy, ...]
    description: str = ""
    storage: str | None = None  # None: --storage, else $THRESHOLD_STORAGE, else the default
    workers: int = 1  # worker processes per study (one torch thread each)
    batch: int = 1  # trials a worker trains at once as one batch (find --batch)
    heartbeat: int = 30  # seconds between worker heartbeats
    reports_dir: Path = Path("reports")  # the `reports` key: one sub-folder per report
    baseline: str | None = None  # label: the baseline of the report of every study
    transfers: tuple[TransferSpec, ...] = ()
    analyses: tuple[Analysis, ...] = ()
    comparisons: tuple[Comparison, ...] = ()
    surveys: tuple[Survey, ...] = ()
    reports: tuple[ReportSpec, ...] = ()  # the report of every study first
    source: str = field(default="", repr=False, compare=False)  # the file's text
    lines: dict = field(default_factory=dict, repr=False, compare=False)  # key_lines(source)

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(s.label for s in self.studies) + tuple(t.label for t in self.transfers)

    def study(self, label: str) -> SuiteStudy:
        return next(s for s in self.studies if s.label == label)

    def line_of(self, key: str) -> int:
        """The line of a top-level key, else 1."""
        return find_line(self.lines, ("", None, key))

    def select(self, only: Iterable[str] | None) -> Suite:
        """The suite with only the studies and transfers labelled ``only`` (all when None).

        Analyses, comparisons and surveys are kept when every study they name is kept; the
        reports stay whole (they show every study of the suite that exists in the storage).
        """
        if only is None:
            return self
        wanted = list(dict.fromkeys(only))
        unknown = [label for label in wanted if label not in self.labels]
        if not wanted or unknown:
            raise ConfigError(
                f"--only {','.join(unknown) or repr('')} is not a label of suite {self.name!r}: "
                f"use labels from {', '.join(self.labels)}"
            )
        keep = set(wanted)
        return replace(
            self,
            studies=tuple(s for s in self.studies if s.label in keep),
            transfers=tuple(t for t in self.transfers if t.label in keep),
            analyses=tuple(a for a in self.analyses if a.study in keep),
            comparisons=tuple(c for c in self.comparisons if set(c.studies) <= keep),
            surveys=tuple(v for v in self.surveys if v.study in keep),
        )
