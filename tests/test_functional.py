"""Grouping and shrinkage primitives."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ebpo.functional import factorize, shrinkage_factor


@pytest.mark.parametrize(
    "ids",
    [
        [3, 1, 3, 2],
        np.array([3, 1, 3, 2]),
        torch.tensor([3, 1, 3, 2]),
        ["c", "a", "c", "b"],
        np.array(["uid-c", "uid-a", "uid-c", "uid-b"], dtype=object),
        [("p", 1), ("q", 2), ("p", 1), ("r", 0)],  # tuples: not sortable against each other by numpy
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
