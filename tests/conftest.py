"""Shared fixtures: a real PostgreSQL server, started for the test session when a test asks,
headless Chromium for the browser tests, and a fresh interpreter for import checks."""

from __future__ import annotations

import glob
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from threshold.allocator import keep_freed_memory

# One torch thread in every test process, as the CLI gives its workers (TrainConfig.threads): the
# test processes share the cores with each other and with their workers, and a second thread only
# spins. Measured on a busy 2-core machine (load 6): tests/test_engine.py 159 s of CPU with one
# thread, 297 s with two. Torch reads it when it loads, after this file.
os.environ["OMP_NUM_THREADS"] = "1"
# The C allocator keeps freed memory for the next array, as the CLI sets it for its processes
# (threshold/allocator.py): the search's tests spend a sixth of their CPU on page faults without.
keep_freed_memory()

# The files that take half a minute or more of CPU time (`--cpu-durations`, 2026-11-26, after
# the third round of docs/testing.md), longest first: started first so that no core idles at
# the end while the last long file runs alone. test_cluster.py takes little CPU but 40 s of wall
# time (its SLURM daemons are not its children).
LONG_FIRST = ("test_search_maths.py", "test_search_cli.py", "test_faults.py", "test_suite.py",
              "test_engine.py", "test_cli.py", "test_recipe.py", "test_search_workers.py",
              "test_concurrency.py", "test_cluster.py", "test_engine_search.py", "test_report.py",
              "test_search_ratio.py", "test_analysis_cli.py", "test_windows.py", "test_api.py",
              "test_dashboard_browser.py", "test_layers.py", "test_train.py",
              "test_determinism.py")  # fmt: skip


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`-n auto --dist loadfile`, pyproject.toml) a file's tests run in one
    worker, so that its module fixtures are built once; xdist hands out the files in this order,
    the long ones first."""
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: else as collected


def pytest_addoption(parser):
    parser.addoption(
        "--cpu-durations", type=int, default=None, metavar="N",
        help="List the N tests (0: all) that took the most CPU time, this process's and that of the"
        " subprocesses it waited for, and each file's total: a profile that holds on a busy"
        " machine, where --durations' wall-clock times mostly measure the other load.",
    )  # fmt: skip


_CPU_S: dict[str, float] = {}
_CPU_START = pytest.StashKey[float]()


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    item.stash[_CPU_START] = _cpu_s()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """The test's CPU seconds ride on its teardown report, which reaches the controlling process
    under pytest-xdist too. A session fixture counts for the first test that asks for it."""
    outcome = yield
    if call.when == "teardown" and _CPU_START in item.stash:
        outcome.get_result().user_properties.append(("cpu_s", _cpu_s() - item.stash[_CPU_START]))


def pytest_runtest_logreport(report):
    if report.when == "teardown":
        _CPU_S.update((report.nodeid, v) for k, v in report.user_properties if k == "cpu_s")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    n = config.getoption("--cpu-durations")
    if n is None or not _CPU_S:
        return
    write = terminalreporter.write_line
    ranked = sorted(_CPU_S.items(), key=lambda kv: -kv[1])
    total = sum(_CPU_S.values())
    terminalreporter.write_sep("=", f"CPU time: {total:.0f} s in {len(ranked)} tests")
    for nodeid, s in ranked[: n or None]:
        write(f"{s:8.1f} s  {nodeid}")
    files: dict[str, float] = {}
    for nodeid, s in ranked:
        files[nodeid.split("::")[0]] = files.get(nodeid.split("::")[0], 0.0) + s
    terminalreporter.write_sep("-", "CPU time by file")
    for name, s in sorted(files.items(), key=lambda kv: -kv[1]):
        write(f"{s:8.1f} s  {name}")


@pytest.fixture
def restore_signals():
    """Commands run in this process (`run`, `find`, ...) install SIGINT/SIGTERM handlers: give
    the test session its own back."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


@pytest.fixture
def cli(tmp_path, monkeypatch, restore_signals):
    """``cli(ARGS, cwd=None, **env)``: ``threshold ARGS`` in this process (Typer's runner) from
    folder ``cwd`` (default the test's) with its data cache there: milliseconds, where a fresh
    interpreter costs about 3 s of CPU (torch's import). Returns the result: ``exit_code``,
    ``stdout``, ``stderr``, ``exception``. Commands that start workers belong in real processes."""

    def invoke(args, cwd=None, **env):
        cwd = tmp_path if cwd is None else cwd
        monkeypatch.chdir(cwd)
        return _invoke(args, cwd, **env)

    threads = torch_threads()
    yield invoke
    torch_threads(threads)  # commands set their own (analyze: 1)


def _invoke(args: list, cwd, **env):
    """``threshold ARGS`` by Typer's runner in this process, already in folder ``cwd``, with the
    data cache there and no storage taken from the environment: what ``cli`` and
    :func:`run_in_process` share."""
    from typer.testing import CliRunner

    from threshold.cli import app

    env = {"THRESHOLD_CACHE": str(cwd / "cache"), "THRESHOLD_STORAGE": None, **env}
    return CliRunner().invoke(app, [str(a) for a in args], env=env)


def torch_threads(n: int | None = None) -> int | None:
    """Torch's thread count, set to ``n`` when given; None while torch is not imported."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    if n is not None:
        torch.set_num_threads(n)
    return torch.get_num_threads()


@pytest.fixture
def loaded_by():
    """``loaded_by(IMPORTS, WATCHED)``: which of WATCHED a fresh interpreter has loaded after
    importing the modules IMPORTS (this process has loaded everything already)."""

    def loaded(imports: list[str], watched: list[str]) -> list[str]:
        code = (
            f"import sys, {', '.join(imports)}\n"
            f"print(' '.join(m for m in {watched!r} if m in sys.modules))"
        )
        out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                             text=True)  # fmt: skip
        return out.stdout.split()

    return loaded


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pg_bin() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return os.path.dirname(found[-1]) if found else None


@pytest.fixture(scope="session")
def postgres_url():
    """URL of a throwaway PostgreSQL server (Debian's package; `.ci/run` installs it)."""
    bindir = _pg_bin()
    if bindir is None:
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL is not installed: .ci/run should have installed it")
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.fail("psycopg is not installed: pip install -e '.[dev]'")
    root = tempfile.mkdtemp(prefix="threshold-pg-")
    data = os.path.join(root, "data")
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_postgres:
        shutil.chown(root, "postgres")
    port = _free_port()

    def pg(*args):
        subprocess.run([*as_postgres, *args], check=True, capture_output=True)

    pg(f"{bindir}/initdb", "-D", data, "-A", "trust", "-U", "postgres")
    pg(
        f"{bindir}/pg_ctl", "-D", data, "-l", os.path.join(root, "log"), "-w", "start",
        "-o", f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c max_connections=100",
    )  # fmt: skip
    try:
        for _ in range(50):
            ok = subprocess.run(
                [f"{bindir}/pg_isready", "-h", "127.0.0.1", "-p", str(port)], capture_output=True
            )
            if ok.returncode == 0:
                break
            time.sleep(0.2)
        pg(f"{bindir}/createdb", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "threshold")
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/threshold"
    finally:
        subprocess.run(
            [*as_postgres, f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "stop"],
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)


CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# Flags this machine's closed network needs (no sign-in, update or field-trial traffic).
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--window-size=1400,1000",
]  # fmt: skip
BROWSER_WAIT_S = 90  # page loads on a shared 2-core machine


@pytest.fixture
def browser(tmp_path):
    """Headless Chromium under Selenium, with a fresh profile.

    The browser is Debian's chromium driven through Debian's chromedriver (`.ci/run` installs
    both): skipped when missing, except in CI (CI=true), where that is a failure.
    """
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(path)]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("the selenium package (pip install -e '.[dev]')")
    if missing:
        reason = f"no {', '.join(missing)}: apt-get install -y chromium chromium-driver"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} (.ci/run should have installed it)")
        pytest.skip(reason)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in [*CHROMIUM_ARGS, f"--user-data-dir={tmp_path / 'profile'}"]:
        options.add_argument(arg)
    service = Service(CHROMEDRIVER, log_output=str(tmp_path / "chromedriver.log"))
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(BROWSER_WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


# Small real studies for the report tests (tests/test_report*.py), built once per session.
# Depth 1: 9-token sequences (depth 2: 60); decoding them is most of a tiny run's CPU.
REPORT_TINY = dict(mod=5, depth=1, n_train=2000, n_test=100, d_lo=4, d_hi=16, steps=40)


def _tiny_analysis(study, number: int, folder) -> None:
    """What `threshold analyze` leaves for trial ``number`` (figures, scores.json, the summary on
    the study), from made-up scores: analysing a real model takes minutes here."""
    import json

    import numpy as np

    from threshold.analysis.figures import ablation_figure, embedding_figure, layer_usage_figure
    from threshold.analysis.headline import summary
    from threshold.search.results import save_analysis

    rng = np.random.default_rng(0)
    scores = {
        "measure": "max",
        "embedding": {
            "separation": {"parity": {"vs_p95": 0.5}, "random": {"vs_p95": 0.3}},
            "ordering": {"value": 0.91, "vs_p95": 1.6},
        },
        "layer_usage": {"attn": [0.1, 0.2, 0.2, 0.3], "mlp": [0.3, 0.2, 0.2, 0.1],
                        "residual": [0.4, 0.5, 0.6, 0.7], "attn_share_all": 0.45},
        "ablation": {"intact": 0.9, "attn": {"all": 0.2, "0": 0.5, "1": 0.6, "2": 0.7, "3": 0.8},
                     "mlp": {"all": 0.1, "0": 0.4, "1": 0.5, "2": 0.6, "3": 0.7}},
    }  # fmt: skip
    folder.mkdir(parents=True)
    title = f"{study.study_name} trial {number}"
    embedding_figure(rng.normal(size=(5, 4)), list("01234"), title, folder / "embedding.png")
    layer_usage_figure(scores["layer_usage"], title, folder / "layer_usage.png")
    ablation_figure(scores["ablation"], title, folder / "ablation.png")
    (folder / "scores.json").write_text(json.dumps(scores))
    save_analysis(study, number, summary(scores) | {"d_model": 16, "accuracy": 0.3})


def _tiny_transfer(path) -> None:
    """A `threshold transfer --json` output, made from TransferRun records (no training)."""
    import json
    from dataclasses import replace

    from threshold.analysis.transfer import TransferRun, summarize

    base = TransferRun(
        seed=0, source_accuracy={"max": 0.9, "med": 0.8}, source_reused=False,
        transfer_accuracy={"add": 0.6}, scratch_accuracy={"add": 0.2}, transfer_steps=500,
        scratch_steps=500, transfer_curve=[(250, 0.3), (500, 0.55)],
        scratch_curve=[(250, 0.15), (500, 0.2)],
    )  # fmt: skip
    runs = [base, replace(base, seed=1, transfer_accuracy={"add": 0.5})]
    report = {"pretrain": ["max", "med"], "tasks": ["add"], "mod": 5, "testbed": "listops",
              "d_model": 8, "params_total": 1234, **summarize(runs, "add")}  # fmt: skip
    path.write_text(json.dumps(report))


@pytest.fixture(scope="session")
def report_studies(tmp_path_factory):
    """Three studies in one SQLite storage: ``a`` (MAX, 5 runs), ``b`` (MAX in MAX+MIN, 3 runs)
    and ``few`` (MAX in MAX+MED with 1 run: too few to fit); an analysis of a's trial 0 under
    ``cwd/studies/analysis``; a transfer file. Returns a dict of url, cwd, names, transfer."""
    import json

    import optuna

    from threshold.config import Execution, make_recipe
    from threshold.search.fit import transition_estimate
    from threshold.search.sampler import PARAM, policy_settings
    from threshold.search.spec import StudySettings
    from threshold.search.study import SearchConfig, create_or_load_study, open_storage
    from threshold.search.worker import run_worker
    from threshold.tasks import TaskConfig

    tmp = tmp_path_factory.mktemp("report-studies")
    url = f"sqlite:///{tmp}/s.db"
    storage = open_storage(url, heartbeat_s=2)
    names = []
    # `find --tasks TASKS [--measure max] --budget N`, made and run in this process (a fresh
    # interpreter and its worker process cost about 9 s of CPU more)
    for tasks, measure, budget in (("max", None, 5), ("max,min", "max", 3)):
        made = StudySettings.from_options(tasks, measure=measure, budget=budget, **REPORT_TINY)
        name = create_or_load_study(made, storage).study_name
        ran = run_worker(name, Execution(url, heartbeat_s=2, cache_dir=tmp / "cache"))
        assert ran == budget
        names.append(name)
    task = TaskConfig(ops=("max", "med"), n=5, measure="max", n_train=2000, n_test=100)
    train = make_recipe(max_steps=REPORT_TINY["steps"]).train  # the others' (its warm-up fitted)
    settings = StudySettings(task, train, SearchConfig(d_lo=4, d_hi=16))
    few = create_or_load_study(settings, storage)
    policy = policy_settings(settings, 0.58)
    few.add_trial(
        optuna.trial.create_trial(
            params={PARAM: 16}, distributions={PARAM: optuna.distributions.IntDistribution(2, 512)},
            value=0.6, user_attrs={"params_total": dict(policy.params_of_d)[16], "seed": 1,
                                   "steps": 40, "train_s": 1.5, "stop_reason": "max_steps",
                                   "accuracy": json.dumps({"max": 0.6, "med": 0.5})},
        )
    )  # fmt: skip
    few.set_user_attr("estimate", json.dumps(transition_estimate(policy, [(16, 0.6)])))
    study_a = optuna.load_study(study_name=names[0], storage=storage)
    _tiny_analysis(study_a, 0, tmp / "studies" / "analysis" / f"{names[0]}-trial0")
    _tiny_transfer(tmp / "transfer.json")
    return {"url": url, "cwd": tmp, "a": names[0], "b": names[1], "few": few.study_name,
            "transfer": tmp / "transfer.json"}  # fmt: skip


@pytest.fixture(scope="session")
def built_report(report_studies):
    """`threshold report` of every study, baseline a, with the transfer file: (folder, results,
    the --json output)."""
    import json

    s = report_studies
    out = s["cwd"] / "reports" / "all"
    args = ["report", "--storage", s["url"], "-o", str(out), "--baseline", s["a"], "--transfer",
            str(s["transfer"]), "--json"]  # fmt: skip
    result = run_in_process(args, s["cwd"])
    assert result.exit_code == 0, (result.stderr, result.exception)
    return out, json.loads((out / "results.json").read_text()), json.loads(result.stdout)


@pytest.fixture(scope="session")
def in_process():
    """:func:`run_in_process`, for module fixtures (tests take the ``cli`` fixture)."""
    return run_in_process


def run_in_process(args: list[str], cwd, **env):
    """``threshold ARGS`` in this process from folder ``cwd`` (Typer's runner), for fixtures wider
    than a test (the ``cli`` fixture is the test's own); the signal handlers are given back."""
    saved = {n: signal.getsignal(n) for n in (signal.SIGINT, signal.SIGTERM)}
    here, threads = os.getcwd(), torch_threads()
    os.chdir(cwd)
    try:
        return _invoke(args, cwd, **env)
    finally:
        os.chdir(here)
        torch_threads(threads)
        for n, handler in saved.items():
            signal.signal(n, handler)


SLURM_DAEMONS = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/sbatch")


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A one-node SLURM cluster (Debian's slurmctld, slurmd, slurm-client and munge; `.ci/run`
    installs them): its own munge key and socket, slurm.conf and state in a temporary folder, the
    two cores as the node's CPUs. Yields the environment whose SLURM_CONF points the commands at
    it; skipped without SLURM or root (slurmd runs jobs as root here), except in CI."""
    missing = [path for path in SLURM_DAEMONS if not os.path.exists(path)]
    reason = None
    if missing:
        reason = f"no {', '.join(missing)}: apt-get install -y slurmctld slurmd slurm-client munge"
    elif os.geteuid() != 0:
        reason = "slurmd of a test cluster runs as root"
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} (.ci/run should have installed SLURM and runs as root)")
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("slurm")
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    host = socket.gethostname().split(".")[0]
    cores = os.cpu_count() or 1
    conf = root / "slurm.conf"
    conf.write_text(
        f"""ClusterName=threshold-test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root}/munge.socket
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MailProg=/bin/true
NodeName={host} NodeAddr=127.0.0.1 CPUs={cores} RealMemory=2000 State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
    )
    env = dict(os.environ, SLURM_CONF=str(conf))
    munge = [
        "/usr/sbin/munged", "--force", f"--socket={root}/munge.socket", f"--key-file={key}",
        f"--pid-file={root}/munged.pid", f"--log-file={root}/munged.log",
        f"--seed-file={root}/munged.seed",
    ]  # fmt: skip
    try:
        for command in (munge, ["/usr/sbin/slurmctld"], ["/usr/sbin/slurmd"]):
            subprocess.run(command, check=True, capture_output=True, env=env)
        for _ in range(100):
            state = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True,
                                   env=env)  # fmt: skip
            if state.stdout.strip() == "idle":
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"the test cluster's node did not come up: see {root}/slurmctld.log")
        yield env
    finally:
        subprocess.run(["scontrol", "shutdown"], capture_output=True, env=env)
        pid = root / "munged.pid"
        if pid.exists():
            os.kill(int(pid.read_text()), signal.SIGTERM)
