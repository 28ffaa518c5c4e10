"""Input parsing of the estimator contract: group ids and cluster labels to dense indices."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ebpo.estimators.validation import factorize, plain_labels


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
