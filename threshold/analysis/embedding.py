"""Number embeddings: cosine similarity, PCA, and how well a labelling separates the values.

The input is the (n_values, d) matrix of value-token embeddings, one row per value in vocabulary
order. The paper finds jointly trained models arrange these rows by number properties (ordering,
parity, residue mod m) and single-task ADD models not. Three scores measure structure, none of them
dependent on d, on the embedding scale or on a rotation:

- **Separation** of a labelling (parity, residue mod m, sign of a permutation, ...): the
  Calinski-Harabasz ratio of the points in the top ``n_components`` PCs,
  ``[tr(B) / (K - 1)] / [tr(W) / (n - K)]``, where ``B = sum_k n_k (mu_k - mu)(mu_k - mu)^T`` is the
  between-class scatter of the K classes, ``W = sum_k sum_{i in k} (x_i - mu_k)(x_i - mu_k)^T`` the
  within-class scatter, and n the number of points. Dividing by the degrees of freedom puts
  unstructured labels near 1 whatever n, K and the number of PCs; tight, distant classes give
  large values.
- **Ordering**: ``|Spearman rho|`` between the first PC and the value, in [0, 1].
- **Cyclic order** (the clock): the values on a circle in their order, or stepping round it by k,
  the representation of modular addition found in small transformers. Parity and residue classes
  alternate round such a circle, so their centroids coincide and separation scores near 0, and a
  circle has no single ordering axis; the score that sees it is Fourier: with the rows centred and
  ``F_k = sum_v x_v exp(-2 pi i k v / n)``, the share of the rows' variance on the strongest
  frequency, ``max_k P_k / sum_k P_k`` with ``P_k = |F_k|^2 + |F_{n-k}|^2`` (one term for k = n/2),
  k = 1..n/2. It is 1 for points on one circle; unstructured rows hold about 2/n on each
  frequency, and the strongest of them (the null) about 0.4 for n = 10, 95th percentile 0.56. The
  strongest k is reported beside it. Listops only: permutations have no cyclic order.

A bare score does not say whether it is high: ten points in a few PCs separate well by chance.
Each score therefore comes with a permutation null, the same score for ``n_null`` random
shuffles of the labels (the PCs do not depend on the labels, so they are computed once), reported
as its mean and 95th percentile, a z-score, the ratio to the 95th percentile (above 1: beyond
chance's high end) and a permutation p-value ``(1 + #{null >= score}) / (1 + n_null)``. With few
values the null is coarse: ten values split 5 + 5 in 252 ways, two of them (parity and its
complement) scoring alike, so a perfect parity structure has p of about 2/252 = 0.008 at best;
read the z-score and the ratio beside it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from itertools import permutations

import numpy as np
from scipy.stats import rankdata, spearmanr
from sklearn.decomposition import PCA

from threshold.errors import ConfigError

__all__ = [
    "PCAResult",
    "Score",
    "cosine_similarity",
    "cyclic",
    "embedding_scores",
    "listops_labelings",
    "ordering",
    "pca",
    "perm_labelings",
    "separation",
]

N_COMPONENTS = 3  # top PCs scored: an ordering line plus a 2-D structure (a mod-m circle) fit
N_NULL = 1000  # label shuffles per null: the 95th percentile and p-values to about 0.01
Seed = int | np.random.Generator


@dataclass(frozen=True)
class PCAResult:
    """Coordinates of the rows in the top PCs, and the share of variance each PC explains."""

    coords: np.ndarray  # (n, c) row coordinates in the top c PCs
    explained_variance_ratio: np.ndarray  # (c,) share of the total variance, descending
    components: np.ndarray  # (c, d) unit PC directions


@dataclass(frozen=True)
class Score:
    """A score and its permutation null: what the same score reaches for shuffled labels."""

    value: float
    null_mean: float
    null_p95: float
    z: float  # (value - null mean) / null standard deviation; nan if the null is constant
    p_value: float  # (1 + #{null >= value}) / (1 + n_null)

    @property
    def vs_p95(self) -> float:
        """value / null 95th percentile: above 1 is beyond what chance reaches 95% of the time."""
        return self.value / self.null_p95 if self.null_p95 > 0 else math.nan

    def to_dict(self, digits: int = 4) -> dict:
        out = asdict(self) | {"vs_p95": self.vs_p95}
        return {k: _round(v, digits) for k, v in out.items()}


def cosine_similarity(emb: np.ndarray) -> np.ndarray:
    """(n, n) cosine similarity of the rows; a zero row has similarity 0 with every row."""
    emb = _matrix(emb)
    norms = np.linalg.norm(emb, axis=1, keepdims=True)  # (n, 1)
    unit = emb / np.where(norms > 0, norms, 1.0)  # (n, d)
    sim = unit @ unit.T  # (n, n)
    return np.clip((sim + sim.T) / 2, -1.0, 1.0)  # exactly symmetric despite rounding


def pca(emb: np.ndarray, n_components: int = N_COMPONENTS) -> PCAResult:
    """PCA of the rows (centred, not scaled); ``n_components`` is capped at min(n - 1, d)."""
    emb = _matrix(emb)
    if n_components < 1:
        raise ConfigError(f"n_components {n_components} is not allowed: use 1 or more")
    c = min(n_components, emb.shape[0] - 1, emb.shape[1])
    fitted = PCA(n_components=c, svd_solver="full").fit(emb)
    return PCAResult(
        coords=fitted.transform(emb),
        explained_variance_ratio=fitted.explained_variance_ratio_,
        components=fitted.components_,
    )


def separation(
    emb: np.ndarray,
    labels: Sequence[int] | np.ndarray,
    n_components: int = N_COMPONENTS,
    n_null: int = N_NULL,
    seed: Seed = 0,
) -> Score:
    """Between/within-class variance ratio of ``labels`` in the top PCs, with its shuffle null."""
    emb = _matrix(emb)
    codes, sizes = _classes(labels, emb.shape[0])
    coords = pca(emb, n_components).coords  # (n, c)
    rng = np.random.default_rng(seed)
    shuffled = rng.permuted(np.tile(codes, (_n_null(n_null), 1)), axis=1)  # (P, n)
    value = _calinski_harabasz(coords, codes[None, :], sizes)[0]
    return _score(value, _calinski_harabasz(coords, shuffled, sizes))


def ordering(
    emb: np.ndarray,
    values: Sequence[float] | np.ndarray | None = None,
    n_null: int = N_NULL,
    seed: Seed = 0,
) -> Score:
    """|Spearman rho| of the first PC with ``values`` (default 0..n-1), with its shuffle null."""
    emb = _matrix(emb)
    n = emb.shape[0]
    values = np.arange(n) if values is None else np.asarray(values, dtype=np.float64)
    if values.shape != (n,):
        raise ConfigError(f"{values.shape[0]} values for {n} embedding rows: give one per row")
    pc1 = pca(emb, 1).coords[:, 0]  # (n,)
    rho = spearmanr(pc1, values).statistic
    value = abs(float(rho)) if np.isfinite(rho) else 0.0  # a constant PC1 orders nothing
    # Null: Spearman rho is Pearson's r of the ranks; shuffling the value ranks gives it.
    rng = np.random.default_rng(seed)
    r_pc, r_value = _unit(rankdata(pc1)), _unit(rankdata(values))  # (n,), (n,)
    shuffled = rng.permuted(np.tile(r_value, (_n_null(n_null), 1)), axis=1)  # (P, n)
    null = np.abs(shuffled @ r_pc)  # (P,)
    return _score(value, null)


def cyclic(emb: np.ndarray, n_null: int = N_NULL, seed: Seed = 0) -> tuple[Score, int]:
    """Variance share of the strongest Fourier frequency over the rows' order (module docstring),
    with its null (the rows shuffled), and that frequency k in 1..n/2."""
    emb = _matrix(emb)
    coords = pca(emb, emb.shape[0]).coords  # (n, c): every PC, so nothing is lost
    n = coords.shape[0]
    if n < 4:
        raise ConfigError(f"{n} values have one frequency only: the cyclic score needs 4 or more")
    shares = _fourier_shares(coords[None])[0]  # (n // 2,)
    rng = np.random.default_rng(seed)
    orders = rng.permuted(np.tile(np.arange(n), (_n_null(n_null), 1)), axis=1)  # (P, n)
    chunk = max(1, 2**24 // (n * coords.shape[1]))  # about 128 MiB of coordinates at a time
    null = np.concatenate(
        [_fourier_shares(coords[orders[i : i + chunk]]).max(axis=1)
         for i in range(0, len(orders), chunk)]
    )  # fmt: skip
    return _score(float(shares.max()), null), int(shares.argmax()) + 1


def listops_labelings(n: int) -> dict[str, np.ndarray]:
    """Labellings of the values 0..n-1: ``parity`` (value mod 2, for every n) and ``mod{m}``.

    ``mod{m}`` is the residue mod m for every divisor m of n with 2 < m < n (mod 2 is ``parity``).
    The value itself is scored by :func:`ordering`, not as a labelling.
    """
    if n < 3:
        raise ConfigError(f"modulus {n} is too small to label: use 3 or more values")
    values = np.arange(n)
    out = {"parity": values % 2}
    for m in range(3, n):
        if n % m == 0:
            out[f"mod{m}"] = values % m
    return out


def perm_labelings(k: int) -> dict[str, np.ndarray]:
    """Labellings of the elements of S_k, in the perm testbed's order (lexicographic tuples).

    Composition is ``(a * b)(i) = a(b(i))`` as in the testbed; c is the k-cycle ``i -> i + 1``.

    - ``sign``: 0 for even, 1 for odd permutations (what ``sgn`` computes).
    - ``coset``: left cosets ``g<c>``, whose one-line tuples are rotations of each other.
    - ``right_coset``: right cosets ``<c>g``: g(i) - g(0) mod k is the same for every i.
    - ``image0``: g(0), the left coset of the stabiliser of 0 (what ``img`` computes).
    - ``cycle_type``: the conjugacy class.

    Labels are class indices in order of first appearance.
    """
    if not 3 <= k <= 6:
        raise ConfigError(f"degree {k} is not allowed: the perm testbed supports S_k for k = 3..6")
    elements = list(permutations(range(k)))

    def sign(p: tuple[int, ...]) -> int:
        return sum(p[i] > p[j] for i in range(k) for j in range(i + 1, k)) % 2

    def left_coset(p: tuple[int, ...]) -> tuple[int, ...]:
        return min(p[j:] + p[:j] for j in range(k))  # p * c^j is p's tuple rotated by j

    def right_coset(p: tuple[int, ...]) -> tuple[int, ...]:
        return tuple((x - p[0]) % k for x in p)  # c^j * p adds j to every image

    def cycle_type(p: tuple[int, ...]) -> tuple[int, ...]:
        seen, lengths = set(), []
        for start in range(k):
            length, i = 0, start
            while i not in seen:
                seen.add(i)
                i, length = p[i], length + 1
            if length:
                lengths.append(length)
        return tuple(sorted(lengths, reverse=True))

    keys = {
        "sign": sign,
        "coset": left_coset,
        "right_coset": right_coset,
        "image0": lambda p: p[0],
        "cycle_type": cycle_type,
    }
    return {name: _first_appearance([key(p) for p in elements]) for name, key in keys.items()}


def embedding_scores(
    emb: np.ndarray,
    testbed: str,
    n: int,
    seed: int = 0,
    n_components: int = N_COMPONENTS,
    n_null: int = N_NULL,
) -> dict:
    """Every score of one embedding matrix, JSON-ready: ``n`` is the modulus or the degree k.

    Separation is scored for each labelling of the testbed and for ``random``, a control drawn
    once from ``seed`` with the class sizes of parity (listops) or sign (perm): it should fall
    within its null. Ordering and cyclic order are scored for listops only (permutations have no
    order).
    """
    emb = _matrix(emb)
    if testbed == "listops":
        labelings, control = listops_labelings(n), "parity"
        n_values = n
    elif testbed == "perm":
        labelings, control = perm_labelings(n), "sign"
        n_values = math.factorial(n)
    else:
        raise ConfigError(f"testbed {testbed!r} is unknown: choose one of listops, perm")
    if emb.shape[0] != n_values:
        raise ConfigError(
            f"embedding has {emb.shape[0]} rows but {testbed} at size {n} has {n_values} values: "
            "pass one row per value token, in vocabulary order"
        )
    rng = np.random.default_rng(seed)
    labelings["random"] = rng.permutation(labelings[control])
    fitted = pca(emb, n_components)
    out: dict = {
        "testbed": testbed,
        "n": n,
        "d": emb.shape[1],
        "n_components": fitted.coords.shape[1],
        "n_null": n_null,
        "seed": seed,
        "explained_variance_ratio": [_round(v, 4) for v in fitted.explained_variance_ratio],
        "separation": {},
        "ordering": None,
        "cyclic": None,
    }
    for name, labels in labelings.items():
        score = separation(emb, labels, n_components, n_null, rng)
        out["separation"][name] = score.to_dict() | {"classes": len(np.unique(labels))}
    if testbed == "listops":
        out["ordering"] = ordering(emb, np.arange(n), n_null, rng).to_dict()
        if n >= 4:
            score, k = cyclic(emb, n_null, rng)
            out["cyclic"] = score.to_dict() | {"frequency": k}
    return out


def _matrix(emb: np.ndarray) -> np.ndarray:
    emb = np.asarray(emb, dtype=np.float64)
    if emb.ndim != 2 or emb.shape[0] < 3 or emb.shape[1] < 1:
        raise ConfigError(
            f"embedding of shape {emb.shape} is not allowed: pass an (n_values, d) matrix with "
            "at least 3 rows"
        )
    if not np.all(np.isfinite(emb)):
        raise ConfigError("embedding has non-finite entries: check the model it came from")
    return emb


def _classes(labels: Sequence[int] | np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Labels recoded as 0..K-1 and the class sizes; K must be in [2, n - 1]."""
    labels = np.asarray(labels)
    if labels.shape != (n,):
        raise ConfigError(f"{labels.shape} labels for {n} embedding rows: give one per row")
    _, codes = np.unique(labels, return_inverse=True)
    sizes = np.bincount(codes)
    if not 2 <= len(sizes) <= n - 1:
        raise ConfigError(
            f"labelling has {len(sizes)} classes for {n} points: "
            "separation needs at least 2 classes and one class with 2 or more points"
        )
    return codes, sizes


def _calinski_harabasz(x: np.ndarray, labels: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The ratio for each row of ``labels`` (P, n), all with class sizes ``sizes`` (K,)."""
    n, c = x.shape
    k = len(sizes)
    p = labels.shape[0]
    x = x - x.mean(axis=0)  # (n, c): the grand mean is 0
    total = float((x**2).sum())
    flat = (labels + k * np.arange(p)[:, None]).ravel()  # (P * n,) class slot of each point
    sums = np.stack(
        [np.bincount(flat, np.tile(x[:, j], p), minlength=p * k) for j in range(c)], axis=-1
    ).reshape(p, k, c)  # (P, K, c) per-class coordinate sums
    between = ((sums**2).sum(axis=-1) / sizes).sum(axis=-1)  # (P,)
    within = np.maximum(total - between, 0.0)  # (P,)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (between / (k - 1)) / (within / (n - k))


def _score(value: float, null: np.ndarray) -> Score:
    std = float(null.std())
    return Score(
        value=float(value),
        null_mean=float(null.mean()),
        null_p95=float(np.quantile(null, 0.95)),
        z=(float(value) - float(null.mean())) / std if std > 0 else math.nan,
        p_value=float((1 + np.sum(null >= value - 1e-9 * abs(value))) / (1 + len(null))),
    )


def _fourier_shares(x: np.ndarray) -> np.ndarray:
    """(P, n, c) row sets -> (P, n // 2) share of each set's variance on frequency k = 1..n/2."""
    n = x.shape[1]
    x = x - x.mean(axis=1, keepdims=True)
    power = (np.abs(np.fft.rfft(x, axis=1)) ** 2).sum(axis=-1)[:, 1:]  # (P, n // 2)
    pairs = np.full(power.shape[1], 2.0)  # rfft keeps k of the pair (k, n - k): count both ...
    if n % 2 == 0:
        pairs[-1] = 1.0  # ... except k = n/2, its own pair
    power = power * pairs
    total = power.sum(axis=1, keepdims=True)  # (P, 1)
    return power / np.where(total > 0, total, 1.0)


def _unit(v: np.ndarray) -> np.ndarray:
    v = v - v.mean()
    norm = np.linalg.norm(v)
    return v / norm if norm > 0 else v


def _n_null(n_null: int) -> int:
    if n_null < 20:
        raise ConfigError(f"n_null {n_null} is too small for a 95th percentile: use 20 or more")
    return n_null


def _first_appearance(keys: list) -> np.ndarray:
    index: dict = {}
    return np.array([index.setdefault(key, len(index)) for key in keys])


def _round(x: float, digits: int) -> float | None:
    """Rounded to ``digits`` significant figures; None for inf and nan (JSON has neither)."""
    x = float(x)
    if not math.isfinite(x):
        return None
    return float(f"{x:.{digits}g}")
