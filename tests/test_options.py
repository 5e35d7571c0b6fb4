"""The settings a user names are declared once (``threshold.options``): every recipe field is an
option built from its field, each command that takes a group of them gets the group's values,
and a default shown is the dataclass's."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from threshold.cli.common import takes
from threshold.config import MODEL_FIELDS, RECIPE_HELP, TASK_FIELDS, TRAIN_FIELDS, make_recipe
from threshold.errors import ConfigError
from threshold.options import RECIPE, SEARCH, SETTINGS, TASK, only, recipe_of
from threshold.search.settings import SearchConfig
from threshold.search.spec import StudySettings
from threshold.tasks import TaskConfig


def test_every_recipe_field_is_one_option_with_one_help_line():
    fields = (*TRAIN_FIELDS, *MODEL_FIELDS, *TASK_FIELDS)
    assert set(RECIPE_HELP) == set(fields)  # no field without its line, no line left over
    names = [o.name for o in RECIPE]
    assert names == ["recipe", *("steps" if f == "max_steps" else f for f in fields)]
    assert len(SETTINGS) == len(TASK) + len(SEARCH) + len(RECIPE)  # no name in two groups


@pytest.mark.parametrize(
    ("name", "kind", "listed"),
    [
        ("steps", int, False),
        ("decay_steps", int, False),  # int | None
        ("init_std", float, False),  # float | None
        ("betas", float, True),  # tuple[float, float]
        ("checkpoints", float, True),  # tuple[float, ...]
        ("qkv_bias", bool, False),
        ("split", str, False),  # the task's field
    ],
)
def test_a_recipe_option_takes_its_fields_type(name, kind, listed):
    option = SETTINGS[name]
    assert (option.kind, option.listed) == (kind, listed)


def test_recipe_of_reads_lists_as_text_or_sequences_and_names_a_bad_one():
    made = recipe_of({"recipe": "small", "steps": 500, "checkpoints": "0.5,1", "betas": None})
    assert made == make_recipe("small", max_steps=500, checkpoints=(0.5, 1.0))
    assert recipe_of({"recipe": "small", "checkpoints": [0.5, 1]}).train.checkpoints == (0.5, 1.0)
    assert recipe_of({}) == make_recipe()
    with pytest.raises(ConfigError, match=r"--betas '0\.9;0\.98' is not a pair"):
        recipe_of({"betas": "0.9;0.98"})


def test_defaults_are_the_dataclasses():
    shown = StudySettings.defaults()
    task, search = TaskConfig(), SearchConfig()
    assert (shown["mod"], shown["n_test"], shown["arity"]) == (
        task.n,
        task.n_test,
        f"{task.arity_min}-{task.arity_max}",
    )
    assert (shown["d_hi"], shown["budget"], shown["seed"]) == (
        search.d_hi,
        search.budget,
        search.base_seed,
    )
    assert all(shown[o.name] is None for o in RECIPE if o.name != "recipe")
    assert TaskConfig.from_options(**task.options()) == task  # the two mappings agree
    weighted = TaskConfig.from_options("max,add", weights="add=2", mod=5)
    assert TaskConfig.from_options(**weighted.options()) == weighted


def test_takes_hands_each_group_its_values_and_shows_the_defaults():
    seen = {}
    app = typer.Typer()

    @app.command()
    @takes(task=only(TASK, "tasks", "mod"), recipe=only(RECIPE, "lr", "qkv_bias"))
    def command(task: dict, recipe: dict, extra: int = 1) -> None:
        seen.update(task=task, recipe=recipe, extra=extra)

    runner = CliRunner()
    result = runner.invoke(app, ["--mod", "7", "--no-qkv-bias", "--extra", "3"])
    assert result.exit_code == 0, result.output
    assert seen == {
        "task": {"tasks": "max", "mod": 7},
        "recipe": {"lr": None, "qkv_bias": False},
        "extra": 3,
    }
    shown = runner.invoke(app, ["--help"], env={"COLUMNS": "200"}).output
    assert "Task options" in shown and "Recipe options" in shown
    assert "[default: 10]" in shown  # TaskConfig's n, not a number written in the command
    assert "[default: the recipe's]" in shown
