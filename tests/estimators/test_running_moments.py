"""Running moments: streaming updates and merges equal a two-pass computation on all the data."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ebpo.estimators.ebpo import RunningMoments
from tests.reference import two_pass_moments

chunks = st.lists(
    st.lists(st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False), min_size=0, max_size=30),
    min_size=1,
    max_size=8,
)


def assert_moments(moments: RunningMoments, values: list[float]) -> None:
    count, mean, m2 = two_pass_moments(values)
    assert moments.count == count
    assert moments.mean == pytest.approx(mean, rel=1e-9, abs=1e-9)
    assert moments.m2 == pytest.approx(m2, rel=1e-7, abs=1e-6)
    expected_var = m2 / count if count else 0.0
    assert moments.variance == pytest.approx(expected_var, rel=1e-7, abs=1e-6)


@settings(max_examples=200, deadline=None)
@given(chunks)
def test_streaming_updates_equal_two_pass(parts):
    moments = RunningMoments()
    for part in parts:
        moments.update(torch.tensor(part, dtype=torch.float64))
    assert_moments(moments, [v for part in parts for v in part])


@settings(max_examples=200, deadline=None)
@given(chunks, st.randoms())
def test_merging_workers_equals_one_worker(parts, rng):
    """Chan's parallel combination: shard the chunks over workers in any order, merge in any order."""
    workers = [RunningMoments() for _ in range(3)]
    for part in parts:
        rng.choice(workers).update(torch.tensor(part, dtype=torch.float64))
    rng.shuffle(workers)
    merged = workers[0].copy()
    for worker in workers[1:]:
        merged.merge(worker)
    assert_moments(merged, [v for part in parts for v in part])


def test_single_observation_has_zero_variance():
    moments = RunningMoments().update(torch.tensor([3.0]))
    assert moments.variance == 0.0 and moments.mean == 3.0


def test_decay_weights_old_observations_geometrically():
    factor = 0.5
    moments = RunningMoments().update(torch.tensor([0.0, 0.0]))
    moments.decay(factor).update(torch.tensor([1.0, 1.0]))
    # weights 0.5, 0.5, 1, 1 -> mean 2/3, population variance sum w (x - m)^2 / sum w
    weights, values = [0.5, 0.5, 1, 1], [0, 0, 1, 1]
    mean = sum(w * x for w, x in zip(weights, values, strict=True)) / sum(weights)
    var = sum(w * (x - mean) ** 2 for w, x in zip(weights, values, strict=True)) / sum(weights)
    assert moments.mean == pytest.approx(mean)
    assert moments.variance == pytest.approx(var)


def test_state_dict_round_trip_and_validation():
    moments = RunningMoments().update(torch.tensor([1.0, 2.0, 4.0]))
    assert RunningMoments.from_state_dict(moments.state_dict()) == moments
    with pytest.raises(ValueError, match="count"):
        RunningMoments.from_state_dict({"mean": 1.0})
    with pytest.raises(ValueError, match="finite"):
        RunningMoments.from_state_dict({"count": 1.0, "mean": math.nan, "m2": 0.0})


def test_overflowing_update_raises_and_leaves_the_moments_unchanged():
    moments = RunningMoments().update(torch.tensor([0.0, 1.0]))
    before = moments.state_dict()
    with pytest.raises(ValueError, match="running statistics overflow float64"):
        moments.add_moments(2.0, 1e300, 0.0)  # δ²·n_a·n_b/n = 1e600
    assert moments.state_dict() == before


def test_first_update_with_a_huge_mean_is_not_nan():
    """δ²·0 with δ² = inf used to give NaN on an empty accumulator."""
    moments = RunningMoments().add_moments(2.0, 5e299, 0.0)
    assert moments.state_dict() == {"count": 2.0, "mean": 5e299, "m2": 0.0}


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({"count": 10**400, "mean": 0.0, "m2": 0.0}, "finite numbers"),
        ({"count": "2", "mean": 0.0, "m2": 0.0}, "finite numbers"),
        ({"count": True, "mean": 0.0, "m2": 0.0}, "finite numbers"),
        ({"count": 2.0, "mean": math.inf, "m2": 0.0}, "must be finite"),
        ({"count": -1.0, "mean": 0.0, "m2": 0.0}, "count >= 0"),
        ({"count": 2.0, "mean": 0.0, "m2": -1e-3}, "m2 >= 0"),
        ({"count": 0.0, "mean": 0.5, "m2": 0.0}, "count 0 must have mean 0 and m2 0"),
        ({"count": 0.0, "mean": 0.0, "m2": 1.0}, "count 0 must have mean 0 and m2 0"),
        ([1, 2, 3], r"moments must be a dict with keys \['count', 'mean', 'm2'\], got list"),
        (
            {"count": 2.0**53 + 2, "mean": 0.0, "m2": 0.0},
            r"moments\.count = 9007199254740994\.0 is more than 2\*\*53",
        ),
        ({"count": 1e308, "mean": 0.0, "m2": 0.0}, r"count = 1e\+308 is more than 2\*\*53"),
        ({"count": 2.0, "mean": 0.0, "m2": 0.0, "n": 2}, r"unknown key 'moments\.n'"),
    ],
)
def test_from_state_dict_refuses_impossible_moments(state, message):
    with pytest.raises(ValueError, match=message):
        RunningMoments.from_state_dict(state)


def test_a_fractional_count_loads_only_where_counts_decay():
    """Issue 46 item 8: without decay every observation counts 1; at 2**53 counting stops."""
    state = {"count": 2.5, "mean": 0.5, "m2": 1.0}
    assert RunningMoments.from_state_dict(state).count == 2.5  # an ema prior's decayed count
    with pytest.raises(ValueError, match=r"^w\.count = 2\.5 must be a whole number"):
        RunningMoments.from_state_dict(state, "w", whole_count=True)
    top = {"count": float(2**53), "mean": 0.5, "m2": 1.0}
    assert RunningMoments.from_state_dict(top, whole_count=True).count == 2**53
    assert 2.0**53 + 1 == 2.0**53  # why the bound: one more observation would not count


def test_merge_refuses_what_is_not_running_moments():
    with pytest.raises(ValueError, match="merge expects another RunningMoments, got NoneType"):
        RunningMoments().merge(None)
