"""A suite's study keys are ``StudySettings.from_options``' keywords: a keyword added there is a
suite key with no change to the parser, its TOML value arrives in the type the option takes, and a
value it refuses is still one line naming the file, line and key."""

from __future__ import annotations

import inspect
import json

import pytest

from threshold.errors import ConfigError
from threshold.search.spec import StudySettings
from threshold.suite import SuiteError, parse_suite
from threshold.suite.spec import INT, STR, STRS, TABLE, option_kinds, option_values

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


def test_every_option_of_from_options_is_a_suite_key_with_finds_default():
    """Each keyword of ``from_options`` (those with a default TOML can write), set in [defaults]
    to its default, is accepted and changes nothing: the study is the one ``find`` makes."""
    written = []
    for name, param in inspect.signature(StudySettings.from_options).parameters.items():
        value = param.default
        if name == "tasks":
            value = [value]
        if value is None or value is param.empty:
            continue
        value = list(value) if isinstance(value, tuple) else value
        written.append(f"{name} = {json.dumps(value)}")
    assert len(written) >= 15
    text = 'name = "s"\n\n[defaults]\n' + "\n".join(written) + '\n\n[[study]]\nlabel = "a"\n'
    assert parse_suite(text).study("a").name == StudySettings.from_options().default_name()


def test_option_kinds_read_the_annotations():
    def options(
        tasks: str | tuple[str, ...] = "max",
        n: int | None = None,
        name: str = "x",
        table: dict | None = None,
        shares: tuple[float, ...] = (),
    ): ...

    kinds = option_kinds(options)
    assert kinds == {"tasks": STRS, "n": INT, "name": STR, "table": TABLE, "shares": None}
    values = {"tasks": ["max", "med"], "name": ["a", "b"], "shares": [0.5, 1], "other": 1}
    assert option_values(values, options) == {
        "tasks": ("max", "med"),
        "name": "a,b",  # an option that takes only a string gets the comma list
        "shares": (0.5, 1),
    }


@pytest.fixture
def more_options(monkeypatch):
    """``from_options`` with three more keywords, as a later version may add: what the suite
    passes for each is recorded."""
    original = StudySettings.from_options.__func__
    seen = {}

    def from_options(cls, *args, style="plain", table=None, shares=(), **kwargs):
        if style not in ("plain", "fancy"):
            raise ConfigError(f"style {style!r} is unknown: use plain or fancy")
        seen.update(style=style, table=table, shares=shares)
        return original(cls, *args, **kwargs)

    params = list(inspect.signature(original).parameters.values())
    rest = [p for p in params if p.kind is p.VAR_KEYWORD]  # **kwargs, if it takes them: last
    added = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=d, annotation=a)
        for name, d, a in (
            ("style", "plain", "str"),
            ("table", None, "dict | None"),
            ("shares", (), "tuple[float, ...]"),
        )
    ]
    params = [p for p in params if p not in rest] + added + rest
    from_options.__signature__ = inspect.Signature(params)
    monkeypatch.setattr(StudySettings, "from_options", classmethod(from_options))
    return seen


def test_a_new_keyword_of_from_options_is_a_suite_key(more_options):
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
def test_a_new_keyword_refused_names_its_line(more_options, defaults, study, line, words):
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
