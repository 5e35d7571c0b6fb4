"""The report page in headless Chromium: every figure loads, the table and the plotly figure are
there, and nothing is fetched from the network.

Uses the session's report (``built_report`` in conftest.py: three tiny studies, a baseline, an
analysed trial and a transfer file) and the ``browser`` fixture (Debian's chromium under Selenium;
skipped when missing, a failure in CI). Screenshots go to the test's tmp dir and are copied to
/tmp/threshold-report-shots/.
"""

from __future__ import annotations

import shutil
from pathlib import Path

SHOTS = Path("/tmp/threshold-report-shots")
WAIT_S = 90


def test_report_page_in_a_browser(built_report, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    out, results, _ = built_report
    browser.get((out / "index.html").as_uri())
    wait = WebDriverWait(browser, WAIT_S)
    wait.until(lambda d: d.execute_script("return document.readyState") == "complete")

    # Every image has loaded (a broken src leaves naturalWidth at 0).
    images = browser.execute_script(
        "return Array.from(document.images, i => [i.getAttribute('src'), i.complete,"
        " i.naturalWidth]);"
    )
    expected = {results["figures"]["comparison"], results["transfer"][0]["figure"]}
    expected |= {s["figure"] for s in results["studies"] if s["figure"]}
    expected |= {f for s in results["studies"] for a in s["analyses"]
                 for f in a["report_figures"].values()}  # fmt: skip
    assert {src for src, _, _ in images} == expected
    broken = [src for src, done, width in images if not (done and width > 0)]
    assert not broken, broken

    # The transitions table: a row per study, the baseline marked, the too-few study said so.
    table = browser.find_element(By.ID, "transitions")
    rows = table.find_elements(By.CSS_SELECTOR, "tbody tr")
    assert len(rows) == len(results["studies"])
    text = table.text
    assert "baseline" in text and "too few runs to fit" in text
    first = results["comparison"][0]
    assert f"{first['params_p80']:,.0f}" in rows[0].text

    # The plotly figure rendered: its SVG is drawn, with the fitted studies' traces.
    plot = wait.until(
        lambda d: d.find_element(By.CSS_SELECTOR, "#comparison-plot .main-svg")
    ).find_element(By.XPATH, "./ancestor::div[@id='comparison-plot']")
    n_traces = browser.execute_script("return arguments[0].data.length;", plot)
    fitted = sum(s["status"] == "ok" for s in results["studies"])
    assert n_traces == 4 * fitted  # band, median, 80% point, runs
    assert "learning transitions" in plot.text

    # Self-contained: every script, image and link points at a local file (plotly's bundle is
    # copied beside the page, not fetched from a CDN).
    urls = browser.execute_script(
        "return Array.from(document.querySelectorAll('[src], [href]'), e => e.src || e.href);"
    )
    assert any(u.endswith("/plotly.min.js") for u in urls)
    assert all(u.startswith("file://") for u in urls), urls

    # Screenshots: the top of the page, the interactive figure, and the whole page.
    SHOTS.mkdir(parents=True, exist_ok=True)
    shots = []
    top = tmp_path / "report-top.png"
    assert browser.save_screenshot(str(top))
    shots.append(top)
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", plot)
    figure = tmp_path / "report-plotly.png"
    assert browser.save_screenshot(str(figure))
    shots.append(figure)
    height = browser.execute_script("return document.documentElement.scrollHeight;")
    browser.set_window_size(1400, min(int(height) + 100, 16000))
    whole = tmp_path / "report-page.png"
    assert browser.save_screenshot(str(whole))
    shots.append(whole)
    for path in shots:
        shutil.copy(path, SHOTS / path.name)
        print(f"screenshot: {path} (copy: {SHOTS / path.name})")
