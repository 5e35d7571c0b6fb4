"""``threshold cluster slurm``: a SLURM job array of identical workers on one shared study, or
on several (a suite's) that each worker trains together in shared packs.

The conventional layout of Optuna on a cluster (Optuna's tutorial on many processes, submitit's
job arrays, AaltoRSE's hpo-on-hpc): the study lives in PostgreSQL, every array task starts the
same ``threshold worker`` on one GPU, and the workers coordinate through the storage alone. The
study is created once beforehand (``threshold find ... --workers 0``, a suite's studies with
``threshold run SUITE.toml --workers 0``); docs/cluster.md says how.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit, urlunsplit

import typer

from threshold.cli.common import check_worker_studies, run_guarded, takes
from threshold.config import Execution
from threshold.errors import ConfigError
from threshold.options import EXECUTION, execution_of, only
from threshold.search.study import check_study_name


@dataclass(frozen=True)
class Array:
    """What SLURM gives each array task, and how the task starts the worker."""

    time: str = "24:00:00"  # sbatch --time
    cpus: int = 4  # sbatch --cpus-per-task
    mem: str = "16G"  # sbatch --mem
    partition: str | None = None
    account: str | None = None
    setup: tuple[str, ...] = ()  # shell lines run before the worker
    command: str = "threshold"  # how the task starts threshold, e.g. 'python -m threshold'

    def __post_init__(self) -> None:
        if not _SLURM_TIME.fullmatch(self.time):
            raise ConfigError(
                f"--time {self.time!r} is not a SLURM time: use minutes (90), H:MM:SS (24:00:00)"
                " or D-HH[:MM[:SS]] (2-00)"
            )
        if self.cpus < 1:
            raise ConfigError(f"--cpus {self.cpus} is not allowed: use 1 or more")
        if not re.fullmatch(r"[1-9][0-9]*[KMGT]?", self.mem):
            raise ConfigError(f"--mem {self.mem!r} is not a SLURM size: use e.g. 16G or 4000M")


# sbatch --time's forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S (and no limit).
_SLURM_TIME = re.compile(
    r"\d+(:\d{1,2}){0,2}|\d+-\d{1,2}(:\d{1,2}){0,2}|UNLIMITED|unlimited|infinite"
)
# Most array tasks a script asks for: SLURM's MaxArraySize is 1,001 unless a site raises it.
MAX_ARRAY = 10_000


def slurm_script(
    studies: list[str], execution: Execution, array: Array, max_trials: int | None = None
) -> str:
    """The text of an ``sbatch --array`` script: ``execution.workers`` array tasks, each one
    worker of ``studies`` (several: trained together) with the execution's settings (checked
    once, by :class:`Execution`)."""

    for study in studies:
        check_study_name(study)
    check_worker_studies(studies, max_trials)  # as the workers would, before any is submitted
    storage, workers, device = execution.storage, execution.workers, execution.device
    if workers > MAX_ARRAY:
        raise ConfigError(
            f"--workers {workers:,} array tasks is not allowed: use 1 to {MAX_ARRAY:,} (SLURM's"
            " MaxArraySize is 1,001 unless a site raises it; each task is one GPU)"
        )
    trials_at_once, cache_dir = execution.trials_at_once, execution.cache_dir
    if storage is not None and storage.startswith("sqlite"):
        raise ConfigError(
            f"--storage {storage}: SQLite cannot be shared by workers on many machines (its "
            "locks fail on network file systems): use a postgresql+psycopg:// URL "
            "(docs/cluster.md)"
        )
    if storage is not None:
        _refuse_password(storage)
    gpu = device.startswith("cuda")
    trials = execution.trials_on("cuda" if gpu else "cpu")
    # the first study, and how many more: SLURM keeps a job name of 64 characters at most
    more = f"+{len(studies) - 1}" if len(studies) > 1 else ""
    job = re.sub(r"[^A-Za-z0-9_.+-]", "_", f"threshold-{studies[0]}")[: 64 - len(more)] + more
    named, the, shared = f"study {studies[0]!r}", "the study through its", []
    if more:
        named = f"{len(studies)} studies ({studies[0]!r} and {more[1:]} more)"
        the = "the studies through their"
        shared = ["# Each worker trains the runnable trials of all the studies together."]
    worker = [
        *shlex.split(array.command), "worker", *(x for s in studies for x in ("--study", s)),
        *(["--storage", storage] if storage else []),
        *(["--trials-at-once", str(trials_at_once)] if trials_at_once is not None else []),
        "--device", "cuda" if gpu else device, "--heartbeat", str(execution.heartbeat_s),
        *(["--max-trials", str(max_trials)] if max_trials is not None else []),
        *(["--cache-dir", str(cache_dir)] if cache_dir is not None else []),
    ]  # fmt: skip
    sbatch = [
        f"--job-name={job}",
        f"--array=0-{workers - 1}",
        "--ntasks=1",
        f"--cpus-per-task={array.cpus}",
        *(["--gres=gpu:1"] if gpu else []),
        f"--mem={array.mem}",
        f"--time={array.time}",
        *([f"--partition={array.partition}"] if array.partition else []),
        *([f"--account={array.account}"] if array.account else []),
        "--output=%x-%A_%a.out",
    ]
    where = "and one GPU each" if gpu else f"each, on {device}"
    lines = [
        "#!/bin/bash",
        f"# threshold: {workers} identical workers on {named}, one array task {where},",
        f"# {trials} trial(s) at once each. They share {the} storage",
        "# alone; a task that ends or dies loses no finished trial (a running one is retried",
        "# after 3 silent heartbeats). Submit: sbatch THIS_FILE. Follow: threshold status.",
        *shared,
        *(f"#SBATCH {line}" for line in sbatch),
        "set -e",
        *(
            []
            if storage
            else ["# --storage left out: the worker reads $THRESHOLD_STORAGE (sbatch passes it on)"]
        ),
        *array.setup,
        "exec " + shlex.join(worker),
    ]
    return "\n".join(lines) + "\n"


def _refuse_password(storage: str) -> None:
    """A storage URL with a password is refused: the script, and SLURM's records of the job,
    would keep it in plain text. The line shows the URL with the password hidden."""
    parts = urlsplit(storage)
    try:
        password = parts.password
    except ValueError:  # a port that is not a number: the worker's storage check says so
        return
    if not password:
        return
    user = parts.username or "USER"
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    bare = urlunsplit(parts._replace(netloc=f"{user}@{host}{port}"))
    hidden = urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))
    raise ConfigError(
        f"--storage {hidden} carries a password, which the script (and SLURM's records of the "
        f"job) would keep in plain text: put it in ~/.pgpass (host:port:database:user:password, "
        f"chmod 600) and give --storage {bare}, or leave out --storage and export "
        "THRESHOLD_STORAGE before sbatch (docs/cluster.md)"
    )


@takes(execution=only(EXECUTION, "storage", "trials_at_once", "heartbeat", "cache_dir"))
def slurm(
    execution: dict,
    study: Annotated[
        list[str],
        typer.Option(
            help="Name of the study the workers join; repeat it for several (a suite's), which "
            "each worker trains together."
        ),
    ],
    workers: Annotated[
        int, typer.Option(help="Array tasks: one worker each, on one GPU of its own.")
    ] = 4,
    device: Annotated[
        str, typer.Option(help="cuda (one GPU per array task, --gres=gpu:1) or cpu.")
    ] = "cuda",
    max_trials: Annotated[
        int | None,
        typer.Option(help="Each worker stops after this many trials (one --study only)."),
    ] = None,
    time: Annotated[str, typer.Option(help="Time limit of each array task (sbatch --time).")] = (
        "24:00:00"
    ),
    cpus: Annotated[int, typer.Option(help="CPU cores of each array task.")] = 4,
    mem: Annotated[str, typer.Option(help="Memory of each array task (sbatch --mem).")] = "16G",
    partition: Annotated[str | None, typer.Option(help="sbatch --partition.")] = None,
    account: Annotated[str | None, typer.Option(help="sbatch --account.")] = None,
    setup: Annotated[
        list[str] | None,
        typer.Option(help="A shell line run before the worker, e.g. 'source ~/venv/bin/activate'."),
    ] = None,
    command: Annotated[
        str, typer.Option(help="How the array task starts threshold, e.g. 'python -m threshold'.")
    ] = "threshold",
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the script here, not to stdout.")
    ] = None,
) -> None:
    """Write an sbatch --array script that starts one `threshold worker` per array task."""

    def body():
        runs = execution_of(execution | {"workers": workers, "device": device})
        array = Array(time, cpus, mem, partition, account, tuple(setup or ()), command)
        text = slurm_script(study, runs, array, max_trials)
        if output is None:
            typer.echo(text, nl=False)
            return
        output.write_text(text)
        output.chmod(0o755)
        typer.echo(f"wrote {output}: submit it with `sbatch {output}`")

    run_guarded(body)
