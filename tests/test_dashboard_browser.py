"""`threshold dashboard` end to end: a real (tiny) study, the server as a subprocess, and the pages
in headless Chromium.

The browser is Debian's chromium driven by Selenium through Debian's chromedriver: driver and
browser come from the same Debian source package, so their versions always match, and nothing is
downloaded (Playwright expects a browser build of its own and supports a system Chromium only
loosely). The `browser` fixture is in conftest.py. Screenshots go to the test's tmp dir, and to
$THRESHOLD_SCREENSHOTS when that is set.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from urllib.request import urlopen

import pytest

TINY = ["--tasks", "max", "--mod", "5", "--n-train", "2000", "--n-test", "100",
        "--d-lo", "4", "--d-hi", "16", "--heartbeat", "2"]  # fmt: skip
WAIT_S = 90  # page loads on a shared 2-core machine


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A real study of 5 tiny runs: (storage URL, name, the estimate `find` reported)."""
    tmp = tmp_path_factory.mktemp("dashboard")
    url = f"sqlite:///{tmp}/s.db"
    env = dict(os.environ, THRESHOLD_CACHE=str(tmp / "cache"))
    proc = subprocess.run(
        [sys.executable, "-m", "threshold", "find", *TINY, "--steps", "40", "--budget", "5",
         "--storage", url, "--json"],
        capture_output=True, text=True, env=env, cwd=tmp, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    return url, report["study"], report["transition"], report["answer"]


def found(estimate: dict, answer: dict) -> tuple[str, str]:
    """What the note's headline and the figure's title say the study found: its 80% point, or
    where its runs only bound it the bound (issue 62: every view says a bound as a bound)."""
    if answer["located"]:
        p80 = f"{estimate['params_p80']:,.0f} parameters"
        return f"80% point at {p80}", f"80% point: {p80}"
    if answer["kind"] == "none":
        return "80% point not located", "80% point: not located"
    sign = ">" if answer["kind"] == "lower bound" else "<="
    bound = f"{sign} {answer['params']:,.0f} parameters, not located"
    return f"80% point {bound}", f"80% point: {bound}"


@pytest.fixture(scope="module")
def dashboard(study, tmp_path_factory):
    """`threshold dashboard` on the study, on a port the OS picks; its base URL."""
    url = study[0]
    tmp = tmp_path_factory.mktemp("server")
    with open(tmp / "stderr", "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "threshold", "dashboard", "--storage", url, "--port", "0"],
            stdout=subprocess.PIPE, stderr=err, text=True, cwd=tmp,
        )  # fmt: skip
    try:
        line = _first_line(proc, timeout_s=120)
        match = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert match, f"no URL in {line!r}; stderr: {(tmp / 'stderr').read_text()}"
        assert f"optuna-dashboard on {url} (1 studies)" in line
        note = proc.stdout.readline()  # each study's Note page, where its findings are
        assert re.search(r"^  \S+: http://127\.0\.0\.1:\d+/dashboard/studies/\d+/note$", note), note
        yield match.group(0)
    finally:
        proc.send_signal(signal.SIGINT)  # what Ctrl-C does
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, (tmp / "stderr").read_text()
    assert "dashboard stopped" in (tmp / "stderr").read_text()


def _first_line(proc: subprocess.Popen, timeout_s: float) -> str:
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout_s):
            raise AssertionError(f"the dashboard printed nothing in {timeout_s} s")
    return proc.stdout.readline()


def _get(url: str) -> bytes:
    with urlopen(url, timeout=60) as r:
        return r.read()


def test_server_shows_notes_plots_and_checkpoints(study, dashboard):
    _, name, estimate, answer = study
    (summary,) = json.loads(_get(dashboard + "api/studies"))["study_summaries"]
    assert summary["study_name"] == name
    detail = json.loads(_get(f"{dashboard}api/studies/{summary['study_id']}"))
    headline, _ = found(estimate, answer)
    assert detail["note"]["body"].startswith(f"## MAX (listops mod 5): {headline}")
    assert [g["id"] for g in detail["plotly_graph_objects"]] == ["transition-curve"]
    trials = detail["trials"]
    assert len(trials) == 5
    # Each trial's checkpoint can be downloaded from the dashboard, byte for byte as stored.
    trial = trials[0]
    (artifact,) = trial["artifacts"]
    digest = next(a["value"] for a in trial["user_attrs"] if a["key"] == "checkpoint_sha256")
    body = _get(
        f"{dashboard}artifacts/{summary['study_id']}/{trial['trial_id']}/{artifact['artifact_id']}"
    )
    assert body.split(b"\n", 1)[0] == b"threshold-checkpoint v1 " + digest.encode()


def test_pages_in_a_browser(study, dashboard, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    _, name, estimate, answer = study
    headline, title = found(estimate, answer)
    wait = WebDriverWait(browser, WAIT_S)

    def page_shows(*texts):
        wait.until(lambda d: all(t in d.find_element(By.TAG_NAME, "body").text for t in texts))
        return browser.find_element(By.TAG_NAME, "body").text

    shots = []

    def screenshot(label):
        path = tmp_path / f"dashboard-{label}.png"
        assert browser.save_screenshot(str(path))
        shots.append(path)

    # The study list shows the study; a click opens it, as a person would.
    browser.get(dashboard)
    page_shows(name)
    screenshot("studies")
    innermost = f"//*[contains(., '{name}') and not(.//*[contains(., '{name}')])]"
    browser.find_element(By.XPATH, innermost).click()
    wait.until(lambda d: re.search(r"/dashboard/studies/\d+$", d.current_url))
    study_page = browser.current_url
    # Its top page draws the transition curve stored with the note.
    curve = wait.until(
        lambda d: d.find_element(
            By.XPATH,
            "//*[name()='text' and contains(., 'accuracy against size')]"
            "/ancestor::div[contains(@class, 'js-plotly-plot')]",
        )
    )
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", curve)
    page_shows("logistic fit" if estimate.get("fit") else "runs", "total parameters")
    # What the study found, where its page shows it: the figure's title, the first study
    # attribute, and the value's name (not "Objective 0") in the history and best-trial panels.
    text = page_shows(title, "max test accuracy (greedy)")
    assert "Objective 0" not in text
    attribute = title.removeprefix("80% point: ").removeprefix("80% point at ")
    if answer["located"]:
        attribute += ", 90%: "
    assert re.search(rf"80%\s+point\s+{re.escape(attribute)}", text), text
    screenshot("curve")
    # The trial list shows every trial, and the selected trial's checkpoint.
    browser.get(study_page + "/trials")
    text = page_shows("5 Trials", "Trial 0", "Trial 4", "Artifacts")
    assert re.search(r"trial0-d\d+-seed\d+\.ckpt", text), text
    screenshot("trials")
    # The note states the estimate.
    browser.get(study_page + "/note")
    text = page_shows(headline, "Runs: 5 done", "Settings")
    lo, hi = estimate["interval_params"]
    assert f"{lo:,.0f} - {hi:,.0f}" in text
    screenshot("note")

    copy_to = os.environ.get("THRESHOLD_SCREENSHOTS")
    for path in shots:
        if copy_to:
            Path(copy_to).mkdir(parents=True, exist_ok=True)
            shutil.copy(path, copy_to)
        print(f"screenshot: {path}")
