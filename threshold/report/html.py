"""The report page: one self-contained ``index.html`` beside its PNGs and plotly's JavaScript.

Built from the report's results (the dict written as ``results.json``) with plain string
formatting; every value is escaped. The interactive figure's script is plotly's own bundle,
copied from the installed package beside the page, so nothing is fetched from the network.
"""

from __future__ import annotations

from html import escape

from threshold.report.text import (
    GRID_WORDS,
    SIZE_RATIO_WORDS,
    comparison_rows,
    cyclic_words,
    duration,
    efficiency_rows,
    factor,
    interval,
    number,
    settings_rows,
)
from threshold.search.notes import near_transition_words

__all__ = ["PLOTLY_JS", "render_html"]

PLOTLY_JS = "plotly.min.js"

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto;
       max-width: 1180px; padding: 0 24px 60px; color: #222; line-height: 1.45; }
h1 { margin-top: 28px; } h2 { margin-top: 40px; border-bottom: 1px solid #ddd; }
h3 { margin-top: 26px; }
table { border-collapse: collapse; margin: 10px 0 18px; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 4px 8px; vertical-align: top; }
th { background: #f3f4f6; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
img { max-width: 100%; height: auto; display: block; margin: 8px 0; }
.meta { color: #555; font-size: 14px; } .note { color: #8a4b00; }
.status-ok { color: #11652f; } .status-few { color: #8a4b00; font-weight: 600; }
code { background: #f3f4f6; padding: 1px 4px; border-radius: 3px; }
nav a { margin-right: 14px; } .figs { display: flex; flex-wrap: wrap; gap: 12px; }
.figs img { max-width: 560px; }
"""


def _table(header: list[str], rows: list[list[str]], table_id: str = "", numeric=()) -> str:
    attr = f' id="{escape(table_id)}"' if table_id else ""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = "".join(
            f"<td{' class=num' if i in numeric else ''}>{escape(str(c))}</td>"
            for i, c in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    return f"<table{attr}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _img(src: str, alt: str) -> str:
    return f'<img src="{escape(src)}" alt="{escape(alt)}">'


def _anchor(name: str) -> str:
    return "study-" + "".join(c if c.isalnum() else "-" for c in name)


def _study_section(s: dict, results: dict) -> str:
    parts = [f'<h3 id="{_anchor(s["name"])}">{escape(s["label"])}</h3>']
    parts.append(f'<p class="meta">study <code>{escape(s["name"])}</code>; '
                 f'{s["n_runs"]} completed runs, {s["n_running"]} running, {s["n_failed"]} '
                 f'failed; search: {escape(s["search_status"])}</p>')  # fmt: skip
    est = s["estimate"]
    if s["status"] != "ok":
        parts.append(f'<p class="status-few">{escape(s["status_text"])}.</p>')
    else:
        point = f"{s['settings']['search']['level']:.0%} point"
        items = [
            f"<b>{point}</b>: {number(est['params_p80'])} parameters "
            f"(90% credible interval {interval(est['interval_params'])}, "
            f"{est['interval_ratio']:.2f}x wide); d = {est['d_p80']:.1f} "
            f"(90%: {interval(est['interval_d'], 1)})",
            f"<b>midpoint</b>: {number(est['midpoint_params'])} parameters "
            f"(90%: {interval(est.get('midpoint_interval_params'))}); "
            f"d = {number(est.get('midpoint_d'), 1)}",
            f"<b>asymptote</b> {est['asymptote']:.3f}, chance {est['chance']:.3f}",
        ]
        fit = est.get("fit")
        items.append(
            f"<b>least-squares logistic</b>: {point} at {number(fit['params_p80'])} parameters "
            f"(d = {fit['d_p80']:.1f})"
            if fit
            else "<b>least-squares logistic</b>: none (too few runs or sizes, or no fit)"
        )
        near = near_transition_words(est)
        if near:
            items.append(
                f"<b>near the transition</b> (within 1.5x in d): {near}; about "
                f"{est['seed_spread']['runs_for_precision']:.0f} runs for the study's precision"
            )
        if s["reduction"] is None and s["reduction_note"]:
            items.append(f"<b>reduction vs baseline</b>: {escape(s['reduction_note'])}")
        for key, words in (("reduction", "reduction vs baseline"), ("size_ratio", "size ratio")):
            if s[key] is not None:
                value, span, p = factor(s[key])
                items.append(f"<b>{words}</b>: {value} (90% interval {span}; P(smaller than the "
                             f"baseline) = {p})")  # fmt: skip
        items.append(f'<span class="status-ok">{escape(s["status_text"])}</span>'
                     + (" (estimate recomputed: the stored one predates the last run)"
                        if s["estimate_source"] == "recomputed" else ""))  # fmt: skip
        parts.append("<ul>" + "".join(f"<li>{i}</li>" for i in items) + "</ul>")
    if s.get("figure"):
        parts.append(_img(s["figure"], f"accuracy against size, {s['label']}"))
    parts.append(_table(["setting", "value"], [list(r) for r in settings_rows(s)]))
    if s["runs"]:
        ops = s["settings"]["task"]["ops"]
        measure = s["settings"]["measured_op"]
        header = ["trial", "d", "params", "seed", f"{measure} (measured)", "strict"]
        header += [op for op in ops if op != measure]
        header += ["steps", "stop", "train time"]
        rows = []
        for r in s["runs"]:
            rows.append(
                [str(r["trial"]), str(r["d"]), number(r["params"]), str(r["seed"]),
                 f"{r['accuracy']:.3f}", "-" if r["strict"] is None else f"{r['strict']:.3f}"]
                + [f"{r['accuracy_ops'].get(op, float('nan')):.3f}" for op in ops
                   if op != measure]
                + [number(r["steps"]), r["stop_reason"] or "-", duration(r["train_s"])]
            )  # fmt: skip
        parts.append(f"<details><summary>{len(rows)} runs</summary>"
                     + _table(header, rows, numeric=set(range(len(header))) - {len(header) - 2})
                     + "</details>")  # fmt: skip
    return "\n".join(parts)


def _analyses_section(results: dict) -> str:
    parts = []
    for s in results["studies"]:
        for a in s["analyses"]:
            summ = a["summary"]
            parts.append(f"<h3>{escape(s['label'])}: trial {a['trial']} "
                         f"(d = {a['d_model']}, {number(a['params'])} parameters, "
                         f"accuracy {number(a['accuracy'], 3)})</h3>")  # fmt: skip
            sep = summ.get("separation") or {}
            rows = [[f"separation by {k} (score / null 95th percentile)", f"{v:.2f}"]
                    for k, v in sep.items()]  # fmt: skip
            if summ.get("ordering") is not None:
                rows.append(["ordering: |Spearman rho|, PC1 and value", f"{summ['ordering']:.2f}"])
            if summ.get("cyclic") is not None:
                rows.append(
                    [
                        "cyclic order: variance share on one Fourier frequency k of the "
                        "value (share / null 95th percentile)",
                        cyclic_words(summ),
                    ]
                )
            if summ.get("attn_share") is not None:
                rows.append(["attention share of the updates", f"{summ['attn_share']:.2f}"])
            abl = summ.get("ablation") or {}
            if abl:
                rows.append(["accuracy intact / attention zeroed / MLP zeroed",
                             f"{abl.get('intact', 0):.2f} / {abl.get('attn', 0):.2f} / "
                             f"{abl.get('mlp', 0):.2f}"])  # fmt: skip
            parts.append(_table(["score", "value"], rows, numeric={1}))
            figs = a.get("report_figures") or {}
            if figs:
                parts.append('<div class="figs">' + "".join(
                    _img(src, f"{kind} of trial {a['trial']}") for kind, src in figs.items()
                ) + "</div>")  # fmt: skip
            elif a.get("folder") is None:
                parts.append('<p class="note">No figures: the analysis folder '
                             f"{escape(results['analysis_dir'])}/{escape(s['name'])}-trial"
                             f"{a['trial']} is not there.</p>")  # fmt: skip
    if not parts:
        return ("<p>No analysed trials. <code>threshold analyze STUDY</code> scores a trial's "
                "embeddings and layer usage, and the report picks them up.</p>")  # fmt: skip
    return "\n".join(parts)


def _transfer_section(results: dict) -> str:
    if not results["transfer"]:
        return ("<p>No transfer results given (<code>--transfer FILE.json</code>, the output "
                "of <code>threshold transfer --json</code>).</p>")  # fmt: skip
    parts = []
    for t in results["transfer"]:
        source = "+".join(t["pretrain"]).upper()
        target = "+".join(t["tasks"]).upper()
        parts.append(f"<h3>{escape(target)} after {escape(source)}, d = {t['d_model']} "
                     f"({number(t['params_total'])} parameters)</h3>")  # fmt: skip
        parts.append(f'<p class="meta">file <code>{escape(t["file"])}</code></p>')
        parts.append(_img(t["figure"], f"transfer curves, {target} after {source}"))
        rows = [
            [str(seed), f"{a:.3f}", f"{b:.3f}", f"{a - b:+.3f}"]
            for seed, a, b in zip(t["seeds"], t["transfer"], t["scratch"], strict=True)
        ]
        rows.append(["mean", f"{t['transfer_mean']:.3f}", f"{t['scratch_mean']:.3f}",
                     f"{t['gain_mean']:+.3f}"])  # fmt: skip
        measure = t["measure"].upper()
        parts.append(_table(["seed", f"{measure} pretrained", f"{measure} from scratch", "gain"],
                            rows, numeric={1, 2, 3}))  # fmt: skip
    parts.append("<p>Final accuracies are greedy test accuracy of the target's measured op; "
                 "the curves are the teacher-forced validation accuracy checked during "
                 "training.</p>")  # fmt: skip
    return "\n".join(parts)


def render_html(results: dict, plotly_div: str | None, plotly_src: str | None = None) -> str:
    """The page. ``plotly_div``: the interactive figure's HTML (plotly's ``to_html`` without
    its script), or None when no study has a fit; ``plotly_src``: where the script is, relative
    to the page (default: beside it)."""
    header, rows = comparison_rows(results)
    baseline = results["baseline"]
    base_words = (
        f"baseline <code>{escape(baseline)}</code>: reduction factor = baseline 80% point / "
        "study's, its 90% interval from the two posteriors of the 80% point (independent "
        "studies: the posterior of the log-ratio is the convolution of the two). "
        + escape(SIZE_RATIO_WORDS)
        if baseline
        else "no baseline study (<code>--baseline STUDY</code> adds reduction factors)."
    )
    n = len(results["studies"])
    few = [s for s in results["studies"] if s["status"] != "ok"]
    eff_header, eff_rows = efficiency_rows(results)
    figs = results["figures"]
    sections = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<title>threshold report: learning transitions</title>",
        f"<style>{_CSS}</style>",
        f'<script src="{escape(plotly_src or PLOTLY_JS)}"></script>' if plotly_div else "",
        "</head><body>",
        "<h1>Learning transitions</h1>",
        f'<p class="meta">threshold report, {escape(results["created"])}; storage '
        f"<code>{escape(results['storage'])}</code>; {n} stud{'y' if n == 1 else 'ies'}; "
        f"threshold {escape(results['version'])} (commit {escape(results['git_commit'][:10])})"
        "</p>",
        '<nav><a href="#transitions-section">transitions</a><a href="#studies">studies</a>'
        '<a href="#analyses">embeddings and layers</a><a href="#transfer">transfer</a>'
        '<a href="#efficiency">search efficiency</a><a href="#methods">methods</a></nav>',
        '<h2 id="transitions-section">Transitions</h2>',
        "<p>The transition is where the fitted accuracy curve of the measured op reaches 80% of "
        "its asymptote. Numbers are the grid posterior's median and 90% credible interval, as "
        f"each study's search stored them; {base_words}</p>",
        _table(header, rows, "transitions", numeric=set(range(1, len(header) - 1))),
    ]
    if few:
        lines = "; ".join(f"{escape(s['label'])}: {escape(s['status_text'])}" for s in few)
        sections.append(f'<p class="status-few">{lines}.</p>')
    if plotly_div:
        sections.append(
            "<p>Interactive: hover for values, click a legend entry to hide a study or to show "
            "its runs.</p>"
        )
        sections.append(plotly_div)
    if figs.get("comparison"):
        sections.append(_img(figs["comparison"], "80% points and reduction factors"))
    sections.append('<h2 id="studies">Studies</h2>')
    sections.append(
        "<p>Each run is one point: the greedy test accuracy of the measured op against the "
        "model's total parameters. The blue band is the posterior's 90% credible band of the "
        "mean curve, the line its median; the dashed red line is the least-squares logistic; "
        "the diamond is the 80% point and the circle the midpoint, each with its 90% interval. "
        "The other ops of a mixture are the grey open markers.</p>"
    )
    sections.extend(_study_section(s, results) for s in results["studies"])
    sections.append('<h2 id="analyses">Embeddings and layer usage</h2>')
    sections.append(_analyses_section(results))
    sections.append('<h2 id="transfer">Transfer</h2>')
    sections.append(_transfer_section(results))
    sections.append('<h2 id="efficiency">Search efficiency</h2>')
    sections.append(
        "<p>What each search used (completed runs; training seconds and steps as recorded on "
        "the trials) against a dense grid. "
        + escape(GRID_WORDS.format(sizes=results["grid"]["sizes"], seeds=results["grid"]["seeds"]))
        + (" Pretraining time is not included for studies with pretraining." if any(
            s["efficiency"]["pretraining_excluded"] for s in results["studies"]) else "")
        + "</p>"
    )  # fmt: skip
    sections.append(_table(eff_header, eff_rows, "efficiency", numeric={1, 2, 3, 5, 6}))
    sections.append('<h2 id="methods">Methods</h2>')
    sections.append(
        "<ul><li>Posterior: a grid over the curve (midpoint, slope, asymptote) with a seed model "
        "that lets each run learn or not (<code>threshold.search.posterior</code>), rebuilt here "
        "from the completed runs; its median and 90% interval of the 80% point are the "
        "headline numbers.</li>"
        "<li>Band: at each size, the 5% and 95% posterior quantiles of the mean accuracy "
        "chance + (asymptote - chance) p(size).</li>"
        "<li>Reduction factor: baseline 80% point / study 80% point (the ratio of the two "
        "medians); its interval and P(smaller) come from the distribution of ln x80(baseline) "
        "- ln x80(study), the convolution of the two posteriors on a 0.01-nat lattice.</li>"
        "<li>A study with fewer than 3 completed runs (the initial bracket) has no estimate and "
        "is listed as such.</li></ul>"
    )
    sections.append("</body></html>")
    return "\n".join(part for part in sections if part)
