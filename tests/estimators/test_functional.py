"""Grouping and shrinkage primitives."""

from __future__ import annotations

import statistics

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ebpo.estimators.functional import (
    leave_one_group_out_moments,
    masked_std,
    normalize_advantages,
    shrinkage_factor,
)


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
