"""Reading and checking a suite file: everything is checked before anything runs.

An unknown key, a value of the wrong type, a duplicate label, a reference to a label the suite does
not define and every setting the config dataclasses refuse are a :class:`SuiteError` whose message
is one line, ``FILE:LINE: ...``, naming the key and the fix. Each study's settings are built with
the real dataclasses (``TaskConfig``, ``TrainConfig``, ``SearchConfig``, ``StudySettings``) exactly
as ``find`` builds them from the same values, so a suite study and a ``find`` run with the same
settings are one study (its name is a hash of every setting), and the dataclasses' own checks
apply. Building the settings imports the modules that define them (no torch at this module's
import).
"""

from __future__ import annotations

import difflib
import json
import re
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

from threshold.errors import ConfigError
from threshold.suite.spec import (
    ALL_REPORT,
    ANALYSIS_KEYS,
    ARRAY_KEYS,
    BOOL,
    COMPARISON_KEYS,
    EXAMPLES,
    FLOAT,
    INT,
    INTS,
    LABEL,
    MATCHES,
    PICKS,
    REPORT_KEYS,
    SEARCH_KEYS,
    SETTING_KEYS,
    STR,
    STRS,
    STUDY_KEYS,
    SURVEY_KEYS,
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
)
from threshold.suite.toml_lines import KEY, find_line, key_lines, unquote
from threshold.tasks import TaskConfig

if TYPE_CHECKING:
    from threshold.search.study import StudySettings

__all__ = ["load_suite", "parse_suite"]

# Which key a dataclass's error message is about, by the words it starts with (the first of the
# keys that the table or [defaults] set).
_MESSAGE_KEYS = [
    (r"(the task mixture|op '|ops )", ("tasks",)),
    (r"measured op", ("measure",)),
    (r"testbed", ("testbed",)),
    (r"(modulus|degree)", ("mod",)),
    (r"depth", ("depth",)),
    (r"arity", ("arity",)),
    (r"p_nest", ("p_nest",)),
    (r"n_train", ("n_train",)),
    (r"n_test", ("n_test",)),
    (r"d range", ("d_lo", "d_hi")),
    (r"precision", ("precision",)),
    (r"level", ("level",)),
    (r"budget", ("budget",)),
    (r"max_steps", ("steps", "pretrain_steps")),
    (r"d_model", ("d", "d_lo")),
]


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
        self.check_keys(defaults, SETTING_KEYS, "defaults", None, "in [defaults]")
        self.check_types(defaults, SETTING_KEYS, "defaults", None, "in [defaults]")
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
        for key in ("workers", "batch", "heartbeat"):
            if key in top and top[key] < 1:
                raise self.fail(
                    self.line("", None, key),
                    f"key {key!r} = {top[key]} is not allowed: use 1 or more",
                )

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
            storage=top.get("storage"),
            workers=top.get("workers", 1),
            batch=top.get("batch", 1),
            heartbeat=top.get("heartbeat", 30),
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

    def check_keys(self, table: dict, allowed: dict, name: str, index: int | None, where: str):
        for key in table:
            if key not in allowed:
                near = difflib.get_close_matches(key, list(allowed), n=1)
                hint = f"did you mean {near[0]!r}? " if near else ""
                raise self.fail(
                    self.line(name, index, key),
                    f"unknown key {key!r} {where}: {hint}use one of {', '.join(allowed)}",
                )

    def check_types(self, table: dict, kinds: dict, name: str, index: int | None, where: str):
        for key, value in table.items():
            kind = kinds[key]
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

    def locate(self, error: ConfigError, origin: dict, what: str, key: str | None = None):
        """A dataclass's ConfigError as a SuiteError on the line of the key it is about."""
        message = str(error)
        if key is None:
            for pattern, keys in _MESSAGE_KEYS:
                if re.match(pattern, message):
                    key = next((k for k in keys if k in origin), None)
                    break
        if key is None or key not in origin:
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
            where = self.table("study", index, entry, STUDY_KEYS)
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
            study = SuiteStudy(label, self.settings(values, origin, f"[[study]] {label!r}"), header)
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

    def task(self, values: dict, origin: dict, what: str) -> TaskConfig:
        kwargs: dict = {}
        if "arity" in values:
            arity = values["arity"]
            lo, _, hi = arity.partition("-")
            try:
                kwargs["arity_min"], kwargs["arity_max"] = int(lo), int(hi or lo)
            except ValueError:
                raise self.fail(
                    self.line(*origin["arity"], "arity"),
                    f"key 'arity' {_in(origin['arity'], what)} = {arity!r} is not MIN-MAX: "
                    'write e.g. arity = "2-3"',
                ) from None
        renamed = {"tasks": "ops", "mod": "n"}
        for key in TASK_KEYS:
            if key in values and key != "arity":
                kwargs[renamed.get(key, key)] = values[key]
        if "ops" in kwargs:
            kwargs["ops"] = tuple(kwargs["ops"])
        try:
            return TaskConfig(**kwargs)
        except ConfigError as e:
            raise self.locate(e, origin, what) from None

    def settings(self, values: dict, origin: dict, what: str) -> StudySettings:
        """The study's settings, built as ``threshold find`` builds them from its options."""
        from threshold.search.study import SearchConfig, StudySettings
        from threshold.train import TrainConfig

        task = self.task(values, origin, what)
        renamed = {"seed": "base_seed"}
        try:
            train = TrainConfig(max_steps=values["steps"]) if "steps" in values else TrainConfig()
            search = SearchConfig(
                **{renamed.get(k, k): values[k] for k in SEARCH_KEYS if k in values}
            )
        except ConfigError as e:
            raise self.locate(e, origin, what) from None
        pretrain = tuple(values.get("pretrain", ()))
        if pretrain:
            self.check_transfer(task, pretrain, search.d_lo, origin, what)
        return StudySettings(task, train, search, pretrain)

    def check_transfer(self, task: TaskConfig, pretrain, d: int, origin: dict, what: str) -> None:
        """The source mixture exists and shares the target's vocabulary (as ``find`` checks)."""
        from threshold.pretrain import pretrain_task, transfer_model_config

        try:
            source = pretrain_task(task, tuple(pretrain))
        except ConfigError as e:
            raise self.locate(e, origin, what, "pretrain") from None
        try:
            transfer_model_config(source, task, d)
        except ConfigError as e:
            raise self.locate(e, origin, what) from None

    def transfers(self, entries: list[tuple[int, dict]], defaults: dict) -> list[TransferSpec]:
        from threshold.train import TrainConfig

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
            task = self.task(values, origin, what)
            steps = values.get("steps", 20_000)
            pretrain_steps = entry.get("pretrain_steps", steps)
            for key, value in (("steps", steps), ("pretrain_steps", pretrain_steps)):
                try:
                    TrainConfig(max_steps=value)
                except ConfigError as e:
                    raise self.locate(e, origin, what, key) from None
            seeds = tuple(entry.get("seeds", (0, 1, 2)))
            if not seeds or len(set(seeds)) != len(seeds):
                raise self.fail(
                    self.line("transfer", index, "seeds"),
                    f"key 'seeds' in {what} = {list(seeds)} is not allowed: list "
                    "one or more different seeds, e.g. seeds = [0, 1, 2]",
                )
            self.check_transfer(task, pretrain, d, origin, what)
            out.append(
                TransferSpec(
                    label,
                    tuple(pretrain),
                    task,
                    d,
                    seeds,
                    steps,
                    pretrain_steps,
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
