"""ebpo.evaluation.metrics: pass@k and maj@k against brute force, per-benchmark summaries."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from ebpo.evaluation import maj_at_k, pass_at_k, summarize
from ebpo.rewards import normalize_answer


# ----------------------------------------------------------------------------------- pass@k
def _pass_at_k_brute(n: int, c: int, k: int) -> float:
    """Fraction of k-subsets of n samples (c correct) that contain a correct one."""
    samples = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


def test_pass_at_k_matches_enumeration_over_subsets():
    for n in range(1, 11):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(_pass_at_k_brute(n, c, k), abs=1e-12), (
                    n,
                    c,
                    k,
                )


def test_pass_at_1_is_the_mean_and_large_n_is_stable():
    assert pass_at_k(32, 8, 1) == pytest.approx(8 / 32)
    value = pass_at_k(1024, 3, 512)
    assert 0.0 < value <= 1.0
    from math import comb

    assert value == pytest.approx(1 - comb(1021, 512) / comb(1024, 512))


@pytest.mark.parametrize(
    ("n", "c", "k"),
    [(0, 0, 1), (4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5), (4.0, 2, 1), (4, True, 1)],
)
def test_pass_at_k_rejects_bad_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


# ------------------------------------------------------------------------------------ maj@k
def _maj_brute(predictions, scores, k):
    keys = [None if p is None else normalize_answer(p) for p in predictions[:k]]
    counts = Counter(key for key in keys if key is not None)
    if not counts:
        return 0.0
    best = max(counts.values())
    winner = next(key for key in keys if key is not None and counts[key] == best)  # first seen
    return float(scores[keys.index(winner)] == 1.0)


def test_maj_at_k_votes_on_normalised_answers():
    predictions = ["4", "5", "\\frac{1}{2}", "\\dfrac{1}{2}", None, None, "5", "5"]
    scores = [0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    expected = {1: 0.0, 2: 0.0, 3: 0.0, 4: 1.0, 5: 1.0, 6: 1.0, 7: 0.0, 8: 0.0}
    for k, value in expected.items():
        assert maj_at_k(predictions, scores, k) == value == _maj_brute(predictions, scores, k)
    assert maj_at_k([None, None], [0.0, 0.0], 2) == 0.0
    with pytest.raises(ValueError, match="k must be"):
        maj_at_k(["1"], [1.0], 2)


def test_maj_at_k_matches_brute_force_on_random_votes():
    import random

    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 8)
        predictions = [rng.choice(["1", "2", " 2 ", "3", None]) for _ in range(n)]
        scores = [float(p is not None and p.strip() == "2") for p in predictions]
        for k in range(1, n + 1):
            assert maj_at_k(predictions, scores, k) == _maj_brute(predictions, scores, k)


def test_summarize_averages_over_problems():
    records = []
    correct = {"p1": [1, 0, 0, 1], "p2": [0, 0, 0, 0], "p3": [1, 1, 1, 1]}
    for pid, flags in correct.items():
        for j, flag in enumerate(flags):
            records.append(
                {
                    "benchmark": "b",
                    "problem_id": pid,
                    "sample_index": j,
                    "prediction": "7" if flag else "8",
                    "score": float(flag),
                    "status": "exact",
                }
            )
    metrics = summarize(records, ks=(1, 2, 4))["b"]
    assert metrics["pass@1"] == pytest.approx((2 / 4 + 0 + 1) / 3)
    assert metrics["pass@2"] == pytest.approx((_pass_at_k_brute(4, 2, 2) + 0 + 1) / 3)
    assert metrics["pass@4"] == pytest.approx(2 / 3)
    assert metrics["maj@4"] == pytest.approx((1 + 0 + 1) / 3)  # p1: tie 7 vs 8 -> first seen (7)
    assert metrics["n"] == 4 and metrics["problems"] == 3
