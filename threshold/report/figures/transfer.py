"""A transfer file's figure: accuracy on the target against training step, pretrained and from
scratch (``threshold transfer --json``'s curves)."""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from threshold.report.figures.common import COLORS, save_png

__all__ = ["transfer_figure"]


def transfer_figure(t: dict, path: Path) -> Path:
    """Validation accuracy against training step on the target, pretrained (solid) and from
    scratch (dashed), one colour per seed."""
    fig = Figure(figsize=(8.2, 4.2), layout="constrained")
    ax = fig.subplots()
    for i, c in enumerate(t["curves"]):
        color = COLORS[i % len(COLORS)]
        for key, style, words in (("transfer", "-", "pretrained"), ("scratch", "--", "scratch")):
            if c[key]:
                steps, acc = zip(*c[key], strict=True)
                ax.plot(steps, acc, style, color=color, label=f"seed {c['seed']}, {words}")
    ax.set_ylim(0, 1.02)
    ax.grid(True, alpha=0.3)
    ax.set_xlabel("training step on the target")
    ax.set_ylabel(f"{t['measure'].upper()} validation accuracy (teacher-forced)")
    source = "+".join(t["pretrain"]).upper()
    ax.set_title(
        f"{'+'.join(t['tasks']).upper()} at d = {t['d_model']}: pretrained on "
        f"{source} (solid) vs from scratch (dashed)",
        fontsize=10,
    )
    ax.legend(fontsize=7.5, ncol=2, loc="lower right")
    return save_png(fig, path)
