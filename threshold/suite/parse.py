"""Reading and checking a suite file: everything is checked before anything runs.

An unknown key, a value of the wrong type, a duplicate label, a reference to a label the suite does
not define and every setting the config dataclasses refuse are a :class:`SuiteError` whose message
is one line, ``FILE:LINE: ...``, naming the key and the fix. A study's keys are the settings of
:mod:`threshold.options` (``find``'s options), passed to ``StudySettings.from_options``, the one
mapping from them to a study, so a suite study and a ``find`` run with the same settings are one
study (its name is a hash of every setting); a setting added there is a suite key with no change
here. An error it raises is put on the line of the key it is about: the
key whose value, left out, lets the settings build (else changes the error). No torch or Optuna at
import: the settings' module (:mod:`threshold.search.spec`) loads numpy and scipy only.
"""

from __future__ import annotations

import difflib
import json
import re
import tomllib
from collections.abc import Callable
from pathlib import Path

from threshold.config import TrainConfig, pretrain_task, transfer_model_config
from threshold.errors import ConfigError
from threshold.options import SETTINGS, execution_of
from threshold.search.spec import StudySettings
from threshold.suite.spec import (
    ALL_REPORT,
    ANALYSIS_KEYS,
    ARRAY_KEYS,
    BOOL,
    COMPARISON_KEYS,
    EXAMPLES,
    EXECUTION_KEYS,
    FLOAT,
    INT,
    INTS,
    LABEL,
    MATCHES,
    PAIRS,
    PICKS,
    REPORT_KEYS,
    STR,
    STRS,
    SURVEY_KEYS,
    TABLE,
    TASK_KEYS,
    TOP_KEYS,
    TRANSFER_KEYS,
    Analysis,
    Comparison,
    ReportSpec,
    Suite,
    SuiteError,
    SuiteStudy,
    Survey,
    TransferSpec,
    option_values,
    setting_kinds,
)
from threshold.suite.toml_lines import KEY, find_line, key_lines, unquote
from threshold.tasks import TaskConfig

__all__ = ["load_suite", "parse_suite"]

# What building a study's settings may raise for a value in the file: the dataclasses' checks,
# and a value of a kind the suite does not check (an option whose annotation names no TOML kind).
_REFUSALS = (ConfigError, TypeError, ValueError)

# The keys a dataclass field is written as, where not by its own name: an error that names its
# fields (ConfigError.fields) is put on the line of one of their keys, tried first.
_FIELD_KEYS = {
    "ops": ("tasks",),
    "n": ("mod",),
    "arity_min": ("arity",),
    "base_seed": ("seed",),
    "max_steps": ("steps", "pretrain_steps"),
    "d_model": ("d", "d_lo"),
}


def load_suite(path: Path | str) -> Suite:
    """Read, parse and check the suite file at ``path``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SuiteError(
            f"{path}: no such suite file: give the path of a suite, e.g. studies/cpu.toml"
        ) from None
    except IsADirectoryError:
        raise SuiteError(
            f"{path}: is a directory: give a suite file, e.g. studies/cpu.toml"
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise SuiteError(
            f"{path}: cannot be read ({_one_line(e)}): give a UTF-8 TOML file"
        ) from None
    return parse_suite(text, path)


def parse_suite(text: str, path: Path | str = "suite.toml") -> Suite:
    """The suite written in ``text`` (``path`` names it in messages), checked."""
    return _Parser(text, Path(path)).suite()


class _Parser:
    def __init__(self, text: str, path: Path) -> None:
        self.text, self.path = text, path
        self.lines: dict = {}
        self.setting_keys: dict[str, str | None] = {}  # of a study: threshold.options.SETTINGS
        self.seen: dict[str, int] = {}  # labels of studies and transfers -> their lines

    def fail(self, line: int, message: str) -> SuiteError:
        return SuiteError(f"{self.path}:{line}: {_one_line(message)}")

    def line(self, table: str, index: int | None, key: str | None = None) -> int:
        return find_line(self.lines, (table, index, key), (table, index, None), ("", None, table))

    # -- the file

    def suite(self) -> Suite:
        try:
            data = tomllib.loads(self.text)
        except tomllib.TOMLDecodeError as e:
            raise self._syntax_error(e) from None
        self.lines = key_lines(self.text)
        self.check_keys(data, TOP_KEYS, "", None, "at the top level")
        top = {k: v for k, v in data.items() if k != "defaults" and k not in ARRAY_KEYS}
        self.check_types(top, TOP_KEYS, "", None, "at the top level")
        defaults = data.get("defaults", {})
        if not isinstance(defaults, dict):
            raise self.fail(
                self.line("", None, "defaults"),
                "key 'defaults' must be a table: write a [defaults] header",
            )
        self.setting_keys = setting_kinds(SETTINGS.values())
        self.check_keys(defaults, self.setting_keys, "defaults", None, "in [defaults]")
        self.check_types(defaults, self.setting_keys, "defaults", None, "in [defaults]")
        tables = {name: self.array(data, name) for name in ARRAY_KEYS}
        if not tables["study"]:
            raise self.fail(
                1,
                "the suite has no [[study]]: add one, e.g. a [[study]] table with "
                'label = "add" and tasks = ["add"]',
            )
        name = top.get("name", self.path.stem)
        if not LABEL.match(name):
            raise self.fail(
                self.line("", None, "name"),
                f"name {name!r} is not allowed: use letters, digits and . _ + -",
            )
        given: dict = {}
        execution = execution_of(given)
        for key in (o.name for o in EXECUTION_KEYS if o.name in top):
            given[key] = top[key]
            try:  # one key at a time, so a refusal is put on its line
                execution = execution_of(given)
            except ConfigError:
                raise self.fail(
                    self.line("", None, key),
                    f"key {key!r} = {top[key]} is not allowed: use 1 or more",
                ) from None

        studies = self.studies(tables["study"], defaults)
        transfers = self.transfers(tables["transfer"], defaults)
        labels = [s.label for s in studies]
        baseline = top.get("baseline")
        if baseline is not None:
            self.check_label(baseline, labels, self.line("", None, "baseline"), "baseline")
        everything = ReportSpec(
            ALL_REPORT, tuple(labels), tuple(t.label for t in transfers), baseline
        )
        extra = self.reports(tables["report"], labels, [t.label for t in transfers])
        return Suite(
            path=self.path,
            name=name,
            description=top.get("description", ""),
            execution=execution,
            reports_dir=Path(top.get("reports", f"reports/{name}")),
            baseline=baseline,
            studies=tuple(studies),
            transfers=tuple(transfers),
            analyses=tuple(self.analyses(tables["analysis"], labels)),
            comparisons=tuple(self.comparisons(tables["comparison"], labels)),
            surveys=tuple(self.surveys(tables["survey"], labels)),
            reports=(everything, *extra),
            source=self.text,
            lines=self.lines,
        )

    def _syntax_error(self, e: tomllib.TOMLDecodeError) -> SuiteError:
        message = str(e)
        rows = self.text.splitlines()
        where = re.search(r"\s*\(at line (\d+), column (\d+)\)", message)
        if where is not None:
            line, column = int(where.group(1)), int(where.group(2))
            what = f"{message[: where.start()]}, column {column}"
        else:  # "(at end of document)": a value left open; name the last key that began one
            what = re.sub(r"\s*\(at end of document\)", "", message) + " at the end of the file"
            line = next(
                (i + 1 for i in range(len(rows) - 1, -1, -1) if KEY.match(rows[i])), len(rows) or 1
            )
        raw = rows[line - 1] if 0 < line <= len(rows) else ""
        key = KEY.match(raw)
        named = f"key {unquote(key.group(1))!r}: " if key else ""
        return self.fail(
            line, f"{named}not valid TOML ({what}): fix the syntax of `{raw.strip()[:60]}`"
        )

    def array(self, data: dict, name: str) -> list[tuple[int, dict]]:
        value = data.get(name, [])
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise self.fail(
                self.line("", None, name),
                f"key {name!r} must be a list of tables: write one [[{name}]] header per entry",
            )
        return list(enumerate(value))

    # -- checks shared by every table

    def check_keys(
        self,
        table: dict,
        allowed: dict,
        name: str,
        index: int | None,
        where: str,
    ):
        for key in table:
            if key in TOP_KEYS and key not in allowed:  # workers, trials_at_once, storage, ...
                example = f"{key} = {EXAMPLES.get(TOP_KEYS[key], '...')}"
                raise self.fail(
                    self.line(name, index, key),
                    f"key {key!r} {where} is a suite-level setting: set it once at the top of"
                    f" the file, before any table (e.g. {example})",
                )
            if key not in allowed:
                near = difflib.get_close_matches(key, list(allowed), n=1)
                hint = f"did you mean {near[0]!r}? " if near else ""
                raise self.fail(
                    self.line(name, index, key),
                    f"unknown key {key!r} {where}: {hint}use one of {', '.join(allowed)}",
                )

    def check_types(self, table: dict, kinds: dict, name: str, index: int | None, where: str):
        for key, value in table.items():
            kind = kinds.get(key)
            if not _is(value, kind):
                example = f"{key} = {EXAMPLES[kind]}" if kind in EXAMPLES else f"[{key}]"
                raise self.fail(
                    self.line(name, index, key),
                    f"key {key!r} {where} = {_show(value)} is not {kind}: write e.g. {example}",
                )

    def check_label(self, label: str, known: list[str], line: int, key: str) -> None:
        if label not in known:
            raise self.fail(
                line,
                f"key {key!r} names {label!r}, which is not the label of a "
                f"[[study]] in this suite: use one of {', '.join(known)}",
            )

    def table(self, name: str, index: int, entry: dict, kinds: dict) -> str:
        """Check an entry's keys and types; returns how messages name it."""
        label = entry.get("label", entry.get("name"))
        label = label if isinstance(label, str) else None
        where = f"in [[{name}]] {label!r}" if label else f"in [[{name}]] #{index + 1}"
        self.check_keys(entry, kinds, name, index, where)
        self.check_types(entry, kinds, name, index, where)
        return where

    def require(self, entry: dict, key: str, name: str, index: int, where: str, example: str):
        if key not in entry:
            raise self.fail(
                self.line(name, index), f"key {key!r} is missing {where}: add {example}"
            )
        return entry[key]

    def unique_label(self, label: str, line: int) -> None:
        if not LABEL.match(label):
            raise self.fail(
                line,
                f"label {label!r} is not allowed: use letters, digits and . _ + -"
                " (no spaces or commas)",
            )
        if label in self.seen:
            raise self.fail(
                line,
                f"label {label!r} is used twice (first at line "
                f"{self.seen[label]}): give every [[study]] and [[transfer]] "
                "its own label",
            )
        self.seen[label] = line

    def build(self, make: Callable[[dict], object], values: dict, origin: dict, what: str):
        """``make(values)``; what it raises as a SuiteError on the line of the key to blame."""
        try:
            return make(values)
        except _REFUSALS as e:
            raise self.blame(e, make, values, origin, what) from None

    def blame(self, error: Exception, make, values: dict, origin: dict, what: str) -> SuiteError:
        """The key ``error`` is about: the first whose value, left out, lets ``make`` pass, else
        the first whose absence changes the message; the keys of the fields it names tried
        first."""
        message = str(error)
        fields = getattr(error, "fields", ())
        hinted = [key for f in fields for key in _FIELD_KEYS.get(f, (f,))]
        keys = [k for k in dict.fromkeys([*hinted, *values]) if k in values and k != "label"]
        outcomes: dict[str, str | None] = {}
        for key in keys:
            try:
                make({k: v for k, v in values.items() if k != key})
                outcomes[key] = None
            except Exception as e:  # anything: only whether it passes, or how it fails, counts
                outcomes[key] = str(e)
        key = next((k for k in keys if outcomes[k] is None), None)
        key = key or next((k for k in keys if outcomes[k] != message), None)
        if key is None:
            table, index = origin.get("label", ("defaults", None))
            return self.fail(self.line(table, index), f"{what}: {message}")
        return self.fail(
            self.line(*origin[key], key), f"key {key!r} {_in(origin[key], what)}: {message}"
        )

    # -- the tables

    def merged(self, entry: dict, defaults: dict, table: str, index: int):
        values = {**defaults, **entry}
        origin = {k: (table, index) if k in entry else ("defaults", None) for k in values}
        origin["label"] = (table, index)  # the table itself, for messages about no one key
        return values, origin

    def studies(self, entries: list[tuple[int, dict]], defaults: dict) -> list[SuiteStudy]:
        out: list[SuiteStudy] = []
        names: dict[str, str] = {}
        for index, entry in entries:
            kinds = {"label": STR, "name": STR, **self.setting_keys}
            where = self.table("study", index, entry, kinds)
            label = self.require(entry, "label", "study", index, where, 'label = "add"')
            header = self.line("study", index)
            self.unique_label(label, self.line("study", index, "label"))
            values, origin = self.merged(entry, defaults, "study", index)
            if "tasks" not in values:
                raise self.fail(
                    header,
                    f"key 'tasks' is missing in [[study]] {label!r}: add "
                    'tasks = ["add"] to it or to [defaults]',
                )
            settings = self.settings(values, origin, f"[[study]] {label!r}")
            study = SuiteStudy(label, settings, header, entry.get("name"))
            if study.name in names:
                raise self.fail(
                    header,
                    f"[[study]] {label!r} has the same settings as "
                    f"{names[study.name]!r}: they would be one study; "
                    "remove one or change a setting",
                )
            names[study.name] = label
            out.append(study)
        return out

    def settings(self, values: dict, origin: dict, what: str) -> StudySettings:
        """The study's settings, built as ``threshold find`` builds them from its options."""

        def make(values: dict) -> StudySettings:
            options = {k: v for k, v in values.items() if k not in ("label", "name")}
            return StudySettings.from_options(**option_values(options, StudySettings.from_options))

        return self.build(make, values, origin, what)

    def transfers(self, entries: list[tuple[int, dict]], defaults: dict) -> list[TransferSpec]:
        out = []
        inherited = {k: v for k, v in defaults.items() if k in TASK_KEYS or k == "steps"}
        for index, entry in entries:
            where = self.table("transfer", index, entry, TRANSFER_KEYS)
            label = self.require(
                entry, "label", "transfer", index, where, 'label = "max-med-to-add"'
            )
            self.unique_label(label, self.line("transfer", index, "label"))
            what = f"[[transfer]] {label!r}"
            pretrain = self.require(
                entry, "pretrain", "transfer", index, where, 'pretrain = ["max", "med"]'
            )
            d = self.require(entry, "d", "transfer", index, where, "d = 32")
            values, origin = self.merged(entry, inherited, "transfer", index)
            if "tasks" not in values:
                raise self.fail(
                    self.line("transfer", index),
                    f"key 'tasks' is missing in {what}: add the target, e.g. tasks = [\"add\"]",
                )
            task = self.build(_transfer_task, values, origin, what)
            steps = values.get("steps", 20_000)
            seeds = tuple(entry.get("seeds", (0, 1, 2)))
            if not seeds or len(set(seeds)) != len(seeds):
                raise self.fail(
                    self.line("transfer", index, "seeds"),
                    f"key 'seeds' in {what} = {list(seeds)} is not allowed: list "
                    "one or more different seeds, e.g. seeds = [0, 1, 2]",
                )
            out.append(
                TransferSpec(
                    label,
                    tuple(pretrain),
                    task,
                    d,
                    seeds,
                    steps,
                    entry.get("pretrain_steps", steps),
                    self.line("transfer", index),
                )
            )
        return out

    def analyses(self, entries: list[tuple[int, dict]], labels: list[str]) -> list[Analysis]:
        out = []
        for index, entry in entries:
            where = self.table("analysis", index, entry, ANALYSIS_KEYS)
            study = self.require(entry, "study", "analysis", index, where, 'study = "add"')
            self.check_label(study, labels, self.line("analysis", index, "study"), "study")
            pick = entry.get("pick", PICKS[0])
            if pick not in PICKS:
                raise self.fail(
                    self.line("analysis", index, "pick"),
                    f"key 'pick' {where} = {pick!r} is not allowed: use one of {', '.join(PICKS)}",
                )
            if "pick" in entry and "d" in entry:
                raise self.fail(
                    self.line("analysis", index, "d"),
                    f"keys 'pick' and 'd' {where} both choose the trial: keep one",
                )
            if entry.get("d", 1) < 1:
                raise self.fail(
                    self.line("analysis", index, "d"),
                    f"key 'd' {where} = {entry['d']} is not allowed: use 1 or more",
                )
            out.append(Analysis(study, pick, entry.get("d"), self.line("analysis", index)))
        return out

    def surveys(self, entries: list[tuple[int, dict]], labels: list[str]) -> list[Survey]:
        out = []
        for index, entry in entries:
            where = self.table("survey", index, entry, SURVEY_KEYS)
            study = self.require(entry, "study", "survey", index, where, 'study = "add"')
            self.check_label(study, labels, self.line("survey", index, "study"), "study")
            least = entry.get("min_accuracy", 0.7)
            if not 0 <= least <= 1:
                raise self.fail(
                    self.line("survey", index, "min_accuracy"),
                    f"key 'min_accuracy' {where} = {least} is not allowed: use 0 to 1",
                )
            out.append(Survey(study, float(least), self.line("survey", index)))
        return out

    def comparisons(self, entries: list[tuple[int, dict]], labels: list[str]) -> list[Comparison]:
        out = []
        for index, entry in entries:
            where = self.table("comparison", index, entry, COMPARISON_KEYS)
            pair = self.require(
                entry, "studies", "comparison", index, where, 'studies = ["add", "max-med-add"]'
            )
            line = self.line("comparison", index, "studies")
            if len(pair) != 2 or pair[0] == pair[1]:
                raise self.fail(
                    line,
                    f"key 'studies' {where} = {pair} is not allowed: name two different studies",
                )
            for label in pair:
                self.check_label(label, labels, line, "studies")
            match = entry.get("match", MATCHES[0])
            if match not in MATCHES:
                raise self.fail(
                    self.line("comparison", index, "match"),
                    f"key 'match' {where} = {match!r} is not allowed: use one of "
                    f"{', '.join(MATCHES)}",
                )
            if "d" in entry and match != "size":
                raise self.fail(
                    self.line("comparison", index, "d"),
                    f"key 'd' {where} goes with match = \"size\": remove it or match by size",
                )
            out.append(
                Comparison(tuple(pair), match, entry.get("d"), self.line("comparison", index))
            )
        return out

    def reports(
        self, entries: list[tuple[int, dict]], labels: list[str], transfers: list[str]
    ) -> list[ReportSpec]:
        out, names = [], {ALL_REPORT}
        for index, entry in entries:
            where = self.table("report", index, entry, REPORT_KEYS)
            name = self.require(entry, "name", "report", index, where, 'name = "mod6"')
            if not LABEL.match(name) or name in names:
                raise self.fail(
                    self.line("report", index, "name"),
                    f"report name {name!r} is not allowed: use letters, digits and "
                    ". _ + -, and a name of its own ('all' is the report of every "
                    "study)",
                )
            names.add(name)
            studies = entry.get("studies", labels)
            for label in studies:
                self.check_label(label, labels, self.line("report", index, "studies"), "studies")
            for label in entry.get("transfers", []):
                if label not in transfers:
                    raise self.fail(
                        self.line("report", index, "transfers"),
                        f"key 'transfers' {where} names {label!r}, which is not the "
                        "label of a [[transfer]] in this suite: use one of "
                        f"{', '.join(transfers) or '(none)'}",
                    )
            baseline = entry.get("baseline")
            if baseline is not None:
                self.check_label(
                    baseline, labels, self.line("report", index, "baseline"), "baseline"
                )
            ordered = tuple(dict.fromkeys([*([baseline] if baseline else []), *studies]))
            out.append(
                ReportSpec(
                    name,
                    ordered,
                    tuple(entry.get("transfers", ())),
                    baseline,
                    self.line("report", index),
                )
            )
        return out


def _transfer_task(values: dict) -> TaskConfig:
    """A ``[[transfer]]``'s target task, checked as ``threshold transfer`` checks it: its step
    counts, and a source mixture that exists and shares the target's vocabulary."""
    options = {k: v for k, v in values.items() if k in TASK_KEYS}
    task = TaskConfig.from_options(**option_values(options, TaskConfig.from_options))
    steps = values.get("steps", 20_000)
    TrainConfig(max_steps=steps)
    TrainConfig(max_steps=values.get("pretrain_steps", steps))
    transfer_model_config(pretrain_task(task, tuple(values["pretrain"])), task, values["d"])
    return task


def _in(origin: tuple[str, int | None], what: str) -> str:
    """Where a merged value was written: the table itself, or [defaults] on its behalf."""
    return f"in [defaults] (for {what})" if origin[0] == "defaults" else f"in {what}"


def _is(value: object, kind: str | None) -> bool:
    if kind == STR:
        return isinstance(value, str)
    if kind == INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == FLOAT:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == BOOL:
        return isinstance(value, bool)
    if kind == TABLE:
        return isinstance(value, dict)
    if kind == PAIRS:
        return isinstance(value, dict | str)
    if kind == STRS:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == INTS:
        return isinstance(value, list) and all(_is(v, INT) for v in value)
    return True  # tables are checked where they are read


def _show(value: object) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _one_line(value: object) -> str:
    return " ".join(str(value).split())
