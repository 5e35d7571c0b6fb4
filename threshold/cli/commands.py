"""The app and its registry: each command's name, the module and function that hold it, and the
line ``threshold --help`` lists it with.

``threshold --help`` (and ``threshold bench --help``) lists the commands from :data:`COMMANDS`
without importing any of them; ``threshold X`` imports X's module alone, and that module imports
what X needs at its top. This is Click's "lazy loading of subcommands" (a group class whose
``get_command`` imports on demand), given to Typer as the group class of the app and its
sub-groups, so `threshold --help` stays instant while no import hides inside a function. This
file imports typer alone: a command module that fails to import fails its own command only.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from typing import Annotated

import typer
import typer.main
from typer import _click as click  # typer 0.29 parses with its own copy of click
from typer.core import TyperCommand, TyperGroup


@dataclass(frozen=True)
class Command:
    """A command by its place (``module:function``) and its line in the listing: the first
    paragraph of the function's docstring, on one line (tests/test_cli.py holds them equal)."""

    target: str
    help: str


# In the order `threshold --help` lists them, a newcomer's first (find, then how to read what it
# found); "bench gpu" is the command gpu of the group bench.
COMMANDS = {
    "find": Command(
        "threshold.cli.find_cmd:find",
        "Locate the learning transition of a mixture with an Optuna study.",
    ),
    "grid": Command(
        "threshold.cli.grid_cmd:grid",
        "Train every size of a range x seeds of one task: a dense grid, stored as a study.",
    ),
    "status": Command(
        "threshold.cli.status_cmd:status",
        "List the studies in a storage with their current transition estimates.",
    ),
    "report": Command(
        "threshold.cli.report_cmd:report",
        "Transitions, curves, reduction factors, analyses, transfer and search cost as a report.",
    ),
    "train": Command(
        "threshold.cli.train_cmds:train",
        "Train one model, or every size x seed of the lists as one batch; report per-op accuracy.",
    ),
    "data": Command(
        "threshold.cli.data_cmd:data",
        "Print example sequences exactly as the model sees them.",
    ),
    "ask": Command(
        "threshold.cli.objective_cmds:ask",
        "Print the next sizes and seeds to train in an objective's study.",
    ),
    "tell": Command(
        "threshold.cli.objective_cmds:tell",
        "Record a run's accuracy in an objective's study, and print the answer so far.",
    ),
    "worker": Command(
        "threshold.cli.worker_cmd:worker",
        "Join a study, or several trained together, and run its trials until it is done.",
    ),
    "run": Command(
        "threshold.cli.suite_cmd:run_suite_cmd",
        "Run a suite: every study (resuming where it stopped), then analyses and reports.",
    ),
    "dashboard": Command(
        "threshold.cli.dashboard_cmd:dashboard",
        "Browse the studies in optuna-dashboard: trials, each study's estimate note and transition"
        " curve, and the checkpoints in the artifact store.",
    ),
    "transfer": Command(
        "threshold.cli.analysis_cmds:transfer",
        "Target accuracy after pretraining on other ops vs from scratch, same size and seeds.",
    ),
    "analyze": Command(
        "threshold.cli.analysis_cmds:analyze",
        "Embedding structure and layer usage of a study's model; scores stored on the study.",
    ),
    "survey": Command(
        "threshold.cli.analysis_cmds:survey",
        "Embedding structure and attention share of every learned run of studies; stores nothing.",
    ),
    "complexity": Command(
        "threshold.cli.complexity_cmd:complexity",
        "Kolmogorov-complexity proxy of one mixture: compressed bytes of its program, per op too.",
    ),
    "refit": Command(
        "threshold.cli.refit_cmd:refit",
        "Refit every study's runs with the current posterior: old and new 80% point and asymptote,"
        " and how far its sizes stray from a smooth curve.",
    ),
    "lend": Command(
        "threshold.cli.lend_cmd:lend",
        "Continue a suite from a lend's state for the seconds given; write the new state.",
    ),
    "bench gpu": Command(
        "threshold.cli.bench_gpu_cmd:bench_gpu",
        "The engine on a GPU against the CPU, its throughput (eager, CUDA graphs, compiled) and a"
        " science pair (small init, or the paper's recipe) in the minutes left; with --device cpu,"
        " tiny settings (CI).",
    ),
    "bench search": Command(
        "threshold.cli.search_cmds:bench_search",
        "Our sampler on simulated studies with known truth, family by family (see README).",
    ),
    "bench train": Command(
        "threshold.cli.train_cmds:bench_train",
        "Training tokens/s and steps/s at several d (bucketed vs random batches), and decoding;"
        " with --batched, model-steps/s of many models trained as one batch.",
    ),
    "cluster slurm": Command(
        "threshold.cli.cluster_cmd:slurm",
        "Write an sbatch --array script that starts one `threshold worker` per array task.",
    ),
}


class _Listed(TyperCommand):
    """A command as the listing shows it (name and line), before its module is imported."""

    def __init__(self, name: str, command: Command) -> None:
        super().__init__(name, help=command.help)
        self.target = command.target

    def load(self) -> TyperCommand:
        """The command itself: its module imported, its function made a command by Typer."""
        module, function = self.target.split(":")
        one = typer.Typer(add_completion=False)  # as the app: no completion options
        one.command(self.name)(getattr(importlib.import_module(module), function))
        return typer.main.get_command(one)


class LazyGroup(TyperGroup):
    """A group whose commands come from :data:`COMMANDS` (those under its name), each imported
    when it is run or its own help is asked for; the group's help lists them unimported."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        prefix = f"{self.name} " if self.name else ""
        names = [k.removeprefix(prefix) for k in COMMANDS if k.startswith(prefix)]
        listed = {n: _Listed(n, COMMANDS[prefix + n]) for n in names if " " not in n}
        self.commands = listed | dict(self.commands)  # then the groups Typer made (bench, ...)
        self.listing = False

    def get_command(self, ctx, cmd_name: str):
        command = self.commands.get(cmd_name)
        if isinstance(command, _Listed) and not self.listing:
            command = self.commands[cmd_name] = command.load()
        return command

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        """Click's main, where a parser error (an unknown option, a value not of its kind, a
        missing one) is one line ``error: ...`` and exit 2, as every other bad input is, not a
        boxed panel; help asked by no arguments is shown as it was."""
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except click.exceptions.NoArgsIsHelpError as e:
            click.echo(e.ctx.get_help())
            sys.exit(e.exit_code)
        except click.exceptions.ClickException as e:
            words = " ".join(e.format_message().split())
            ctx = getattr(e, "ctx", None)
            path = ["threshold", *ctx.command_path.split()[1:]] if ctx is not None else []
            hint = f" (see `{' '.join(path)} --help`)" if path else ""
            click.echo(f"error: {words}{hint}", err=True)
            sys.exit(e.exit_code)
        except typer.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)

    def format_help(self, ctx, formatter) -> None:
        self.listing = True  # the listing reads names and lines: no command module is imported
        try:
            super().format_help(ctx, formatter)
        finally:
            self.listing = False


app = typer.Typer(
    cls=LazyGroup,
    help="Find the smallest recurrent transformer that learns a task mixture.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
bench = typer.Typer(cls=LazyGroup, help="Throughput benchmarks.", no_args_is_help=True)
app.add_typer(bench, name="bench")
cluster = typer.Typer(
    cls=LazyGroup,
    help="Run a study's workers on a cluster (docs/cluster.md).",
    no_args_is_help=True,
)
app.add_typer(cluster, name="cluster")


@dataclass
class _State:
    debug: bool = False


STATE = _State()


@app.callback()
def _main(
    debug: Annotated[
        bool, typer.Option(help="Show tracebacks instead of one-line errors.")
    ] = False,
) -> None:
    STATE.debug = debug
