"""EBPO's state: state_dict round trips, update=False, and what load_state_dict refuses (other
options, impossible statistics, overflow)."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

import ebpo
from tests.estimators.batches import assert_load_refused, random_batch


def test_state_dict_round_trip_reproduces_next_call_bit_for_bit():
    rng = np.random.default_rng(3)
    for name, options in [
        ("ebpo", {}),
        ("ebpo", {"prior": "ema", "half_life": 3.0}),
        ("ebpo_bb", {}),
        ("ebpo", {"per_cluster": True, "min_cluster_groups": 2}),
    ]:
        est = ebpo.make_estimator(name, **options)
        clusters_of = lambda ids: [f"t{i % 3}" for i in ids]  # noqa: E731
        for step in range(4):
            rewards, ids = random_batch(rng, offset=50 * step)
            est(rewards, ids, clusters=clusters_of(ids))
        restored = ebpo.make_estimator(name, **options)
        restored.load_state_dict(json.loads(json.dumps(est.state_dict())))
        rewards, ids = random_batch(rng, offset=999)
        a = est(torch.tensor(rewards), ids, clusters=clusters_of(ids))
        b = restored(torch.tensor(rewards), ids, clusters=clusters_of(ids))
        assert torch.equal(a.advantages, b.advantages), (name, options)
        assert json.dumps(est.state_dict()) == json.dumps(restored.state_dict())


def test_update_false_changes_nothing():
    rng = np.random.default_rng(4)
    est = ebpo.make_estimator("ebpo", prior="ema", half_life=2.0)
    rewards, ids = random_batch(rng)
    est(rewards, ids)
    before = copy.deepcopy(est.state_dict())
    probe_rewards, probe_ids = random_batch(rng, offset=100)
    first = est(probe_rewards, probe_ids, update=False)
    assert est.state_dict() == before
    second = est(probe_rewards, probe_ids, update=False)
    torch.testing.assert_close(first.advantages, second.advantages, rtol=0, atol=0)


def test_load_state_dict_rejects_foreign_or_corrupt_state():
    est = ebpo.make_estimator("ebpo")
    with pytest.raises(ValueError, match="belongs to estimator 'grpo'"):
        est.load_state_dict({"estimator": "grpo"})
    options = est.state_dict()["options"]
    with pytest.raises(ValueError, match="invalid ebpo state"):
        est.load_state_dict(
            {"estimator": "ebpo", "options": options, "steps": 1, "global": {"rewards": {}}}
        )
    assert est.state_dict()["steps"] == 0


# ---------------------------------------------------------------------- options in the state
def fed(name="ebpo", **options):
    est = ebpo.make_estimator(name, **options)
    est([1.0, 0.0, 1.0, 1.0, 0.0, 0.0], [0, 0, 1, 1, 2, 2], clusters=["a", "a", "b", "b", "a", "a"])
    return est


@pytest.mark.parametrize(
    ("saved", "loading", "message"),
    [
        (
            {"prior": "ema"},
            {"prior": "history"},
            r"prior='ema' but this estimator has prior='history'",
        ),
        (
            {"prior": "history"},
            {"prior": "ema"},
            r"prior='history' but this estimator has prior='ema'",
        ),
        (
            {"prior": "ema", "half_life": 3.0},
            {"prior": "ema", "half_life": 50.0},
            r"half_life=3.0 .* half_life=50.0",
        ),
        ({"per_cluster": True}, {"per_cluster": False}, r"per_cluster=True .* per_cluster=False"),
        ({"prior": "batch"}, {"prior": "history"}, r"prior='batch'"),
    ],
)
def test_load_state_dict_refuses_a_state_saved_with_other_options(saved, loading, message):
    """Issue #10 item 8: an ema state loaded into a history estimator used to be accepted."""
    state = json.loads(json.dumps(fed(**saved).state_dict()))
    assert_load_refused(fed(**loading), state, message)


@pytest.mark.parametrize(
    ("saved", "loading"),
    [
        (
            {},
            {
                "normalize": "none",
                "tau2_mode": "corrected",
                "within_variance": "within",
                "prior_mean_from": "group_means",
            },
        ),
        (
            {"prior": "history", "half_life": 3.0},
            {"prior": "history", "half_life": 50.0},
        ),  # unused without ema
        (
            {"per_cluster": True, "min_cluster_groups": 1},
            {"per_cluster": True, "min_cluster_groups": 4},
        ),
    ],
)
def test_options_that_only_read_the_statistics_may_differ(saved, loading):
    source = fed(**saved)
    est = ebpo.make_estimator("ebpo", **loading)
    est.load_state_dict(json.loads(json.dumps(source.state_dict())))
    assert est.state_dict()["global"] == source.state_dict()["global"]


#: written by ebpo 0.1.0 (no ``prior_mean`` option yet; ``tau2``, the old name of ``tau2_mode``):
#: ema prior, half-life 3, per-cluster, after the two batches of
#: test_state_saved_by_release_0_1_0_still_loads.
STATE_0_1_0 = json.loads(
    '{"estimator": "ebpo", "options": {"prior": "ema", "half_life": 3.0, "within_variance": '
    '"pooled", "tau2": "raw", "normalize": "batch", "per_cluster": true, "min_cluster_groups": '
    '1, "eps": 1e-06}, "steps": 2, "global": {"rewards": {"count": 10.349604207872797, "mean": '
    '0.44172243451115334, "m2": 2.3538258221741133}, "group_means": {"count": 5.174802103936399, '
    '"mean": 0.44172243451115334, "m2": 0.6788814967170255}, "group_variances": {"count": '
    '5.174802103936399, "mean": 0.19248326964665402, "m2": 0.2691012721651441}}, "clusters": '
    '[["a", {"rewards": {"count": 5.174802103936399, "mean": 0.5766889738044614, "m2": '
    '1.0648413550651838}, "group_means": {"count": 2.5874010519681994, "mean": '
    '0.5766889738044614, "m2": 0.03438926316256079}, "group_variances": {"count": '
    '2.5874010519681994, "mean": 0.38496653929330804, "m2": 0.07737584211576178}}], ["b", '
    '{"rewards": {"count": 3.5874010519681994, "mean": 0.44249333402444213, "m2": '
    '0.8849866680488843}, "group_means": {"count": 1.7937005259840997, "mean": '
    '0.44249333402444213, "m2": 0.44249333402444213}, "group_variances": {"count": '
    '1.7937005259840997, "mean": 0.0, "m2": 0.0}}], [["t", 1], {"rewards": {"count": '
    '1.5874010519681996, "mean": 0.0, "m2": 0.0}, "group_means": {"count": 0.7937005259840998, '
    '"mean": 0.0, "m2": 0.0}, "group_variances": {"count": 0.7937005259840998, "mean": 0.0, '
    '"m2": 0.0}}]]}'
)


def test_state_saved_by_release_0_1_0_still_loads():
    options = {"prior": "ema", "half_life": 3.0, "per_cluster": True, "min_cluster_groups": 1}
    replayed = ebpo.make_estimator("ebpo", **options)
    replayed(
        [1, 0, 1, 1, 0, 0, 0.5, 1],
        [0, 0, 1, 1, 2, 2, 3, 3],
        clusters=["a", "a", "b", "b", ("t", 1), ("t", 1), "a", "a"],
    )
    replayed([1, 0, 0, 0], [5, 5, 6, 6], clusters=["a", "a", "b", "b"])
    loaded = ebpo.make_estimator("ebpo", **options)
    loaded.load_state_dict(STATE_0_1_0)
    expected = json.loads(json.dumps(replayed.state_dict()))
    assert json.loads(json.dumps(loaded.state_dict())) == expected
    assert ("t", 1) in loaded.cluster_priors  # the JSON list came back as the tuple label


def test_a_state_with_the_option_names_before_the_rename_loads():
    """``prior_mean`` and ``tau2`` were renamed ``prior_mean_from`` and ``tau2_mode`` (they were
    also metric names): a state saved under the old names loads as under the new ones."""
    options = {"prior": "batch", "prior_mean_from": "group_means", "tau2_mode": "corrected"}
    state = json.loads(json.dumps(fed(**options).state_dict()))
    old = dict(
        state,
        options={
            {"prior_mean_from": "prior_mean", "tau2_mode": "tau2"}.get(k, k): v
            for k, v in state["options"].items()
        },
    )
    assert "prior_mean" in old["options"] and "tau2_mode" not in old["options"]
    loaded = ebpo.make_estimator("ebpo", **options)
    loaded.load_state_dict(old)
    assert loaded.state_dict() == state
    both = dict(state, options={**state["options"], "tau2": "corrected"})  # old and new: refused
    with pytest.raises(ValueError, match=r"hold both 'tau2' .* and 'tau2_mode'"):
        loaded.load_state_dict(both)


# ---------------------------------------------------------------------- overflow never reaches the prior
def test_prior_that_would_overflow_is_not_committed():
    """Group statistics fit float64 but the pooled M2 of the running prior does not."""
    est = ebpo.make_estimator("ebpo")
    est([1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1])
    before = est.state_dict()
    rewards = torch.tensor([-1e153, 1e153] * 200, dtype=torch.float64)
    with pytest.raises(ValueError, match="running statistics overflow"):
        est(rewards, np.repeat(np.arange(200), 2))
    assert est.state_dict() == before
