"""Bad input: one line naming the value, exit status 2, and nothing written to storage.

Each case runs the command in this process (Typer's runner: milliseconds instead of a fresh
interpreter; tests/test_search_cli.py and tests/test_cli.py run bad input as real processes) against
a storage that already holds a study with one finished trial. Afterwards the database holds exactly
what it held (every row compared), and no data cache, artifact or checkpoint was written.
"""

from __future__ import annotations

import hashlib
import random
import sqlite3

import optuna
import pytest
import torch
from support import FIND_ARGS, SETTINGS
from typer.testing import CliRunner

from threshold import CheckpointError, ThresholdError
from threshold.cli import app
from threshold.search.artifacts import trial_checkpoint
from threshold.search.study import create_or_load_study, open_storage
from threshold.train.checkpoint import MAGIC, load_checkpoint

LONG_NAME = "x" * 600
SLURM = ["cluster", "slurm", "--study", "x", "--storage", "postgresql://u@h/db"]

# (arguments, text the error line must contain). "{db}" is the existing storage's URL, "{tmp}" the
# test's directory, which holds notes.txt (a text file) and adir/ (a directory).
CASES = {
    "task: op in capitals": (["find", "--tasks", "MAX"], "'MAX'"),
    "task: unknown op": (["find", "--tasks", "max,sum"], "'sum'"),
    "task: arity not MIN-MAX": (["find", "--arity", "2-x"], "arity '2-x'"),
    "task: arity empty": (["find", "--arity", ""], "arity ''"),
    "task: p_nest above 1": (["find", "--p-nest", "1.5"], "p_nest 1.5"),
    "task: depth 0": (["find", "--depth", "0"], "depth 0"),
    "task: modulus 0": (["find", "--mod", "0"], "modulus 0"),
    "task: modulus 1000": (["find", "--mod", "1000"], "modulus 1000"),
    "task: measured op not mixed": (["find", "--measure", "add"], "'add'"),
    "task: no test sequences": (["find", "--n-test", "0"], "n_test 0"),
    "task: S_2 is too small": (
        ["find", "--testbed", "perm", "--tasks", "mul", "--mod", "2"],
        "degree 2",
    ),
    "search: d range upside down": (["find", "--d-lo", "16", "--d-hi", "8"], "d range 16..8"),
    "search: d_hi beyond d_max": (["find", "--d-hi", "1024"], "1024"),
    "search: d_lo below the limits": (["find", "--d-lo", "1"], "both within the limits 2..512"),
    "search: level above 1": (["find", "--level", "1.5"], "level 1.5"),
    "search: heartbeat 0": (["find", "--heartbeat", "0"], "--heartbeat 0"),
    "find: --batch, renamed": (["find", "--batch", "32"], "--batch-size 32"),
    "worker: --batch, renamed": (
        ["worker", "--study", "existing", "--batch", "2"],
        "now --trials-at-once 2",
    ),
    "find: no trials at once": (["find", "--trials-at-once", "0"], "--trials-at-once 0"),
    "find: empty batches": (["find", "--batch-size", "0"], "batch_size 0"),
    "find: betas not a pair": (["find", "--betas", "0.9"], "betas (0.9,)"),
    "train: betas not numbers": (["train", "--betas", "a,b"], "--betas 'a,b'"),
    "train: no recurrence": (["train", "--n-recur", "0"], "n_recur 0"),
    "train: a checkpoint repeated": (
        ["train", "--checkpoints", "0.5,0.5,1", "--schedule", "constant"],
        "repeat a share or are out of order",
    ),
    "train: checkpoints out of order": (
        ["find", "--checkpoints", "1,0.5", "--schedule", "constant"],
        "repeat a share or are out of order",
    ),
    "train: empty checkpoint": (
        ["train", "--checkpoints", "0.5,,1", "--schedule", "constant"],
        "'0.5,,1'",
    ),
    "train: empty size in a list": (["train", "--d-model", "8,,16"], "'8,,16'"),
    "train: window without windows": (["train", "--window", "5"], "window 5 is set"),
    "train: no steps": (["find", "--steps", "0"], "max_steps 0"),
    "train: learning rate 0": (["train", "--lr", "0"], "lr 0.0"),
    "train: negative time limit": (["train", "--time-limit", "-1"], "time_limit_s -1.0"),
    "train: d_model 100000": (["train", "--d-model", "100000"], "d_model 100000"),
    "train: empty batches": (["train", "--batch-size", "0"], "batch_size 0"),
    "train: negative seed": (["train", "--seed", "-1"], "seed -1"),
    "train: negative seed in a list": (["train", "--seeds", "0,-2"], "seed -2"),
    "train: seed list not integers": (["train", "--seeds", "0,one"], "'0,one'"),
    "train: size list with 0": (["train", "--d-model", "16,0"], "d_model 0"),
    "train: size repeated": (["train", "--d-model", "16,16"], "'16,16' repeats"),
    "train: unknown op with a list": (
        ["train", "--tasks", "max,sum", "--d-model", "8,16"],
        "'sum'",
    ),
    "train: more than memory allows": (
        ["train", "--d-model", "64,32", "--memory-gb", "0.0001"],
        "d_model 64 at batch size 64 needs about",
    ),
    "train: unknown device": (["train", "--device", "tpu"], "device 'tpu'"),
    "train: infinite learning rate": (["train", "--lr", "inf"], "lr inf is not allowed"),
    "train: infinite init": (["train", "--init-std", "inf"], "init_std inf is not allowed"),
    "train: infinite weight": (
        ["train", "--tasks", "max,add", "--weights", "add=inf"],
        "positive finite weight",
    ),
    "find: infinite learning rate": (["find", "--lr", "inf"], "lr inf is not allowed"),
    "search: infinite precision": (["find", "--precision", "inf"], "precision inf"),
    "storage: empty sqlite path": (["status", "--storage", "sqlite:///"], "'sqlite:///'"),
    "storage: in memory": (["find", "--storage", "sqlite://"], "'sqlite://' is not a file"),
    "storage: :memory:": (["find", "--storage", "sqlite:///:memory:"], "is not a file"),
    "storage: a directory": (["find", "--storage", "sqlite:///{tmp}/adir"], "is a directory"),
    "storage: not a database": (["find", "--storage", "sqlite:///{tmp}/notes.txt"], "notes.txt"),
    "storage: file as parent": (["find", "--storage", "sqlite:///{tmp}/notes.txt/s.db"], "notes"),
    "storage: folder missing": (
        ["find", "--storage", "sqlite:///{tmp}/no/such/dir/x.db"],
        "folder '{tmp}/no/such/dir' does not exist",
    ),
    "storage: driver missing": (["find", "--storage", "mysql://u@localhost/db"], "'mysql://"),
    "storage: unknown scheme": (["status", "--storage", "nosuch://x"], "'nosuch://x'"),
    "study: empty name": (["find", "--study", ""], "study name ''"),
    "study: blank name": (["worker", "--study", "  "], "study name '  '"),
    "study: 600 characters": (["find", "--study", LONG_NAME], "600 characters"),
    "study: newline in name": (["find", "--study", "a\nb"], "'a\\nb'"),
    "study: unknown to worker": (["worker", "--study", "other"], "'other' is not in this storage"),
    "study: same name, other settings": (
        ["find", "--study", "existing", "--d-hi", "20"],  # a budget may change: not a d range
        "d_hi: 16 -> 20",
    ),
    "checkpoint: --out under a file": (
        ["train", "--out", "{tmp}/notes.txt/model.ckpt"],
        "notes.txt/model.ckpt",
    ),
    "checkpoint: --out where nothing can be made": (
        ["train", "--out", "/proc/nope/model.ckpt"],
        "'/proc/nope/model.ckpt' cannot be written",
    ),
    "checkpoint: --out onto an existing file": (
        ["train", "--out", "{tmp}/notes.txt"],
        "'{tmp}/notes.txt' exists: choose another --out, or pass --force",
    ),
    "checkpoint: analyze a text file": (
        ["analyze", "--checkpoint", "{tmp}/notes.txt"],
        "notes.txt' is not a threshold checkpoint",
    ),
    "checkpoint: analyze a missing file": (
        ["analyze", "--checkpoint", "{tmp}/missing.ckpt"],
        "missing.ckpt' cannot be read",
    ),
    # Two values of which one would be taken silently (issue 62): refused, naming both.
    "conflict: an op weighted twice": (
        ["find", "--tasks", "max,add", "--weights", "max=1,max=2"],
        "name op 'max' twice (max=1 and max=2)",
    ),
    "conflict: --seed and --seeds": (
        ["train", "--seed", "5", "--seeds", "0,1"],
        "--seed 5 and --seeds 0,1",
    ),
    "conflict: a decay under a constant schedule": (
        ["find", "--decay-steps", "500", "--schedule", "constant"],
        "decay_steps 500 is set but schedule is 'constant'",
    ),
    "conflict: a floor under a constant schedule": (
        ["train", "--min-lr-ratio", "0.5", "--schedule", "constant"],
        "min_lr_ratio 0.5 is set but schedule is 'constant'",
    ),
    "conflict: a warm-up longer than the budget": (
        ["train", "--warmup-steps", "500", "--steps", "100"],
        "warmup_steps 500 is not below max_steps 100",
    ),
    "train: --seeds not integers, named as given": (
        ["train", "--seeds", "a"],
        "--seeds 'a' is not an integer or a list like 0,1,2",
    ),
    "survey: accuracy above 1": (["survey", "existing", "--min-accuracy", "2"], "--min-accuracy 2"),
    "survey: unknown study": (["survey", "nope"], "'nope' is not in this storage"),
    # What a worker would refuse on its first trial, refused by find before any study (issue 68).
    "find: a chance-corrected level at the asymptote": (
        ["find", "--chance-corrected", "--level", "0.999"],
        "level 0.999 with chance_corrected (--chance-corrected)",
    ),
    "find: a test set of one answer": (
        ["find", "--mod", "3", "--depth", "2", "--split-seed", "7", "--n-test", "2000"],
        "one answer only (chance 1 at --mod 3, --split groups, --split-seed 7)",
    ),
    "find: the paper's split at mod 3": (
        ["find", "--recipe", "paper", "--mod", "3", "--depth", "2", "--n-test", "2000"],
        "--split triples",
    ),
    "find: a negative split seed": (["find", "--split-seed", "-1"], "split_seed -1"),
    "find: --cache-dir a file": (
        ["find", "--cache-dir", "{tmp}/notes.txt"],
        "notes.txt' is a file",
    ),
    "train: --cache-dir under a file": (
        ["train", "--cache-dir", "{tmp}/notes.txt/c"],
        "notes.txt' is a file",
    ),
    # Absurd values (issue 68): refused naming the limit, not run on.
    "train: 10^30 steps": (["find", "--steps", "1" + "0" * 30], "use 1 to 10,000,000"),
    "search: 10^20 runs": (["find", "--budget", "1" + "0" * 20], "use 3 to 10,000"),
    "train: threads beyond the cores": (["train", "--threads", "100000"], "--threads 100000 is"),
    "cluster: a time SLURM cannot read": (
        [*SLURM, "--time", "abc"],
        "--time 'abc' is not a SLURM time",
    ),
    "cluster: an array of 10^8 workers": (
        [*SLURM, "--workers", "100000000"],
        "--workers 100,000,000 array tasks is not allowed",
    ),
    # Suite files (`threshold run studies/X.toml`, issue 6) add their cases here: a missing file,
    # TOML that does not parse, an unknown key, a study of the suite with a bad setting.
}
if not torch.cuda.is_available():  # where there is a GPU, these are not errors
    CASES["train: cuda without a GPU"] = (["train", "--device", "cuda"], "sees no CUDA GPU")
    CASES["find: cuda without a GPU"] = (["find", "--device", "cuda"], "sees no CUDA GPU")
    CASES["worker: cuda without a GPU"] = (
        ["worker", "--study", "existing", "--device", "cuda:0"],
        "sees no CUDA GPU",
    )


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A storage holding study 'existing' (the tiny study's settings) with one finished trial."""
    root = tmp_path_factory.mktemp("template")
    url = f"sqlite:///{root}/s.db"
    storage = open_storage(url)
    study = create_or_load_study(SETTINGS, storage, "existing")
    study.add_trial(
        optuna.trial.create_trial(
            value=0.5,
            params={"d_model": 16},
            distributions={"d_model": optuna.distributions.IntDistribution(2, 512)},
            user_attrs={"seed": 1, "replicate": 0},
        )
    )
    storage.engine.dispose()
    with sqlite3.connect(root / "s.db") as con:  # fold the WAL into the file: one file to copy
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return (root / "s.db").read_bytes()


def rows(path) -> list[str]:
    with sqlite3.connect(path) as con:
        return list(con.iterdump())


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    case, template, tmp_path, monkeypatch, restore_signals
):
    args, named = CASES[case]
    (tmp_path / "s.db").write_bytes(template)
    (tmp_path / "notes.txt").write_text("not a database\n")
    (tmp_path / "adir").mkdir()
    monkeypatch.chdir(tmp_path)
    before = rows(tmp_path / "s.db")
    args = [a.format(tmp=tmp_path) for a in args]
    if args[0] != "train" and "--storage" not in args:
        args += ["--storage", f"sqlite:///{tmp_path}/s.db"]
    if args[0] == "find":  # the stored study's settings, then the case's own options
        args = ["find", *FIND_ARGS, *args[1:]]
    if args[0] == "train" and "--out" not in args:
        args += ["--out", str(tmp_path / "model.ckpt")]
    env = {"THRESHOLD_CACHE": str(tmp_path / "cache"), "THRESHOLD_ARTIFACTS": str(tmp_path / "art")}
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert named.format(tmp=tmp_path) in lines[0], lines[0]
    assert rows(tmp_path / "s.db") == before
    assert (tmp_path / "notes.txt").read_text() == "not a database\n"
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("s.db")) == [
        "adir",
        "notes.txt",
    ]
    assert not list((tmp_path / "adir").iterdir())


def test_at_least_twenty_cases():
    assert len(CASES) >= 20


def write_with_valid_hash(path, body: bytes, magic: bytes = MAGIC) -> None:
    path.write_bytes(magic + hashlib.sha256(body).hexdigest().encode() + b"\n" + body)


BAD_CHECKPOINTS = {
    "empty file": (lambda p: p.write_bytes(b""), "no header"),
    "header only": (lambda p: p.write_bytes(MAGIC + b"0" * 64 + b"\n"), "does not match"),
    "other format version": (
        lambda p: write_with_valid_hash(p, b"x", b"threshold-checkpoint v9 "),
        "no header",
    ),
    "garbage under a valid hash": (
        lambda p: write_with_valid_hash(p, b"not a torch file"),
        "cannot be decoded",
    ),
    "a directory": (lambda p: p.mkdir(), "cannot be read"),
}


@pytest.mark.parametrize("case", list(BAD_CHECKPOINTS))
def test_bad_checkpoint_is_refused_in_one_line_naming_the_file(case, tmp_path):
    make, named = BAD_CHECKPOINTS[case]
    path = tmp_path / "bad.ckpt"
    make(path)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message and named in message


@pytest.mark.parametrize("command", ["status", "report", "find"])
def test_a_corrupt_inner_page_is_one_line_exit_2(command, template, tmp_path, restore_signals):
    """Damage past the header: SQLite opens the file, and only a read meets the bad page."""
    body = bytearray(template)
    page = 4096
    assert len(body) >= 4 * page, len(body)
    rng = random.Random(0)
    body[2 * page : 3 * page] = bytes(rng.randrange(256) for _ in range(page))
    (tmp_path / "s.db").write_bytes(bytes(body))
    args = [command, "--storage", f"sqlite:///{tmp_path}/s.db"]
    if command == "find":
        args[1:1] = FIND_ARGS
    if command == "report":
        args += ["-o", str(tmp_path / "out")]
    result = CliRunner().invoke(app, args, env={"THRESHOLD_CACHE": str(tmp_path / "cache")})
    assert result.exit_code == 2, (result.output, result.exception)
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: storage 'sqlite:///{tmp_path}/s.db' is damaged"), line
    assert (tmp_path / "s.db").read_bytes() == bytes(body)


def test_trial_checkpoint_missing_from_the_artifact_store(tmp_path, monkeypatch):
    """The artifacts directory moved: one line that says where it looked, not a traceback."""
    url = f"sqlite:///{tmp_path}/s.db"
    study = create_or_load_study(SETTINGS, open_storage(url), "moved")
    study.add_trial(
        optuna.trial.create_trial(
            value=0.5,
            params={"d_model": 16},
            distributions={"d_model": optuna.distributions.IntDistribution(2, 512)},
            user_attrs={"checkpoint_artifact": "0f0e-gone"},
        )
    )
    monkeypatch.setenv("THRESHOLD_ARTIFACTS", str(tmp_path / "elsewhere"))
    with pytest.raises(ThresholdError, match=r"0f0e-gone of trial 0 .*elsewhere"):
        trial_checkpoint(study, 0, url)


@pytest.mark.parametrize(
    ("target", "named"),
    [
        ("postgres@{host}/nosuchdb", '"nosuchdb" does not exist'),
        ("nobody@{host}/threshold", '"nobody" does not exist'),
    ],
)
def test_bad_postgresql_url_on_a_real_server(postgres_url, target, named, restore_signals):
    host = postgres_url.split("@", 1)[1].split("/", 1)[0]
    url = "postgresql+psycopg://" + target.format(host=host)
    before = [s.study_name for s in optuna.get_all_study_summaries(postgres_url)]
    result = CliRunner().invoke(app, ["find", *FIND_ARGS, "--storage", url])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: storage {url!r} cannot be opened") and named in line, line
    assert [s.study_name for s in optuna.get_all_study_summaries(postgres_url)] == before
