"""The estimator contract, for every registered estimator: masked rows, singleton and empty
groups, output dtype, bad batches that change nothing, and the traits (uses_prior, keeps_history,
uses_clusters) a caller may rely on."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import ebpo


@pytest.mark.parametrize("name", ebpo.available_estimators())
def test_masked_rows_get_zero_and_do_not_matter(name):
    """Padding rows (any reward, even NaN) change nothing: same result as the batch without them."""
    rewards = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    ids = ["a", "a", "b", "b", "c", "c", "d", "d"]
    est_full, est_padded = ebpo.make_estimator(name), ebpo.make_estimator(name)
    full = est_full(rewards, ids)
    padded = est_padded(
        rewards + [float("nan"), 1.0], ids + ["pad-0", "a"], mask=[True] * 8 + [False, False]
    )
    torch.testing.assert_close(padded.advantages[:8], full.advantages)
    assert padded.advantages[8:].abs().sum() == 0
    assert json.dumps(est_full.state_dict()) == json.dumps(est_padded.state_dict())


@pytest.mark.parametrize("name", ebpo.available_estimators())
def test_singleton_and_fully_masked_groups_are_valid(name):
    est = ebpo.make_estimator(name)
    res = est([1.0, 0.0, 1.0, 0.5], [0, 1, 1, 2], mask=[True, True, True, False])
    assert torch.isfinite(res.advantages).all()
    assert res.advantages[3] == 0
    fully_masked = est([1.0, 0.0], [0, 0], mask=[False, False])
    assert fully_masked.advantages.abs().sum() == 0


@pytest.mark.parametrize("name", ebpo.available_estimators())
def test_output_follows_input_dtype_and_shape(name):
    est = ebpo.make_estimator(name)
    r32 = torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=torch.float32)
    res = est(r32, torch.tensor([0, 0, 1, 1]))
    assert res.advantages.dtype == torch.float32 and res.advantages.shape == (4,)
    res64 = est(r32.double(), np.array([0, 0, 1, 1]))
    assert res64.advantages.dtype == torch.float64
    for value in res.metrics.values():
        assert isinstance(value, float)


# ---------------------------------------------------------------------- bad batches change nothing
@pytest.mark.parametrize("name", ebpo.available_estimators())
def test_overflowing_batch_is_rejected_before_any_state_changes(name):
    """Issue #11 item 4: est([0, 1e200, 0, 1e200], [0, 0, 1, 1]) returned inf/NaN, and EBPO's prior
    became NaN so that every later batch got zero advantages."""
    est = ebpo.make_estimator(name)
    good = ([1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1])
    fresh = ebpo.make_estimator(name)
    est(*good)
    fresh(*good)
    before = json.dumps(est.state_dict())
    with pytest.raises(ValueError, match="too large|overflow|\\[0, 1\\]"):
        est([0, 1e200, 0, 1e200], [0, 0, 1, 1])
    assert json.dumps(est.state_dict()) == before
    torch.testing.assert_close(est(*good).advantages, fresh(*good).advantages, rtol=0, atol=0)


@pytest.mark.parametrize(
    "name", ["grpo", "rloo", "dr_grpo", "jspo", "reinforce_pp_baseline", "ebpo"]
)
def test_advantages_that_do_not_fit_fp16_are_refused(name):
    """Issue #11 item 7: fp16 rewards of ±60000 gave ±inf in rloo."""
    est = (
        ebpo.make_estimator(name, normalize="none") if name == "ebpo" else ebpo.make_estimator(name)
    )
    rewards = torch.tensor([60000.0, -60000.0, -60000.0, -60000.0], dtype=torch.float16)
    ids = [0, 0, 0, 0]
    if name in ("grpo", "reinforce_pp_baseline"):  # their advantages are ±1.7 / ±1.5: they fit
        assert torch.isfinite(est(rewards, ids).advantages).all()
        return
    before = est.state_dict()
    with pytest.raises(ValueError, match="do not fit the output dtype float16"):
        est(rewards, ids)
    assert est.state_dict() == before
    assert torch.isfinite(est(rewards.float(), ids).advantages).all()


# ---------------------------------------------------------------------- traits
#: (uses_prior, keeps_history, uses_clusters) of each registered estimator, with its defaults and,
#: where the option exists, with per-cluster priors
TRAITS = [
    ("dr_grpo", {}, (False, False, False)),
    ("ebpo", {}, (True, True, False)),
    ("ebpo", {"per_cluster": True}, (True, True, True)),
    ("ebpo", {"prior": "batch"}, (True, True, False)),
    ("ebpo_bb", {}, (True, True, False)),
    ("ebpo_bb", {"per_cluster": True}, (True, True, True)),
    ("grpo", {}, (False, False, False)),
    ("jspo", {}, (False, False, False)),
    ("jspo_plus_plus", {}, (False, True, False)),
    ("reinforce_pp_baseline", {}, (False, False, False)),
    ("rloo", {}, (False, False, False)),
]
#: four groups of four; the first two groups (cluster "easy") succeed more than the last two
REWARDS = [1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0]
IDS = np.repeat(np.arange(4), 4)
CLUSTERS = ["easy"] * 8 + ["hard"] * 8


def test_the_trait_table_covers_every_registered_estimator():
    assert sorted({name for name, _, _ in TRAITS}) == ebpo.available_estimators()


@pytest.mark.parametrize(("name", "options", "traits"), TRAITS)
def test_traits_of_every_estimator(name, options, traits):
    est = ebpo.make_estimator(name, **options)
    assert (est.uses_prior, est.keeps_history, est.uses_clusters) == traits


@pytest.mark.parametrize(("name", "options", "traits"), TRAITS)
def test_an_estimator_with_a_prior_reports_it(name, options, traits):
    res = ebpo.make_estimator(name, **options)(REWARDS, IDS, clusters=CLUSTERS)
    assert ("prior_mean" in res.metrics) == traits[0]
    assert ("shrinkage_mean" in res.metrics) == traits[0]


@pytest.mark.parametrize(("name", "options", "traits"), TRAITS)
def test_keeps_history_is_whether_a_call_changes_the_state(name, options, traits):
    est = ebpo.make_estimator(name, **options)
    before = json.dumps(est.state_dict())
    est(REWARDS, IDS, clusters=CLUSTERS, update=False)
    assert json.dumps(est.state_dict()) == before
    est(REWARDS, IDS, clusters=CLUSTERS)
    assert (json.dumps(est.state_dict()) != before) == traits[1]


@pytest.mark.parametrize(("name", "options", "traits"), TRAITS)
def test_uses_clusters_is_whether_the_estimator_reads_them(name, options, traits):
    with_clusters = ebpo.make_estimator(name, **options)(REWARDS, IDS, clusters=CLUSTERS)
    if traits[2]:
        with pytest.raises(ValueError, match="clusters is required"):
            ebpo.make_estimator(name, **options)(REWARDS, IDS)
        return
    without = ebpo.make_estimator(name, **options)(REWARDS, IDS)
    torch.testing.assert_close(with_clusters.advantages, without.advantages, rtol=0, atol=0)


def test_per_cluster_priors_change_the_baselines():
    """The clusters an estimator reads matter: one prior per cluster moves each group's target."""
    clustered = ebpo.make_estimator("ebpo", per_cluster=True, min_cluster_groups=1)
    pooled = ebpo.make_estimator("ebpo")
    a = clustered(REWARDS, IDS, clusters=CLUSTERS).baselines
    b = pooled(REWARDS, IDS).baselines
    assert not torch.allclose(a, b)
