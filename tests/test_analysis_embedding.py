"""Embedding scores find planted structure, stay at chance without it, and are reproducible."""

import itertools
import json

import numpy as np
import pytest

from threshold.analysis.embedding import (
    cosine_similarity,
    cyclic,
    embedding_scores,
    listops_labelings,
    ordering,
    pca,
    perm_labelings,
    separation,
)
from threshold.errors import ConfigError
from threshold.tasks import get_testbed

D = 16


def clusters(labels, d=D, spread=3.0, noise=1.0, seed=0):
    """One random centre per class, each point its class centre plus isotropic noise."""
    rng = np.random.default_rng(seed)
    labels = np.asarray(labels)
    centres = spread * rng.normal(size=(labels.max() + 1, d))
    return centres[labels] + noise * rng.normal(size=(len(labels), d))


def isotropic(n, d=D, seed=0):
    return np.random.default_rng(seed).normal(size=(n, d))


def test_cosine_matrix_is_symmetric_with_unit_diagonal():
    emb = isotropic(10)
    sim = cosine_similarity(emb)
    assert sim.shape == (10, 10)
    np.testing.assert_array_equal(sim, sim.T)
    np.testing.assert_allclose(np.diag(sim), 1.0)
    assert np.all(np.abs(sim) <= 1.0)
    # Invariant to scaling each row by a positive factor.
    scaled = emb * np.arange(1, 11)[:, None]
    np.testing.assert_allclose(cosine_similarity(scaled), sim, atol=1e-12)


def test_pca_caps_components_and_orders_variance():
    fitted = pca(isotropic(5, d=16), n_components=8)
    assert fitted.coords.shape == (5, 4)  # at most n - 1 components carry variance
    ratios = fitted.explained_variance_ratio
    assert np.all(np.diff(ratios) <= 1e-12) and ratios.sum() == pytest.approx(1.0)


def test_parity_clusters_score_high_on_parity_and_low_on_random_labels():
    parity = np.arange(10) % 2
    emb = clusters(parity)
    score = separation(emb, parity, seed=1)
    # Ten points have 252 splits into 5 + 5, two of them parity-like (parity and its complement
    # score the same), so the p-value cannot fall below about 2/252 = 0.008.
    assert score.p_value < 0.02 and score.vs_p95 > 3 and score.z > 3
    halves = (np.arange(10) >= 5).astype(int)  # same class sizes, 3:2 mixed in parity
    assert separation(emb, halves, seed=1).value < score.null_p95


def test_isotropic_embeddings_are_within_null_on_every_labelling():
    """Each labelling of each embedding is a test at 5%: a few of 60 may fall out, not more."""
    p_values = []
    for seed in range(10):
        out = embedding_scores(isotropic(12, seed=seed), "listops", 12, seed=seed, n_null=200)
        p_values += [score["p_value"] for score in out["separation"].values()]
        p_values.append(out["ordering"]["p_value"])
    assert len(p_values) == 60
    assert np.mean(np.array(p_values) < 0.05) <= 0.15 and np.median(p_values) > 0.25


def test_null_is_calibrated_on_random_embeddings():
    """Without structure the p-value is uniform: about 5% of embeddings fall below 0.05."""
    parity = np.arange(12) % 2
    p_sep = [
        separation(isotropic(12, seed=s), parity, n_null=200, seed=s).p_value for s in range(200)
    ]
    p_ord = [ordering(isotropic(12, seed=s), n_null=200, seed=s).p_value for s in range(200)]
    for ps in (np.array(p_sep), np.array(p_ord)):
        assert 0.01 <= np.mean(ps < 0.05) <= 0.11
        assert 0.35 <= np.mean(ps < 0.5) <= 0.65


def test_planted_line_is_ordered_and_random_is_not():
    rng = np.random.default_rng(0)
    direction = rng.normal(size=D)
    line = np.arange(20)[:, None] * direction + 0.5 * rng.normal(size=(20, D))
    score = ordering(line)
    assert score.value > 0.95 and score.p_value < 0.01
    # Reversing the order gives the same |rho|; the sign of a PC carries no meaning.
    assert ordering(line[::-1]).value == pytest.approx(score.value)
    random_score = ordering(isotropic(20))
    assert random_score.value < random_score.null_p95


def circle(n, step=1, d=D, noise=0.0, seed=0):
    """The values 0..n-1 on a circle, value v at angle 2 pi step v / n, in a random plane."""
    rng = np.random.default_rng(seed)
    plane, _ = np.linalg.qr(rng.normal(size=(d, 2)))  # (d, 2) orthonormal
    angle = 2 * np.pi * step * np.arange(n) / n
    points = np.stack([np.cos(angle), np.sin(angle)], axis=1) @ plane.T  # (n, d)
    return points + noise * rng.normal(size=(n, d))


def test_a_clock_is_cyclic_and_the_paper_scores_miss_it():
    """Digits on a circle in order (modular addition's clock): share 1 at k = 1, far beyond the
    null, while parity and mod-5 classes, alternating round it, do not separate."""
    emb = circle(10, noise=0.02)
    score, k = cyclic(emb)
    assert k == 1 and score.value > 0.99 and score.vs_p95 > 1.5 and score.p_value < 0.002
    scores = embedding_scores(emb, "listops", 10)
    assert scores["cyclic"]["frequency"] == 1
    assert scores["cyclic"]["value"] == pytest.approx(score.value, abs=1e-4)
    for name in ("parity", "mod5"):
        assert scores["separation"][name]["vs_p95"] < 0.1, name
    # Stepping round the circle by 3 (coprime to 10) is the same structure at frequency 3.
    assert cyclic(circle(10, step=3, noise=0.02))[1] == 3


def test_a_line_is_ordered_not_cyclic():
    """An ordered line puts a share of 0.64 on k = 1 (a ramp's spectrum), not the circle's 1:
    the ordering score, not the cyclic one, is what marks it."""
    rng = np.random.default_rng(1)
    line = np.arange(10)[:, None] * rng.normal(size=D)
    score, k = cyclic(line)
    assert k == 1 and score.value == pytest.approx(0.64, abs=0.01)
    assert ordering(line).value == pytest.approx(1.0)


def test_cyclic_null_is_calibrated_on_random_embeddings():
    ps = np.array([cyclic(isotropic(10, seed=s), n_null=200, seed=s)[0].p_value
                   for s in range(200)])  # fmt: skip
    assert 0.01 <= np.mean(ps < 0.05) <= 0.11
    assert 0.35 <= np.mean(ps < 0.5) <= 0.65


def test_ordering_matches_scipy_spearman():
    from scipy.stats import spearmanr

    emb = isotropic(15, seed=3)
    pc1 = pca(emb, 1).coords[:, 0]
    assert ordering(emb).value == pytest.approx(abs(spearmanr(pc1, np.arange(15)).statistic))


def test_planted_mod3_is_found_among_the_divisors_of_12():
    values = np.arange(12)
    emb = clusters(values % 3, spread=4.0, noise=0.7, seed=2)
    sep = embedding_scores(emb, "listops", 12, seed=0)["separation"]
    assert set(sep) == {"parity", "mod3", "mod4", "mod6", "random"}
    assert sep["mod3"]["p_value"] < 0.01 and sep["mod3"]["vs_p95"] > 3
    assert sep["mod6"]["p_value"] < 0.01  # mod 6 refines mod 3, so it separates too
    # By the Chinese remainder theorem mod 4 (and parity) are independent of mod 3 on 0..11.
    for name in ("mod4", "parity", "random"):
        assert sep[name]["p_value"] > 0.05, name
        assert sep[name]["value"] < sep["mod3"]["value"] / 10, name


def test_listops_labelings():
    assert set(listops_labelings(12)) == {"parity", "mod3", "mod4", "mod6"}
    assert set(listops_labelings(7)) == {"parity"}
    labels = listops_labelings(20)
    np.testing.assert_array_equal(labels["mod5"], np.arange(20) % 5)
    np.testing.assert_array_equal(labels["parity"], np.arange(20) % 2)


@pytest.mark.parametrize("k", [3, 4, 5])
def test_perm_labelings_follow_the_testbed_order(k):
    testbed = get_testbed("perm", k)
    elements = [tuple(int(c) for c in token) for token in testbed.value_tokens]
    labels = perm_labelings(k)
    n = len(elements)
    for name, lab in labels.items():
        assert lab.shape == (n,), name

    def sign_by_cycles(p):  # (-1)^(k - number of cycles), independent of the inversion count
        seen, cycles = set(), 0
        for s in range(k):
            if s not in seen:
                cycles += 1
                while s not in seen:
                    seen.add(s)
                    s = p[s]
        return (k - cycles) % 2

    assert [sign_by_cycles(p) for p in elements] == labels["sign"].tolist()
    # The testbed's sgn op agrees: odd elements map to the transposition, even to the identity.
    sgn = testbed.ops["sgn"]
    assert [int(sgn([i]) != 0) for i in range(n)] == labels["sign"].tolist()
    # Left cosets g<c> of the k-cycle: (k-1)! classes of k, each closed under right mult by c.
    mul = testbed.ops["mul"]
    cycle = elements.index(tuple((i + 1) % k for i in range(k)))
    for name, side in (
        ("coset", lambda g: mul([g, cycle])),
        ("right_coset", lambda g: mul([cycle, g])),
    ):
        sizes = np.bincount(labels[name])
        assert len(sizes) == n // k and np.all(sizes == k), name
        assert all(labels[name][side(g)] == labels[name][g] for g in range(n)), name
    # image0 is what img computes: equal labels exactly when img agrees.
    img = testbed.ops["img"]
    for a, b in itertools.combinations(range(n), 2):
        assert (labels["image0"][a] == labels["image0"][b]) == (img([a]) == img([b]))
    # Cycle type is a class function: conjugates share it.
    inverse = {g: elements.index(tuple(np.argsort(elements[g]))) for g in range(n)}
    for g, h in itertools.product(range(n), repeat=2):
        conj = mul([h, g, inverse[h]])
        assert labels["cycle_type"][conj] == labels["cycle_type"][g]
    assert len(np.unique(labels["cycle_type"])) == {3: 3, 4: 5, 5: 7}[k]


def test_perm_scores_find_a_planted_sign():
    sign = perm_labelings(4)["sign"]
    out = embedding_scores(clusters(sign), "perm", 4, seed=0)
    assert out["ordering"] is None
    assert out["separation"]["sign"]["p_value"] < 0.01
    assert out["separation"]["random"]["p_value"] > 0.05


def test_scores_are_json_ready_and_deterministic_given_the_seed():
    emb = clusters(np.arange(10) % 2)
    a = embedding_scores(emb, "listops", 10, seed=3, n_null=200)
    b = embedding_scores(emb, "listops", 10, seed=3, n_null=200)
    assert json.dumps(a, allow_nan=False) == json.dumps(b, allow_nan=False)
    c = embedding_scores(emb, "listops", 10, seed=4, n_null=200)
    assert c["separation"]["parity"]["value"] == a["separation"]["parity"]["value"]
    assert c["separation"] != a["separation"]  # the random control and the nulls move


def test_scores_are_invariant_to_rotation_and_scale():
    emb = clusters(np.arange(12) % 3, seed=4)
    q, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(D, D)))
    a = embedding_scores(emb, "listops", 12, seed=0, n_null=200)
    b = embedding_scores(7.0 * emb @ q + 3.0, "listops", 12, seed=0, n_null=200)
    assert a["explained_variance_ratio"] == pytest.approx(b["explained_variance_ratio"], rel=1e-3)
    for name, score in a["separation"].items():
        assert b["separation"][name] == pytest.approx(score, rel=1e-3), name
    assert b["ordering"] == pytest.approx(a["ordering"], rel=1e-3)
    assert b["cyclic"] == pytest.approx(a["cyclic"], rel=1e-3)


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda: embedding_scores(isotropic(9), "listops", 10), "9 rows"),
        (lambda: embedding_scores(isotropic(6), "graph", 3), "'graph'"),
        (lambda: separation(isotropic(6), [0] * 6), "1 classes"),
        (lambda: separation(isotropic(6), [0, 1]), "labels for 6"),
        (lambda: separation(isotropic(6), [0, 1] * 3, n_null=5), "n_null 5"),
        (lambda: pca(isotropic(6), 0), "n_components 0"),
        (lambda: cyclic(isotropic(3)), "3 values"),
        (lambda: cosine_similarity(np.ones(5)), "shape (5,)"),
        (lambda: perm_labelings(9), "degree 9"),
    ],
)
def test_bad_input_names_the_value(call, named):
    with pytest.raises(ConfigError, match=named.replace("(", r"\(").replace(")", r"\)")):
        call()
