"""Grouping and shrinkage primitives."""

from __future__ import annotations

import statistics

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ebpo.estimators.functional import (
    factorize,
    leave_one_group_out_moments,
    masked_std,
    normalize_advantages,
    plain_labels,
    shrinkage_factor,
)


@pytest.mark.parametrize(
    "ids",
    [
        [3, 1, 3, 2],
        np.array([3, 1, 3, 2]),
        torch.tensor([3, 1, 3, 2]),
        ["c", "a", "c", "b"],
        np.array(["uid-c", "uid-a", "uid-c", "uid-b"], dtype=object),
        [
            ("p", 1),
            ("q", 2),
            ("p", 1),
            ("r", 0),
        ],  # tuples: not sortable against each other by numpy
        [1, "a", 1, 2.5],  # mixed types fall back to hashing
    ],
)
def test_factorize_maps_equal_ids_to_equal_indices(ids):
    index, labels = factorize(ids)
    assert index.dtype == torch.int64
    assert index[0] == index[2] and len({int(i) for i in index}) == 3 == len(labels)
    values = ids.tolist() if hasattr(ids, "tolist") else list(ids)
    for i, value in enumerate(values):
        assert labels[int(index[i])] == value


def test_factorize_rejects_float_ids():
    with pytest.raises(ValueError, match="group_ids"):
        factorize(torch.tensor([0.5, 1.0]))


@settings(max_examples=200, deadline=None)
@given(
    st.floats(0, 10, allow_nan=False),
    st.floats(0, 10, allow_nan=False),
    st.integers(1, 64),
)
def test_shrinkage_in_unit_interval(sigma2, tau2, n):
    s = shrinkage_factor(sigma2, tau2, torch.tensor([float(n)], dtype=torch.float64), 1e-6)
    assert 0.0 <= float(s) <= 1.0


def test_shrinkage_vanishes_as_between_variance_grows():
    n = torch.tensor([4.0], dtype=torch.float64)
    values = [float(shrinkage_factor(0.25, tau2, n, 1e-6)) for tau2 in (0.01, 0.1, 1.0, 10.0, 1e4)]
    assert all(a > b for a, b in zip(values, values[1:], strict=False))
    assert values[-1] < 1e-4


def test_shrinkage_is_one_without_any_variance():
    assert float(shrinkage_factor(0.0, 0.0, torch.tensor([4.0], dtype=torch.float64), 1e-6)) == 1.0


# ---------------------------------------------------------------------- exact ids, clear errors
@pytest.mark.parametrize(
    "ids",
    [
        [2**63 + 1, 2**63, -1, -1],  # numpy would make float64 of this list, merging the first two
        [2**63, 2**63 + 1, 0, 0],
        np.array([2**63 + 1, 2**63, 0, 0], dtype=np.uint64),
        torch.tensor([2**63 + 1, 2**63, 0, 0], dtype=torch.uint64),
        [2**70, 2**70 + 1, 5, 5],
    ],
)
def test_factorize_keeps_ids_beyond_int64_exact(ids):
    index, labels = factorize(ids)
    assert len({int(i) for i in index}) == 3 and index[2] == index[3]
    values = ids.tolist() if hasattr(ids, "tolist") else list(ids)
    assert [plain_labels(labels)[int(i)] for i in index] == values


@pytest.mark.parametrize("ids", [{0, 1}, {"a": 0, "b": 1}, "ab", frozenset({1, 2})])
def test_factorize_refuses_unordered_containers(ids):
    with pytest.raises(ValueError, match="clusters must be a 1-D sequence"):
        factorize(ids, "clusters")


def test_factorize_names_its_argument():
    with pytest.raises(
        ValueError, match="^clusters must hold integers or hashable ids, got floats"
    ):
        factorize([0.5, 1.5], "clusters")
    with pytest.raises(ValueError, match="^clusters must be hashable"):
        factorize([[1], [2]], "clusters")


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(-1e3, 1e3, allow_nan=False), st.booleans()), min_size=1, max_size=12
    )
)
def test_leave_one_group_out_moments_equal_brute_force(entries):
    values = torch.tensor([v for v, _ in entries], dtype=torch.float64)
    include = torch.tensor([i for _, i in entries])
    count, mean, variance = leave_one_group_out_moments(values, include)
    for k in range(len(entries)):
        others = [v for j, (v, i) in enumerate(entries) if i and j != k]
        assert float(count[k]) == len(others)
        assert float(mean[k]) == pytest.approx(
            statistics.fmean(others) if others else 0.0, abs=1e-9
        )
        assert float(variance[k]) == pytest.approx(
            statistics.pvariance(others) if others else 0.0, rel=1e-9, abs=1e-7
        )


def test_leave_one_group_out_variance_keeps_precision_under_a_large_offset():
    """Raw second moments would cancel catastrophically at 1e8 ± 0.01."""
    values = torch.tensor([1e8, 1e8 + 0.01, 1e8 - 0.01, 1e8 + 0.02], dtype=torch.float64)
    _, _, variance = leave_one_group_out_moments(values, torch.ones(4, dtype=torch.bool))
    assert float(variance[0]) == pytest.approx(statistics.pvariance([0.01, -0.01, 0.02]), rel=1e-6)


def test_overflowing_spread_is_an_error_not_zero_advantages():
    raw = torch.tensor([-1e154, 1e154] * 4, dtype=torch.float64)
    with pytest.raises(ValueError, match="spread of this batch overflows"):
        normalize_advantages(raw, None, "batch", 1e-6)
    with pytest.raises(ValueError, match="spread of this batch overflows"):
        masked_std(raw, None)
