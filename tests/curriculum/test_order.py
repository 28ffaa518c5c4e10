"""Curriculum orders (EBPO spec, "Curriculum / clustered sampling"), difficulty tiers, and why
they matter for EBPO's prior (Prop 3.8)."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import ebpo
from ebpo.curriculum import ORDERS, difficulty_tiers, is_contiguous, order_indices

labels_strategy = st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=0, max_size=40)


@settings(max_examples=60, deadline=None)
@given(labels=labels_strategy, seed=st.integers(0, 2**31), data=st.data())
def test_every_ordering_is_a_permutation(labels, seed, data):
    n = len(labels)
    difficulty = data.draw(
        st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0, 3.0]), min_size=n, max_size=n)
    )
    for order in ORDERS:
        perm = order_indices(n, order, topic=labels, difficulty=difficulty, seed=seed)
        assert sorted(perm) == list(range(n)), order


@settings(max_examples=60, deadline=None)
@given(labels=labels_strategy, seed=st.integers(0, 1000), data=st.data())
def test_topic_blocks_are_contiguous_and_difficulty_monotone(labels, seed, data):
    n = len(labels)
    difficulty = data.draw(st.lists(st.floats(0, 1), min_size=n, max_size=n))

    by_topic = order_indices(n, "topic", topic=labels, seed=seed)
    assert is_contiguous([labels[i] for i in by_topic])
    # blocks come in sorted label order ("sorted by topic")
    assert [labels[i] for i in by_topic] == sorted(labels)

    by_difficulty = [
        difficulty[i] for i in order_indices(n, "difficulty", difficulty=difficulty, seed=seed)
    ]
    assert by_difficulty == sorted(difficulty)

    both = order_indices(n, "topic_then_difficulty", topic=labels, difficulty=difficulty, seed=seed)
    assert is_contiguous([labels[i] for i in both])
    for topic in set(labels):
        inside = [difficulty[i] for i in both if labels[i] == topic]
        assert inside == sorted(inside)


def test_orders_are_deterministic_for_a_seed_and_differ_across_seeds():
    labels = [i % 5 for i in range(200)]
    difficulty = [float(i % 7) for i in range(200)]
    for order in ORDERS:
        first = order_indices(200, order, topic=labels, difficulty=difficulty, seed=7)
        again = order_indices(200, order, topic=labels, difficulty=difficulty, seed=7)
        other = order_indices(200, order, topic=labels, difficulty=difficulty, seed=8)
        assert first == again
        assert first != other  # rows inside blocks / ties are shuffled by the seed


def test_shuffle_ignores_labels_and_mixes_topics():
    labels = ["x"] * 50 + ["y"] * 50
    perm = order_indices(100, "shuffle", topic=labels, seed=0)
    assert not is_contiguous([labels[i] for i in perm])


def test_topic_order_handles_mixed_label_types_and_numpy_input():
    labels = np.array([3, 1, 2, 1, 3, 2])
    perm = order_indices(6, "topic", topic=labels, seed=0)
    assert [int(labels[i]) for i in perm] == [1, 1, 2, 2, 3, 3]
    mixed = [2, "b", 1, "a", "b"]
    assert [mixed[i] for i in order_indices(5, "topic", topic=mixed, seed=1)] == [
        1,
        2,
        "a",
        "b",
        "b",
    ]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n": 3, "order": "random"}, "order must be one of"),
        ({"n": 3, "order": "topic"}, "needs topic="),
        ({"n": 3, "order": "difficulty"}, "needs difficulty="),
        ({"n": 3, "order": "topic", "topic": ["a", "b"]}, "one label per row"),
        ({"n": 3, "order": "topic", "topic": ["a", None, "b"]}, "missing label"),
        ({"n": 2, "order": "difficulty", "difficulty": [0.1, math.nan]}, "non-finite"),
        (
            {"n": 2, "order": "difficulty", "difficulty": ["Level 1", "Level 2"]},
            "difficulty_from_levels",
        ),
        ({"n": -1, "order": "shuffle"}, "n must be"),
        ({"n": 2, "order": "shuffle", "seed": -3}, "seed must be"),
    ],
)
def test_order_indices_rejects_bad_input(kwargs, match):
    n = kwargs.pop("n")
    order = kwargs.pop("order")
    with pytest.raises(ValueError, match=match):
        order_indices(n, order, **kwargs)


@settings(max_examples=80, deadline=None)
@given(values=st.lists(st.integers(0, 16), min_size=1, max_size=60), k=st.integers(1, 8))
def test_difficulty_tiers_are_monotone_in_range_and_share_ties(values, k):
    difficulty = [v / 16 for v in values]
    tiers = difficulty_tiers(difficulty, k)
    assert all(0 <= t < k for t in tiers)
    pairs = sorted(zip(difficulty, tiers, strict=True))
    assert all(a[1] <= b[1] for a, b in zip(pairs, pairs[1:], strict=False))  # monotone
    for value in set(difficulty):
        assert len({t for d, t in pairs if d == value}) == 1  # ties share a tier
    assert min(tiers) == 0  # the easiest row is always in tier 0


@pytest.mark.parametrize(("n", "k"), [(10, 5), (101, 4), (7, 7), (3, 5)])
def test_difficulty_tiers_are_balanced_quantiles_for_distinct_values(n, k):
    rng = np.random.default_rng(n)
    difficulty = rng.permutation(n).astype(float).tolist()
    tiers = difficulty_tiers(difficulty, k)
    counts = np.bincount(tiers, minlength=k)
    if n >= k:
        assert counts.max() - counts.min() <= 1
    # the hardest row sits in the top occupied tier, the order of tiers follows difficulty
    assert tiers[int(np.argmax(difficulty))] == max(tiers)
    assert np.all(np.diff(np.array(tiers)[np.argsort(difficulty)]) >= 0)


def test_difficulty_tiers_rejects_bad_tiers():
    with pytest.raises(ValueError, match="num_tiers"):
        difficulty_tiers([0.1, 0.2], 0)
    assert difficulty_tiers([], 3) == []


def test_is_contiguous():
    assert is_contiguous([]) and is_contiguous(["a", "a", "b", 3, 3])
    assert not is_contiguous(["a", "b", "a"])


def test_order_indices_accepts_numpy_integers_and_refuses_bools():
    assert sorted(order_indices(np.int64(5), "shuffle", seed=np.int64(2))) == list(range(5))
    with pytest.raises(ValueError, match="n must be"):
        order_indices(True, "shuffle")
    with pytest.raises(ValueError, match="num_tiers must be a positive integer, got 2.0"):
        difficulty_tiers([0.1], 2.0)


def _baseline_error(order: list[int], theta: np.ndarray, topics: list[int], **options) -> float:
    """Mean squared error of EBPO's baselines against the true pass rates, streaming prompts in
    ``order``, 8 prompts x G = 4 per step."""
    gen = torch.Generator().manual_seed(0)
    estimator = ebpo.make_estimator("ebpo", normalize="none", **options)
    errors = []
    for start in range(0, len(order), 8):
        prompts = order[start : start + 8]
        p = torch.tensor(theta[prompts]).repeat_interleave(4)
        rewards = (torch.rand(len(p), generator=gen, dtype=torch.float64) < p).double()
        ids = torch.arange(len(prompts)).repeat_interleave(4)
        clusters = [topics[i] for i in prompts for _ in range(4)]
        result = estimator(rewards, ids, clusters=clusters)
        if start >= 80:  # after a warm-up
            errors.append(float(((result.baselines - p) ** 2).mean()))
    return float(np.mean(errors))


def test_topic_order_and_per_cluster_priors_remove_the_between_topic_error():
    """Prop 3.8: with shuffled data a global prior also errs by Var_k(mu_k). A prior that tracks
    recent groups (ema) on topic-ordered data removes that term; so do per-cluster priors keyed by
    the topic column on shuffled data, even with the default cumulative ("history") prior."""
    rng = np.random.default_rng(0)
    n = 800
    topics = [i % 2 for i in range(n)]
    theta = np.clip(np.where(np.array(topics) == 0, 0.15, 0.85) + rng.normal(0, 0.03, n), 0, 1)
    shuffled = order_indices(n, "shuffle", seed=1)
    blocked = order_indices(n, "topic", topic=topics, seed=1)
    ema = {"prior": "ema", "half_life": 10.0}
    assert _baseline_error(blocked, theta, topics, **ema) < 0.8 * _baseline_error(
        shuffled, theta, topics, **ema
    )
    global_shuffled = _baseline_error(shuffled, theta, topics)
    per_cluster = _baseline_error(shuffled, theta, topics, per_cluster=True, min_cluster_groups=4)
    assert per_cluster < 0.5 * global_shuffled


# ------------------------------------------------------------------ difficulties (issue #21, 11-12)
@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (True, "True, a boolean"),
        (False, "False, a boolean"),
        (np.bool_(True), "True, a boolean"),
        ("1", "'1', a str"),
        ("", "'', a str"),
        ("Level 3", "'Level 3', a str"),
        ([1], r"\[1\], a list"),
        ({"v": 1}, r"\{'v': 1\}, a dict"),
        (b"1", "b'1', a bytes"),
        (1j, r"1j, a complex"),
    ],
)
def test_difficulties_that_are_not_numbers_are_refused_naming_the_row(value, shown):
    """float() read True as 1.0 and "1" as 1.0: a column of booleans or text sorted silently."""
    with pytest.raises(
        ValueError, match=rf"^difficulty must be numbers \(higher = harder\); row 1 holds {shown}"
    ):
        order_indices(3, "difficulty", difficulty=[0.5, value, 2])
    with pytest.raises(ValueError, match="row 1 holds"):
        difficulty_tiers([0.5, value, 2], 2)


@pytest.mark.parametrize("value", [None, math.nan, math.inf, -math.inf, np.float32("nan")])
def test_missing_and_non_finite_difficulties_are_refused_naming_the_value(value):
    with pytest.raises(
        ValueError, match=r"difficulty has 1 missing or non-finite value\(s\) \(first at row 2\): "
    ):
        order_indices(3, "difficulty", difficulty=[0.5, 1, value])


def test_difficulties_compare_exactly_whatever_their_size():
    """float(10**400) overflowed (OverflowError, a traceback); float(2**53 + 1) == 2**53 tied."""
    huge = int("1" + "0" * 400)
    values = [
        huge,
        1e308,
        2**53 + 1,
        float(2**53),
        -huge,
        Decimal("0.5"),
        Fraction(1, 3),
        np.int64(7),
    ]
    perm = order_indices(len(values), "difficulty", difficulty=values)
    assert [values[i] for i in perm] == sorted(values)
    assert perm[0] == 4 and perm[-1] == 0 and perm.index(3) < perm.index(2)
    assert difficulty_tiers([huge, 1.0, 2**53 + 1, float(2**53)], 4) == [3, 0, 2, 1]
    both = order_indices(
        4, "topic_then_difficulty", topic=["a", "b", "a", "b"], difficulty=[huge, 1, 2, 0]
    )
    assert both == [2, 0, 3, 1]


def test_numeric_topics_sort_exactly_too():
    huge = 10**400
    assert order_indices(3, "topic", topic=[huge, 1, 2.5]) == [1, 2, 0]
