"""Shared material of the estimator tests: random batches (a hypothesis strategy and a seeded
generator) and the comparison of an estimator with its reference in tests/reference.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import strategies as st

import ebpo

ATOL = 1e-7


@st.composite
def batches(draw, unit_interval=False, min_size=1, max_size=40, with_clusters=False):
    n = draw(st.integers(min_size, max_size))
    num_groups = draw(st.integers(1, max(1, n)))
    ids = draw(st.lists(st.integers(0, num_groups - 1), min_size=n, max_size=n))
    if unit_interval:
        reward = (
            st.sampled_from([0.0, 1.0])
            if draw(st.booleans())
            else st.integers(0, 8).map(lambda x: x / 8)
        )
    else:
        reward = (
            st.sampled_from([0.0, 1.0])
            if draw(st.booleans())
            else st.integers(-20, 20).map(lambda x: x / 4)
        )
    rewards = draw(st.lists(reward, min_size=n, max_size=n))
    mask = draw(st.lists(st.booleans(), min_size=n, max_size=n)) if draw(st.booleans()) else None
    id_kind = draw(st.sampled_from(["int", "str", "object"]))
    if id_kind == "str":
        ids = [f"uid-{g}" for g in ids]
    elif id_kind == "object":
        ids = np.array([f"{g:08x}-uuid" for g in ids], dtype=object)
    clusters = None
    if with_clusters:
        # clusters are a function of the group, so constant within a group
        num_clusters = draw(st.integers(1, 3))
        clusters = [f"topic{hash(str(g)) % num_clusters}" for g in ids]
    return rewards, ids, mask, clusters


def as_tensor(values):
    return torch.tensor(values, dtype=torch.float64)


def check(actual, expected):
    torch.testing.assert_close(actual, as_tensor(expected), atol=ATOL, rtol=1e-7)


def assert_valid_rows_equal(advantages: torch.Tensor, keep: np.ndarray, expected) -> None:
    """The advantages of the rows ``keep`` marks equal ``expected`` (a reference's, computed on
    those rows alone: the references have no mask) to 1e-9, and every other row's are 0."""
    torch.testing.assert_close(
        advantages[torch.from_numpy(keep)],
        torch.as_tensor(expected, dtype=torch.float64),
        atol=1e-9,
        rtol=1e-9,
    )
    assert not advantages[torch.from_numpy(~keep)].any()


def assert_load_refused(est: ebpo.AdvantageEstimator, state, message: str) -> None:
    """``est.load_state_dict(state)`` raises a ValueError matching ``message`` and leaves the
    estimator's state as it was."""
    before = est.state_dict()
    with pytest.raises(ValueError, match=message):
        est.load_state_dict(state)
    assert est.state_dict() == before


def run_against_reference(est, ref, stream, updates) -> list[tuple[ebpo.AdvantageResult, tuple]]:
    """Feed a stateful estimator and its reference the same batches (``update`` per step), check
    advantages, baselines and shrinkage at every step; the pairs (result, reference output)."""
    outputs = []
    for (rewards, ids, mask, _), update in zip(stream, updates, strict=False):
        res = est(as_tensor(rewards), ids, mask=mask, update=update)
        expected = ref(rewards, ids, mask, update=update)
        check(res.advantages, expected[0])
        check(res.baselines, expected[1])
        check(res.shrinkage, expected[2])
        outputs.append((res, expected))
    return outputs


def fidelity_batches(seed: int = 0, count: int = 300):
    """Random batches as the issue asks: uneven groups (sizes 1-8), shuffled rows, continuous or
    0/1 rewards, padding rows (mask 0) in a third of them."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        sizes = rng.integers(1, 9, size=int(rng.integers(1, 12)))
        ids = np.repeat(np.arange(len(sizes)), sizes)
        if rng.random() < 0.5:
            rewards = (rng.random(len(ids)) < rng.beta(1, 1, size=len(sizes))[ids]).astype(float)
        else:
            rewards = rng.normal(rng.normal(size=len(sizes))[ids], rng.uniform(0.1, 2.0))
        mask = rng.random(len(ids)) < 0.85 if rng.random() < 1 / 3 else None
        order = rng.permutation(len(ids))
        yield rewards[order], ids[order], (None if mask is None else mask[order])


def random_batch(
    rng: np.random.Generator, num_groups: int = 16, group_size: int = 4, offset: int = 0
):
    """0/1 rewards of ``num_groups`` groups of ``group_size`` (success rates from Beta(2, 3)), ids
    from ``offset``, rows shuffled."""
    theta = rng.beta(2, 3, size=num_groups)
    rewards = (rng.random((num_groups, group_size)) < theta[:, None]).astype(float).ravel()
    ids = np.repeat(np.arange(offset, offset + num_groups), group_size)
    order = rng.permutation(len(rewards))  # rows of a group need not be contiguous
    return rewards[order], ids[order]
