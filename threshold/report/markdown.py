"""``summary.md``: the report's tables and static figures in Markdown (for a repository or a PR)."""

from __future__ import annotations

from threshold.report.text import (
    GRID_WORDS,
    SIZE_RATIO_WORDS,
    comparison_rows,
    cyclic_words,
    efficiency_rows,
    interval,
    number,
)

__all__ = ["markdown_table", "render_markdown"]


def _cell(value: str) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table's lines, each cell escaped."""
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |"]
    lines.append("|" + "|".join("---" for _ in header) + "|")
    lines.extend("| " + " | ".join(_cell(c) for c in row) + " |" for row in rows)
    return lines


def render_markdown(results: dict) -> str:
    lines = ["# Learning transitions", ""]
    lines.append(
        f"threshold report, {results['created']}; storage `{results['storage']}`; "
        f"threshold {results['version']} (commit {results['git_commit'][:10]}). "
        "The interactive version is `index.html`; every number is in `results.json`."
    )
    lines.append("")
    baseline = results["baseline"]
    lines.append(
        "80% point: where the fitted curve of the measured op reaches 80% of its asymptote; "
        "posterior median and 90% credible interval. "
        + (
            f"Reduction factor = baseline (`{baseline}`) 80% point / study's, its 90% interval "
            "from the two posteriors (convolution of the log-x80 posteriors). " + SIZE_RATIO_WORDS
            if baseline
            else "No baseline: no reduction factors."
        )
    )
    lines.append("")
    header, rows = comparison_rows(results)
    lines.extend(markdown_table(header, rows))
    lines.append("")
    figs = results["figures"]
    for key, alt in (("curves", "posterior curves"), ("comparison", "80% points and factors")):
        if figs.get(key):
            lines.extend([f"![{alt}]({figs[key]})", ""])
    lines.extend(["## Studies", ""])
    for s in results["studies"]:
        lines.append(f"### {s['label']}")
        lines.append("")
        lines.append(
            f"`{s['name']}`: {s['n_runs']} completed runs, {s['n_running']} running; "
            f"search: {s['search_status']}."
        )
        est = s["estimate"]
        if s["status"] != "ok":
            lines.append(f"**{s['status_text']}.**")
        else:
            lines.append(
                f"80% point {number(est['params_p80'])} parameters (90%: "
                f"{interval(est['interval_params'])}), d = {est['d_p80']:.1f} (90%: "
                f"{interval(est['interval_d'], 1)}); midpoint {number(est['midpoint_params'])} "
                f"(90%: {interval(est.get('midpoint_interval_params'))}); asymptote "
                f"{est['asymptote']:.3f}, chance {est['chance']:.3f}; {s['status_text']}."
            )
        st = s["settings"]
        task = st["task"]
        lines.append(
            f"Settings: {'+'.join(task['ops']).upper()} measured on "
            f"{st['measured_op'].upper()}, {task['testbed']} {task['n']}, depth {task['depth']}, "
            f"arity {task['arity_min']}-{task['arity_max']}, p_nest {task['p_nest']:g}; "
            f"pretraining {'+'.join(st['pretrain']).upper() or 'none'}; at most "
            f"{st['train']['max_steps']:,} steps a run; precision {st['search']['precision']:g}x, "
            f"budget {st['search']['budget']}."
        )
        lines.append("")
        if s.get("figure"):
            lines.extend([f"![{s['label']}]({s['figure']})", ""])
    analysed = [(s, a) for s in results["studies"] for a in s["analyses"]]
    lines.extend(["## Embeddings and layer usage", ""])
    if analysed:
        names = sorted({k for _, a in analysed for k in (a["summary"].get("separation") or {})})
        header = ["study", "trial", "d", "accuracy", *[f"sep. {n}" for n in names],
                  "ordering", "cyclic (k)", "attention share"]  # fmt: skip
        rows = []
        for s, a in analysed:
            summ = a["summary"]
            sep = summ.get("separation") or {}
            rows.append(
                [s["label"], str(a["trial"]), str(a["d_model"]), number(a["accuracy"], 3)]
                + [number(sep.get(n), 2) for n in names]
                + [
                    number(summ.get("ordering"), 2),
                    cyclic_words(summ),
                    number(summ.get("attn_share"), 2),
                ]
            )
        lines.extend(markdown_table(header, rows))
        lines.append("")
        lines.append("Separation: score over its permutation null's 95th percentile (> 1: beyond "
                     "chance). Cyclic: share of the digit embeddings' variance on one Fourier "
                     "frequency k of the value (1: the digits on a circle in order, stepping by "
                     "k), with its ratio to the null's 95th percentile. Figures are in "
                     "`index.html`.")  # fmt: skip
    else:
        lines.append("No analysed trials.")
    lines.append("")
    lines.extend(["## Transfer", ""])
    if results["transfer"]:
        for t in results["transfer"]:
            lines.append(
                f"### {'+'.join(t['tasks']).upper()} after {'+'.join(t['pretrain']).upper()}, "
                f"d = {t['d_model']}"
            )
            lines.append("")
            rows = [
                [str(seed), f"{a:.3f}", f"{b:.3f}", f"{a - b:+.3f}"]
                for seed, a, b in zip(t["seeds"], t["transfer"], t["scratch"], strict=True)
            ]
            rows.append(["mean", f"{t['transfer_mean']:.3f}", f"{t['scratch_mean']:.3f}",
                         f"{t['gain_mean']:+.3f}"])  # fmt: skip
            lines.extend(markdown_table(["seed", "pretrained", "from scratch", "gain"], rows))
            lines.extend(["", f"![transfer curves]({t['figure']})", ""])
    else:
        lines.extend(["No transfer results given.", ""])
    lines.extend(["## Search efficiency", ""])
    lines.append(GRID_WORDS.format(**results["grid"]))
    lines.append("")
    header, rows = efficiency_rows(results)
    lines.extend(markdown_table(header, rows))
    lines.append("")
    return "\n".join(lines)
