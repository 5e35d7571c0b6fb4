"""A suite's study keys are the settings of ``threshold.options`` (``find``'s options): a setting
added there is a suite key with no change to the parser, its TOML value arrives in the type the
setting takes, and a value it refuses is still one line naming the file, line and key."""

from __future__ import annotations

import json

import pytest

from threshold.errors import ConfigError
from threshold.options import SETTINGS, Option
from threshold.search.spec import StudySettings
from threshold.suite import SuiteError, parse_suite
from threshold.suite.spec import (
    FLOAT,
    INT,
    INTS,
    PAIRS,
    STR,
    STRS,
    option_values,
    setting_kinds,
)

SUITE = """\
name = "s"

[defaults]
mod = 5
{defaults}

[[study]]
label = "a"
tasks = ["max", "min"]
{study}
"""


def test_every_setting_is_a_suite_key_with_finds_default():
    """Each setting (those with a default TOML can write), set in [defaults] to its default, is
    accepted and changes nothing: the study is the one ``find`` makes."""
    written = []
    for name, value in StudySettings.defaults().items():
        if name == "tasks":
            value = [value]
        if value is None:
            continue
        written.append(f"{name} = {json.dumps(value)}")
    assert len(written) >= 15
    text = 'name = "s"\n\n[defaults]\n' + "\n".join(written) + '\n\n[[study]]\nlabel = "a"\n'
    assert parse_suite(text).study("a").name == StudySettings.from_options().default_name()


def test_setting_kinds_read_the_table():
    options = (
        Option("tasks", str, "", listed=True),
        Option("n", int, ""),
        Option("name", str, ""),
        Option("table", dict, ""),
        Option("shares", float, "", listed=True),
        Option("seeds", int, "", listed=True),
        Option("level", float, ""),
    )
    assert setting_kinds(options) == {
        "tasks": STRS,
        "n": INT,
        "name": STR,
        "table": PAIRS,  # a table, or its text as on the command line
        "shares": None,  # a list of numbers: the setting checks it
        "seeds": INTS,
        "level": FLOAT,
    }

    def options_of(tasks: str | tuple[str, ...] = "max", name: str = "x", shares=()): ...

    values = {"tasks": ["max", "med"], "name": ["a", "b"], "shares": [0.5, 1], "other": 1}
    assert option_values(values, options_of) == {
        "tasks": ("max", "med"),
        "name": "a,b",  # an option that takes only a string gets the comma list
        "shares": (0.5, 1),
    }


@pytest.fixture
def more_options(monkeypatch):
    """Three more settings, as a later version may add (rows of ``threshold.options``, read by
    ``from_options``): what the suite passes for each is recorded."""
    original = StudySettings.from_options.__func__
    seen = {}

    def from_options(cls, style="plain", table=None, shares=(), **kwargs):
        if style not in ("plain", "fancy"):
            raise ConfigError(f"style {style!r} is unknown: use plain or fancy")
        seen.update(style=style, table=table, shares=shares)
        return original(cls, **kwargs)

    for option in (
        Option("style", str, ""),
        Option("table", dict, ""),
        Option("shares", float, "", listed=True),
    ):
        monkeypatch.setitem(SETTINGS, option.name, option)
    monkeypatch.setattr(StudySettings, "from_options", classmethod(from_options))
    return seen


def test_a_new_setting_is_a_suite_key(more_options):
    text = SUITE.format(
        defaults='style = "fancy"',
        study="shares = [0.25, 0.5]\ntable = { lr = 0.001, betas = [0.9, 0.99] }",
    )
    suite = parse_suite(text, "s.toml")
    assert more_options == {
        "style": "fancy",
        "table": {"lr": 0.001, "betas": (0.9, 0.99)},
        "shares": (0.25, 0.5),
    }
    assert suite.study("a").settings.task.ops == ("max", "min")


@pytest.mark.parametrize(
    ("defaults", "study", "line", "words"),
    [
        ('style = "odd"', "", 5, ["key 'style' in [defaults] (for [[study]] 'a')", "'odd'"]),
        ("", 'style = "odd"', 10, ["key 'style' in [[study]] 'a'", "use plain or fancy"]),
        ("", "style = 3", 10, ["key 'style'", "is not a string"]),
        ("", "table = 3", 10, ["key 'table'", "is not a table"]),
    ],
)
def test_a_new_setting_refused_names_its_line(more_options, defaults, study, line, words):
    with pytest.raises(SuiteError) as caught:
        parse_suite(SUITE.format(defaults=defaults, study=study), "s.toml")
    message = str(caught.value)
    assert message.startswith(f"s.toml:{line}: ") and "\n" not in message, message
    for word in words:
        assert word in message, (word, message)


def test_the_key_to_blame_is_the_one_whose_value_breaks_the_settings():
    """Two bad values: the error is about the first one the settings check, and names it."""
    text = SUITE.format(defaults="d_lo = 64", study='d_hi = 32\npretrain = ["max", "nope"]')
    with pytest.raises(SuiteError, match=r"^s\.toml:11: key 'pretrain' .*'nope'"):
        parse_suite(text, "s.toml")
    text = SUITE.format(defaults="d_lo = 64", study="d_hi = 32")
    with pytest.raises(SuiteError, match=r"^s\.toml:5: key 'd_lo' .*d range 64\.\.32"):
        parse_suite(text, "s.toml")
