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
import inspect
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from threshold.config import Execution
from threshold.errors import ConfigError
from threshold.options import EXECUTION, TASK, Option, only
from threshold.search.spec import StudySettings
from threshold.suite.toml_lines import find_line
from threshold.tasks import TaskConfig

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
PAIRS = "a table or its text"  # weights: { add = 2 }, or "add=2" as on the command line
EXAMPLES = {
    STR: '"text"',
    INT: "3",
    FLOAT: "2.5",
    BOOL: "true",
    STRS: '["max", "med"]',
    INTS: "[0, 1, 2]",
    TABLE: "{ name = 1 }",
    PAIRS: "{ add = 2 }",
}


def setting_kinds(options: Iterable[Option]) -> dict[str, str | None]:
    """The settings ``options`` (:mod:`threshold.options`) as suite keys, each with the kind of
    TOML value it takes; None where the setting checks its value itself (a list of numbers)."""
    kinds = {(int, False): INT, (float, False): FLOAT, (bool, False): BOOL, (str, False): STR}
    kinds |= {(dict, False): PAIRS, (str, True): STRS, (int, True): INTS}
    return {o.name: kinds.get((o.kind, o.listed)) for o in options}


def option_values(values: dict, function: Callable) -> dict:
    """``values`` (a table's settings as TOML read them) as keyword arguments of ``function``, in
    the types it takes: a TOML list as a tuple (as one comma string ``"a,b"`` for an option that
    takes only a string), and the same inside lists and tables. Keys that are not its parameters
    are left out, unless it takes ``**kwargs``: then they are passed for it to check."""
    params = inspect.signature(function).parameters
    more = takes_more(function)
    return {
        key: _option(value, _types(params[key].annotation) if key in params else frozenset())
        for key, value in values.items()
        if key in params or more
    }


def takes_more(function: Callable) -> bool:
    """Whether ``function`` takes ``**kwargs``: keyword arguments other than those it names."""
    params = inspect.signature(function).parameters.values()
    return any(p.kind is p.VAR_KEYWORD for p in params)


def _types(annotation: object) -> frozenset[str]:
    """The types an annotation unites, as written, ``None`` dropped: {'str', 'tuple[str, ...]'}."""
    if annotation is inspect.Parameter.empty:
        return frozenset()
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text + "|"):
        depth += (char == "[") - (char == "]")
        if char == "|" and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    return frozenset(p for p in parts if p not in ("None", "NoneType", ""))


def _option(value: object, types: frozenset[str]) -> object:
    if isinstance(value, list):
        if types and all(t == "str" for t in types) and all(isinstance(v, str) for v in value):
            return ",".join(value)
        return tuple(_option(v, frozenset()) for v in value)
    if isinstance(value, dict):
        return {k: _option(v, frozenset()) for k, v in value.items()}
    return value


# A study's settings are those of threshold.options, read by the parser (threshold.suite.parse)
# when it reads a file; a transfer's task, the task's.
TASK_KEYS = setting_kinds(TASK)
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
# The execution settings a suite names once, at its top (threshold.options.EXECUTION).
EXECUTION_KEYS = only(EXECUTION, "storage", "workers", "trials_at_once", "heartbeat")
TOP_KEYS = {
    "name": STR,
    "description": STR,
    **setting_kinds(EXECUTION_KEYS),
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
ARRAY_KEYS = ("study", "transfer", "analysis", "comparison", "survey", "report")  # [[tables]]
LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")  # no commas: --only takes a comma list


class SuiteError(ConfigError):
    """A suite file is not valid: the message is ``FILE:LINE: ...`` naming the key and the fix."""


@dataclass(frozen=True)
class SuiteStudy:
    """One ``[[study]]``: its label and the settings of its Optuna study."""

    label: str
    settings: StudySettings
    line: int  # of its [[study]] header
    pinned: str | None = None  # the file's ``name``: a study kept under it as its budget changes

    @property
    def name(self) -> str:
        """The Optuna study name: the file's ``name`` where it gives one, else derived from (a
        hash of) every setting, as ``find`` does."""
        return self.pinned or self.settings.default_name()


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
    # its storage, workers, trials_at_once and heartbeat keys (storage None: --storage, else
    # $THRESHOLD_STORAGE, else the default); the command line's options override them
    execution: Execution = field(default_factory=Execution)
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
