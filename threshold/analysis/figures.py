"""Figures of one analysed model (matplotlib, PNG): embeddings, layer usage, ablation.

Every function takes the arrays or the scores dict it draws and a path, writes one PNG and
returns the path. Figures are built with matplotlib's object API (``Figure``), not pyplot: no
global state, no display, safe in worker processes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from threshold.analysis.embedding import cosine_similarity, pca

__all__ = ["ablation_figure", "embedding_figure", "layer_usage_figure"]


def _save(fig, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def embedding_figure(emb: np.ndarray, labels: list[str], title: str, path: Path) -> Path:
    """Cosine-similarity matrix and the first two PCs of the value embeddings, side by side."""
    fig = Figure(figsize=(10.5, 4.4), layout="constrained")
    left, right = fig.subplots(1, 2)
    image = left.imshow(cosine_similarity(emb), cmap="RdBu_r", vmin=-1, vmax=1)
    ticks = np.arange(len(labels))
    step = max(1, len(labels) // 12)
    left.set_xticks(ticks[::step], [labels[i] for i in ticks[::step]])
    left.set_yticks(ticks[::step], [labels[i] for i in ticks[::step]])
    left.set_title("cosine similarity")
    fig.colorbar(image, ax=left, fraction=0.046)
    fitted = pca(emb, 2)
    xy = fitted.coords
    y = xy[:, 1] if xy.shape[1] > 1 else np.zeros(len(xy))
    points = right.scatter(xy[:, 0], y, c=np.arange(len(xy)), cmap="viridis")
    for i, name in enumerate(labels):
        right.annotate(name, (xy[i, 0], y[i]), textcoords="offset points", xytext=(4, 4))
    ratio = fitted.explained_variance_ratio
    right.set_xlabel(f"PC1 ({ratio[0]:.0%})")
    right.set_ylabel(f"PC2 ({ratio[1]:.0%})" if len(ratio) > 1 else "PC2")
    right.set_title("PCA (colour: token order)")
    fig.colorbar(points, ax=right, fraction=0.046)
    fig.suptitle(title)
    return _save(fig, path)


def layer_usage_figure(usage: dict, title: str, path: Path) -> Path:
    """Mean norm of the attention and MLP updates per recurrence step."""
    steps = np.arange(len(usage["attn"]))
    fig = Figure(figsize=(5.5, 3.6), layout="constrained")
    ax = fig.subplots()
    ax.bar(steps - 0.2, usage["attn"], width=0.4, label="attention update")
    ax.bar(steps + 0.2, usage["mlp"], width=0.4, label="MLP update")
    ax.plot(steps, usage["residual"], "k.--", label="residual stream")
    ax.set_xticks(steps, [f"step {s}" for s in steps])
    ax.set_ylabel("mean L2 norm")
    ax.set_title(f"{title}\nattention share {usage['attn_share_all']:.2f}")
    ax.legend(fontsize=8)
    return _save(fig, path)


def ablation_figure(scores: dict, title: str, path: Path) -> Path:
    """Greedy accuracy with each sublayer zeroed at one step or at all steps."""
    keys = [k for k in scores["attn"] if k != "all"] + ["all"]
    x = np.arange(len(keys))
    fig = Figure(figsize=(5.5, 3.6), layout="constrained")
    ax = fig.subplots()
    ax.bar(x - 0.2, [scores["attn"][k] for k in keys], width=0.4, label="attention zeroed")
    ax.bar(x + 0.2, [scores["mlp"][k] for k in keys], width=0.4, label="MLP zeroed")
    ax.axhline(scores["intact"], color="k", linestyle="--", label="intact")
    ax.set_xticks(x, [f"step {k}" if k != "all" else "all steps" for k in keys])
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("greedy answer accuracy")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return _save(fig, path)
