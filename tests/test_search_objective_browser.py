"""An objective's study as a new user sees it: `threshold status`, the dashboard and the report,
each in headless Chromium at 1280 px (the `browser` fixture of conftest.py). Screenshots go to
the test's tmp dir, and to $THRESHOLD_SCREENSHOTS when that is set."""

from __future__ import annotations

import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

import threshold
from threshold.cli import app

HERE = Path(__file__).parent
WAIT_S = 90  # page loads on a shared 2-core machine


@pytest.fixture(scope="module")
def objective_study(tmp_path_factory):
    """A study of the synthetic bimodal objective (nothing trained): (URL, name, answer)."""
    tmp = tmp_path_factory.mktemp("objective")
    url = f"sqlite:///{tmp}/s.db"
    found = threshold.find_transition(
        "synthetic_objectives:bimodal", "4..256", chance=0.1, storage=url, budget=10,
        size_name="hidden width",
    )  # fmt: skip
    return url, found["study"], found


def _shots(browser, tmp_path: Path, label: str) -> None:
    browser.set_window_size(1280, 1000)
    path = tmp_path / f"objective-{label}.png"
    assert browser.save_screenshot(str(path))
    copy_to = os.environ.get("THRESHOLD_SCREENSHOTS")
    if copy_to:
        Path(copy_to).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, copy_to)


def test_status_dashboard_and_report_of_an_objective_study(objective_study, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    url, name, found = objective_study
    wait = WebDriverWait(browser, WAIT_S)

    def page_shows(*texts):
        wait.until(lambda d: all(t in d.find_element(By.TAG_NAME, "body").text for t in texts))
        return browser.find_element(By.TAG_NAME, "body").text

    # status, as the terminal shows it (rendered to HTML by rich, as it prints)
    out = CliRunner().invoke(app, ["status", "--storage", url])
    assert out.exit_code == 0 and name in out.output and "hidden width" in out.output
    console = Console(record=True, width=110)
    console.print(out.output)
    (tmp_path / "status.html").write_text(console.export_html())
    browser.get((tmp_path / "status.html").as_uri())
    page_shows(name, "hidden width")
    _shots(browser, tmp_path, "status")

    # the report: the study, its answer and the size axis in the user's words
    report = tmp_path / "report"
    done = CliRunner().invoke(app, ["report", "--storage", url, "-o", str(report)])
    assert done.exit_code == 0, done.output
    browser.get((report / "index.html").as_uri())
    lo, hi = found["interval_params"]
    text = page_shows("synthetic_objectives:bimodal by hidden width", "do not apply")
    assert f"{lo:,.0f} - {hi:,.0f}" in text
    _shots(browser, tmp_path, "report")

    # the dashboard: the study, and its note with the answer and the objective's settings
    with open(tmp_path / "stderr", "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "threshold", "dashboard", "--storage", url, "--port", "0"],
            stdout=subprocess.PIPE, stderr=err, text=True, cwd=tmp_path,
        )  # fmt: skip
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            assert sel.select(120), "the dashboard printed nothing"
        base = re.search(r"http://127\.0\.0\.1:\d+/", proc.stdout.readline()).group(0)
        browser.get(base)
        page_shows(name)
        innermost = f"//*[contains(., '{name}') and not(.//*[contains(., '{name}')])]"
        browser.find_element(By.XPATH, innermost).click()
        wait.until(lambda d: re.search(r"/dashboard/studies/\d+$", d.current_url))
        study_page = browser.current_url
        page_shows("accuracy of synthetic_objectives:bimodal")  # the value's name
        _shots(browser, tmp_path, "dashboard")
        browser.get(study_page + "/note")
        page_shows("80% point", "Objective", "do not apply")
        _shots(browser, tmp_path, "dashboard-note")
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(autouse=True)
def importable(monkeypatch):
    path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(HERE), path) if p))
