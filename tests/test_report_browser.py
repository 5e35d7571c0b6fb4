"""The report page in headless Chromium at 1280 x 900: it fits the width, the transitions table's
rows are one or two lines, every figure loads, the plotly figure is drawn, nothing is fetched from
the network or from outside the report's folder; and a full-page screenshot to look at.

Legibility, as shown at 1280 px: no figure is shrunk much below its drawn size, each panel of the
report's own figures is wide enough to read and its smallest text stays readable (from the
panels' boxes and font size each PNG records, ``threshold.report.figures.layout``), and the
plotly figure's legend leaves the plot most of the width.

Two pages: the session's report (``built_report`` in conftest.py: three tiny studies, a baseline,
an analysed trial and a transfer file) and the committed showcase ``reports/cpu/all/`` (14 studies,
four baselines). The ``browser`` fixture is Debian's chromium under Selenium (skipped when missing,
a failure in CI). Screenshots go to the test's tmp dir and are copied to
/tmp/threshold-report-shots/.
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest

SHOTS = Path("/tmp/threshold-report-shots")
WAIT_S = 90
WIDTH, HEIGHT = 1280, 900  # a laptop's browser window
MAX_ROW_PX = 60  # two lines of the table's 13 px text, with padding
MIN_SCALE = 0.85  # a figure is shown at least this share of its drawn width
MIN_PANEL_PX = 250  # each panel of a report figure, as shown
MIN_TEXT_PX = 10  # the smallest text of a report figure, as shown
MIN_PLOT_SHARE = 0.8  # of the plotly figure's width, left to the plot beside its legend
SHOWCASE = Path(__file__).resolve().parents[1] / "reports" / "cpu" / "all"


def look(browser, page: Path, shot: Path) -> dict:
    """Open ``page`` at WIDTH x HEIGHT, check what a reader needs, write a full-page screenshot;
    returns the measurements."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.set_window_size(WIDTH, HEIGHT)
    browser.get(page.as_uri())
    wait = WebDriverWait(browser, WAIT_S)
    wait.until(lambda d: d.execute_script("return document.readyState") == "complete")
    inner, scroll = browser.execute_script(
        "return [window.innerWidth, document.documentElement.scrollWidth];"
    )
    assert inner == WIDTH
    assert scroll <= inner, f"the page scrolls sideways: {scroll} px wide in a {inner} px window"
    heights = browser.execute_script(
        "return Array.from(document.querySelectorAll('table.transitions tbody tr'),"
        " r => r.getBoundingClientRect().height);"
    )
    assert heights and max(heights) < MAX_ROW_PX, heights
    widths = browser.execute_script(
        "return Array.from(document.querySelectorAll('table'),"
        " t => t.getBoundingClientRect().right);"
    )
    assert max(widths) <= inner  # no table runs past the window, cut off

    # Every image has loaded (a broken src leaves naturalWidth at 0).
    images = browser.execute_script(
        "return Array.from(document.images, i => [i.getAttribute('src'), i.complete,"
        " i.naturalWidth]);"
    )
    broken = [src for src, done, width in images if not (done and width > 0)]
    assert not broken, broken
    figures = legibility(browser, page)

    # The plotly figure is drawn: its SVG, one legend entry a fitted study.
    plot = wait.until(
        lambda d: d.find_element(By.CSS_SELECTOR, "#comparison-plot .main-svg")
    ).find_element(By.XPATH, "./ancestor::div[@id='comparison-plot']")
    traces = browser.execute_script(
        "return arguments[0].data.map(t => [t.name, t.showlegend !== false]);", plot
    )
    legend = browser.execute_script(
        "return arguments[0].querySelectorAll('.legend .traces').length;", plot
    )

    # Self-contained: every script, image and link points at a local file (plotly's bundle is
    # beside the page, not fetched from a CDN).
    urls = browser.execute_script(
        "return Array.from(document.querySelectorAll('[src], [href]'), e => e.src || e.href);"
    )
    assert any(u.endswith("/plotly.min.js") for u in urls)
    assert all(u.startswith("file://") for u in urls), urls
    folder = page.parent.resolve().as_uri() + "/"
    outside = [u for u in urls if not u.split("#")[0].startswith(folder)]
    assert not outside, f"the page uses files outside its folder: {outside}"

    # The legend does not squeeze the plot.
    plot_width, area_width, legend_px = browser.execute_script(
        "const p = arguments[0], a = p.querySelector('.draglayer .xy .nsewdrag'),"
        " t = p.querySelector('.legend .traces text');"
        "return [p.getBoundingClientRect().width, a.getBoundingClientRect().width,"
        " t ? parseFloat(getComputedStyle(t).fontSize) : null];",
        plot,
    )
    assert area_width >= MIN_PLOT_SHARE * plot_width, (area_width, plot_width)
    assert legend_px is None or legend_px >= MIN_TEXT_PX, legend_px

    # A warning is shown in the warning colour, not as a success.
    colours = browser.execute_script(
        "return Array.from(document.querySelectorAll('.warn'), e => getComputedStyle(e)"
        ".backgroundColor);"
    )
    assert all(c == "rgb(255, 244, 229)" for c in colours), colours

    # The whole page, as a reader scrolls it.
    height = browser.execute_script("return document.documentElement.scrollHeight;")
    png = browser.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": WIDTH, "height": height, "scale": 1},
        },
    )
    shot.write_bytes(base64.b64decode(png["data"]))
    SHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, SHOTS / shot.name)
    measured = {
        "page": str(page),
        "inner_width": inner,
        "scroll_width": scroll,
        "rows": len(heights),
        "max_row_px": max(heights),
        "images": len(images),
        "traces": len(traces),
        "legend_entries": legend,
        "warnings": len(colours),
        "height": height,
        "screenshot": str(SHOTS / shot.name),
        "plot_area_share": round(area_width / plot_width, 3),
        "smallest_figure_scale": min(f["scale"] for f in figures),
        "narrowest_panel_px": min((p for f in figures for p in f["panels_px"]), default=None),
        "smallest_text_px": min((f["text_px"] for f in figures if f["text_px"]), default=None),
    }
    print(json.dumps(measured))
    return measured | {"traces_list": traces, "plot_text": plot.text, "images_list": images}


def legibility(browser, page: Path) -> list[dict]:
    """Each figure as shown: its scale (shown / drawn width) and, for a report figure, its panels'
    widths and smallest text in CSS pixels; asserts each is readable."""
    from PIL import Image

    from threshold.report.figures import LAYOUT_KEY

    shown = browser.execute_script(
        "return Array.from(document.images, i => [i.getAttribute('src'),"
        " i.getBoundingClientRect().width, i.naturalWidth]);"
    )
    out = []
    for src, width, natural in shown:
        scale = width / natural
        assert scale >= MIN_SCALE, f"{src} is shown at {width:.0f} of its {natural} px"
        with Image.open(page.parent / src) as png:
            drawn = json.loads(png.text.get(LAYOUT_KEY, "null") or "null")
        panels = [round(w * scale) for _, _, w, _ in drawn["axes"]] if drawn else []
        text = round(drawn["min_font_px"] * scale, 1) if drawn and drawn["min_font_px"] else None
        assert all(p >= MIN_PANEL_PX for p in panels), f"{src}: panels {panels} px wide"
        assert text is None or text >= MIN_TEXT_PX, f"{src}: text {text} px high"
        out.append({"src": src, "scale": round(scale, 3), "panels_px": panels, "text_px": text})
    return out


def test_report_page_in_a_browser(built_report, browser, tmp_path):
    from selenium.webdriver.common.by import By

    out, results, _ = built_report
    seen = look(browser, out / "index.html", tmp_path / "report-page.png")

    expected = {results["figures"]["comparison"], results["transfer"][0]["figure"]}
    expected |= {s["data"]["figure"] for s in results["studies"] if s["data"]["figure"]}
    expected |= {
        f for s in results["studies"] for a in s["data"]["analyses"]
        for f in a["report_figures"].values()
    }  # fmt: skip
    assert {src for src, _, _ in seen["images_list"]} == expected

    # The transitions table: a row per study, the baseline marked, the too-few study said so.
    rows = browser.find_elements(By.CSS_SELECTOR, "table.transitions tbody tr")
    assert len(rows) == len(results["studies"]) == seen["rows"]
    text = " ".join(r.text for r in rows)
    assert "baseline" in text and "too few runs" in text
    first = results["comparison"][0]
    if (first.get("transition") or {}).get("kind", "point") == "point":
        assert f"{first['params_p80']:,.0f}" in rows[0].text
    else:  # the tiny study's runs do not locate it: said as a bound, not the prior's median
        assert "not located" in rows[0].text and f"{first['params_p80']:,.0f}" not in rows[0].text

    # One legend entry a fitted study; its band, point and runs go with it.
    fitted = sum(s["row"]["status"] == "ok" for s in results["studies"])
    assert seen["traces"] == 4 * fitted
    assert sum(shown for _, shown in seen["traces_list"]) == fitted == seen["legend_entries"]
    assert "curves and runs" in seen["plot_text"]
    assert seen["warnings"] >= 1  # the study with too few runs


def test_the_showcase_reads_at_a_glance(browser, tmp_path):
    """The committed reports/cpu/all/: 14 studies under four baselines."""
    page = SHOWCASE / "index.html"
    if not page.is_file():
        pytest.skip(f"{page} is not in this checkout")
    results = json.loads((SHOWCASE / "results.json").read_text())
    seen = look(browser, page, tmp_path / "showcase-page.png")
    assert seen["rows"] == len(results["studies"])
    fitted = sum(s["row"]["status"] == "ok" for s in results["studies"])
    assert seen["legend_entries"] == fitted  # 14 entries, not 28
