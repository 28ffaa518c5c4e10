"""EBPO's own properties: the paper's claims, state handling, and bad input."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

import ebpo
from ebpo.estimators.ebpo import Prior
from tests.reference import two_pass_moments


def random_batch(rng: np.random.Generator, num_groups: int = 16, group_size: int = 4, offset: int = 0):
    theta = rng.beta(2, 3, size=num_groups)
    rewards = (rng.random((num_groups, group_size)) < theta[:, None]).astype(float).ravel()
    ids = np.repeat(np.arange(offset, offset + num_groups), group_size)
    order = rng.permutation(len(rewards))  # rows of a group need not be contiguous
    return rewards[order], ids[order]


# ---------------------------------------------------------------------- the paper's claims
def test_all_zero_group_gets_penalty_minus_s_times_prior_mean():
    """Theorem 3.2: an all-zero group has raw advantage −S·μ_glob < 0 (GRPO gives exactly 0)."""
    rewards = [0, 0, 0, 0, 1, 1, 0, 1, 1, 1, 1, 0]
    ids = [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    res = ebpo.make_estimator("ebpo", normalize="none")(rewards, ids)
    mu = res.metrics["prior_mean"]
    s = float(res.shrinkage[0])
    assert mu > 0 and 0 < s < 1
    torch.testing.assert_close(res.advantages[:4], torch.full((4,), -s * mu))
    assert ebpo.make_estimator("grpo")(rewards, ids).advantages[:4].abs().sum() == 0
    assert res.metrics["saturated_failure_signal_frac"] == 1.0


def test_shrinkage_tends_to_zero_and_baseline_to_group_mean_as_groups_spread():
    """As τ² grows relative to σ²/G, S → 0 and the EB baseline tends to GRPO's group mean."""
    shrinkages = []
    for spread in (0.1, 1.0, 10.0, 100.0):
        rewards = np.array([0.0, 0.1, 0.0, 0.1, spread, spread + 0.1, spread, spread + 0.1])
        ids = [0, 0, 0, 0, 1, 1, 1, 1]
        res = ebpo.make_estimator("ebpo", within_variance="within")(rewards, ids)
        shrinkages.append(float(res.shrinkage.max()))
        group_means = np.repeat([0.05, spread + 0.05], 4)
        if spread == 100.0:
            np.testing.assert_allclose(res.baselines.numpy(), group_means, atol=1e-4)
    assert all(a > b for a, b in zip(shrinkages, shrinkages[1:], strict=False))
    assert shrinkages[-1] < 1e-5


def test_shrinkage_stays_in_unit_interval_on_random_batches():
    rng = np.random.default_rng(0)
    for options in ({}, {"tau2": "corrected"}, {"within_variance": "within"}, {"prior": "ema", "half_life": 2.0}):
        est = ebpo.make_estimator("ebpo", **options)
        for step in range(20):
            rewards, ids = random_batch(rng, offset=100 * step)
            s = est(rewards, ids).shrinkage
            assert ((s >= 0) & (s <= 1)).all(), options


@pytest.mark.parametrize("group_size", [2, 4, 8])
def test_theorem_3_3_eb_baseline_has_lower_mse_than_group_mean(group_size):
    """Monte Carlo: θ ~ Beta(2, 3), Bernoulli rewards; the EB baseline is closer to θ than r̄."""
    rng = np.random.default_rng(group_size)
    est = ebpo.make_estimator("ebpo")
    eb_errors, mean_errors = [], []
    for step in range(40):
        theta = rng.beta(2, 3, size=256)
        rewards = (rng.random((256, group_size)) < theta[:, None]).astype(float)
        ids = np.repeat(np.arange(256), group_size)
        res = est(rewards.ravel(), ids)
        eb = res.baselines.double().numpy().reshape(256, group_size)[:, 0]
        if step >= 5:  # after a short burn-in of the running prior
            eb_errors.append(np.mean((eb - theta) ** 2))
            mean_errors.append(np.mean((rewards.mean(1) - theta) ** 2))
    eb_mse, mean_mse = np.mean(eb_errors), np.mean(mean_errors)
    assert eb_mse < mean_mse
    # Theorem 3.3's closed form MSE(V_EB) = (1 − S)σ²/G with the population σ², τ² of Beta(2, 3):
    a, b = 2, 3
    mean = a / (a + b)
    tau2 = a * b / ((a + b) ** 2 * (a + b + 1))
    sigma2 = mean * (1 - mean) - tau2  # E[θ(1−θ)]
    s = (sigma2 / group_size) / (sigma2 / group_size + tau2)
    assert mean_mse == pytest.approx(sigma2 / group_size, rel=0.1)
    # The estimator uses the conservative raw τ² (var of r̄, which includes σ²/G), so it shrinks
    # less than the oracle: its MSE lies between the oracle's and the group mean's.
    assert (1 - s) * sigma2 / group_size * 0.9 < eb_mse


# ---------------------------------------------------------------------- running state
def test_history_after_t_calls_equals_single_computation_on_all_batches():
    rng = np.random.default_rng(1)
    est = ebpo.make_estimator("ebpo", normalize="none")
    all_rewards, all_means = [], []
    for step in range(5):
        rewards, ids = random_batch(rng, num_groups=8, group_size=int(rng.integers(2, 6)), offset=10 * step)
        res = est(rewards, ids)
        all_rewards.extend(rewards.tolist())
        for g in np.unique(ids):
            all_means.append(rewards[ids == g].mean())
    count, mu, m2 = two_pass_moments(all_rewards)
    _, _, means_m2 = two_pass_moments(all_means)
    sigma2, tau2 = m2 / count, means_m2 / len(all_means)
    assert res.metrics["prior_mean"] == pytest.approx(mu, rel=1e-12)
    assert res.metrics["sigma2"] == pytest.approx(sigma2, rel=1e-10)
    assert res.metrics["tau2"] == pytest.approx(tau2, rel=1e-10)
    # and the last call's advantages are the formula applied with those statistics
    n = np.array([np.sum(ids == g) for g in ids], dtype=float)
    group_mean = np.array([rewards[ids == g].mean() for g in ids])
    s = (sigma2 / n) / (sigma2 / n + tau2)
    np.testing.assert_allclose(res.advantages.numpy(), rewards - ((1 - s) * group_mean + s * mu), atol=1e-6)


def test_batch_prior_keeps_no_state_between_calls():
    rng = np.random.default_rng(2)
    est = ebpo.make_estimator("ebpo", prior="batch")
    first, ids = random_batch(rng)
    est(np.ones_like(first), ids)  # a very different batch before
    after_history = est(first, ids)
    fresh = ebpo.make_estimator("ebpo", prior="batch")(first, ids)
    torch.testing.assert_close(after_history.advantages, fresh.advantages, rtol=0, atol=0)
    assert est.state_dict()["global"] == Prior().state_dict()


def test_state_dict_round_trip_reproduces_next_call_bit_for_bit():
    rng = np.random.default_rng(3)
    for name, options in [("ebpo", {}), ("ebpo", {"prior": "ema", "half_life": 3.0}), ("ebpo_bb", {}),
                          ("ebpo", {"per_cluster": True, "min_cluster_groups": 2})]:
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


def test_merge_of_worker_estimators_equals_one_estimator():
    rng = np.random.default_rng(5)
    batches = [random_batch(rng, offset=20 * i) for i in range(6)]
    single, workers = ebpo.make_estimator("ebpo"), [ebpo.make_estimator("ebpo") for _ in range(3)]
    for i, (rewards, ids) in enumerate(batches):
        single(rewards, ids)
        workers[i % 3](rewards, ids)
    merged = workers[0].merge(workers[1]).merge(workers[2])
    for key in ("rewards", "group_means", "group_variances"):
        for stat in ("count", "mean", "m2"):
            assert merged.state_dict()["global"][key][stat] == pytest.approx(single.state_dict()["global"][key][stat], rel=1e-12)


def test_per_cluster_prior_falls_back_to_global_until_cluster_matures():
    est = ebpo.make_estimator("ebpo", per_cluster=True, min_cluster_groups=4, normalize="none")
    easy = ([1, 1, 1, 0] * 2, [0, 0, 0, 0, 1, 1, 1, 1], ["easy"] * 8)
    hard = ([0, 0, 0, 1] * 2, [2, 2, 2, 2, 3, 3, 3, 3], ["hard"] * 8)
    first = est(easy[0] + hard[0], easy[1] + hard[1], clusters=easy[2] + hard[2])
    # 2 groups per cluster < 4: every group shrinks toward the same global mean 0.5
    assert first.metrics["prior_mean"] == pytest.approx(0.5)
    second = est(easy[0] + hard[0], [i + 10 for i in easy[1] + hard[1]], clusters=easy[2] + hard[2])
    # now each cluster has 4 groups: the easy groups' baseline is pulled toward 0.75, not 0.5
    assert second.baselines[0] == pytest.approx(0.75, abs=1e-6)
    assert second.baselines[8] == pytest.approx(0.25, abs=1e-6)


# ---------------------------------------------------------------------- bad input
BAD_CALLS = [
    (dict(rewards=[1.0, 0.0], group_ids=[0]), "group_ids has 1 entries but rewards has 2"),
    (dict(rewards=[[1.0, 0.0]], group_ids=[0]), "rewards must be 1-D"),
    (dict(rewards=[], group_ids=[]), "rewards is empty"),
    (dict(rewards=[1.0, float("nan")], group_ids=[0, 0]), "NaN"),
    (dict(rewards=[1.0, float("inf")], group_ids=[0, 0]), "finite"),
    (dict(rewards=[1.0, 0.0], group_ids=[0, 0], mask=[True]), "mask has 1 entries"),
    (dict(rewards=[1.0, 0.0], group_ids=[0, 0], mask=[0.5, 1.0]), "mask must be boolean"),
    (dict(rewards=[1.0, 0.0], group_ids=np.zeros((2, 1))), "group_ids must be 1-D"),
    (dict(rewards=["a", "b"], group_ids=[0, 0]), "rewards must be numbers"),
    (dict(rewards=[1.0, 0.0], group_ids=[0, 0], clusters=["a", "b"]), "clusters must be constant within a group"),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD_CALLS)
def test_bad_input_raises_and_leaves_state_unchanged(kwargs, message):
    est = ebpo.make_estimator("ebpo")
    est([1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1])
    before = copy.deepcopy(est.state_dict())
    kwargs = dict(kwargs)
    with pytest.raises(ValueError, match=message):
        est(kwargs.pop("rewards"), kwargs.pop("group_ids"), **kwargs)
    assert est.state_dict() == before


def test_ebpo_bb_rejects_rewards_outside_unit_interval():
    est = ebpo.make_estimator("ebpo_bb")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        est([1.0, 2.0], [0, 0])
    assert est.state_dict()["steps"] == 0


def test_per_cluster_requires_clusters():
    with pytest.raises(ValueError, match="clusters is required"):
        ebpo.make_estimator("ebpo", per_cluster=True)([1.0, 0.0], [0, 0])


def test_nan_policy_mask_ignores_nan_rewards():
    est = ebpo.make_estimator("ebpo", nan_policy="mask")
    res = est([1.0, float("nan"), 0.0, 1.0], [0, 0, 1, 1])
    reference = ebpo.make_estimator("ebpo")([1.0, 0.0, 0.0, 1.0], [0, 1, 1, 1], mask=[True, False, True, True])
    torch.testing.assert_close(res.advantages, reference.advantages)
    assert res.advantages[1] == 0


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("nope", {}, "unknown estimator 'nope'"),
        ("ebpo", {"priorr": "history"}, r"unknown option\(s\) \['priorr'\]"),
        ("ebpo", {"prior": "forever"}, "prior must be one of"),
        ("ebpo", {"half_life": 0}, "half_life must be a positive"),
        ("ebpo", {"normalize": "group"}, "normalize must be one of"),
        ("grpo", {"scale": "token"}, "scale must be one of"),
        ("grpo", {"eps": -1.0}, "eps must be a positive"),
        ("ebpo", {"nan_policy": "ignore"}, "nan_policy must be one of"),
        ("ebpo_bb", {"warmup_groups": 0}, "warmup_groups must be a positive integer"),
    ],
)
def test_bad_construction(name, options, message):
    with pytest.raises(ValueError, match=message):
        ebpo.make_estimator(name, **options)


def test_load_state_dict_rejects_foreign_or_corrupt_state():
    est = ebpo.make_estimator("ebpo")
    with pytest.raises(ValueError, match="belongs to estimator 'grpo'"):
        est.load_state_dict({"estimator": "grpo"})
    options = est.state_dict()["options"]
    with pytest.raises(ValueError, match="invalid ebpo state"):
        est.load_state_dict({"estimator": "ebpo", "options": options, "steps": 1, "global": {"rewards": {}}})
    assert est.state_dict()["steps"] == 0


# ---------------------------------------------------------------------- options in the state
def fed(name="ebpo", **options):
    est = ebpo.make_estimator(name, **options)
    est([1.0, 0.0, 1.0, 1.0, 0.0, 0.0], [0, 0, 1, 1, 2, 2], clusters=["a", "a", "b", "b", "a", "a"])
    return est


@pytest.mark.parametrize(
    ("saved", "loading", "message"),
    [
        ({"prior": "ema"}, {"prior": "history"}, r"prior='ema' but this estimator has prior='history'"),
        ({"prior": "history"}, {"prior": "ema"}, r"prior='history' but this estimator has prior='ema'"),
        ({"prior": "ema", "half_life": 3.0}, {"prior": "ema", "half_life": 50.0}, r"half_life=3.0 .* half_life=50.0"),
        ({"per_cluster": True}, {"per_cluster": False}, r"per_cluster=True .* per_cluster=False"),
        ({"prior": "batch"}, {"prior": "history"}, r"prior='batch'"),
    ],
)
def test_load_state_dict_refuses_a_state_saved_with_other_options(saved, loading, message):
    """Issue #10 item 8: an ema state loaded into a history estimator used to be accepted."""
    state = json.loads(json.dumps(fed(**saved).state_dict()))
    est = fed(**loading)
    before = est.state_dict()
    with pytest.raises(ValueError, match=message):
        est.load_state_dict(state)
    assert est.state_dict() == before


@pytest.mark.parametrize(
    ("saved", "loading"),
    [
        ({}, {"normalize": "none", "tau2": "corrected", "within_variance": "within", "prior_mean": "group_means"}),
        ({"prior": "history", "half_life": 3.0}, {"prior": "history", "half_life": 50.0}),  # unused without ema
        ({"per_cluster": True, "min_cluster_groups": 1}, {"per_cluster": True, "min_cluster_groups": 4}),
    ],
)
def test_options_that_only_read_the_statistics_may_differ(saved, loading):
    source = fed(**saved)
    est = ebpo.make_estimator("ebpo", **loading)
    est.load_state_dict(json.loads(json.dumps(source.state_dict())))
    assert est.state_dict()["global"] == source.state_dict()["global"]


#: written by ebpo 0.1.0 (no ``prior_mean`` option yet): ema prior, half-life 3, per-cluster, after
#: the two batches of test_state_saved_by_release_0_1_0_still_loads.
STATE_0_1_0 = json.loads(
    '{"estimator": "ebpo", "options": {"prior": "ema", "half_life": 3.0, "within_variance": "pooled", "tau2": "raw", '
    '"normalize": "batch", "per_cluster": true, "min_cluster_groups": 1, "eps": 1e-06}, "steps": 2, "global": '
    '{"rewards": {"count": 10.349604207872797, "mean": 0.44172243451115334, "m2": 2.3538258221741133}, "group_means": '
    '{"count": 5.174802103936399, "mean": 0.44172243451115334, "m2": 0.6788814967170255}, "group_variances": {"count": '
    '5.174802103936399, "mean": 0.19248326964665402, "m2": 0.2691012721651441}}, "clusters": [["a", {"rewards": {"count": '
    '5.174802103936399, "mean": 0.5766889738044614, "m2": 1.0648413550651838}, "group_means": {"count": 2.5874010519681994, '
    '"mean": 0.5766889738044614, "m2": 0.03438926316256079}, "group_variances": {"count": 2.5874010519681994, "mean": '
    '0.38496653929330804, "m2": 0.07737584211576178}}], ["b", {"rewards": {"count": 3.5874010519681994, "mean": '
    '0.44249333402444213, "m2": 0.8849866680488843}, "group_means": {"count": 1.7937005259840997, "mean": '
    '0.44249333402444213, "m2": 0.44249333402444213}, "group_variances": {"count": 1.7937005259840997, "mean": 0.0, '
    '"m2": 0.0}}], [["t", 1], {"rewards": {"count": 1.5874010519681996, "mean": 0.0, "m2": 0.0}, "group_means": '
    '{"count": 0.7937005259840998, "mean": 0.0, "m2": 0.0}, "group_variances": {"count": 0.7937005259840998, '
    '"mean": 0.0, "m2": 0.0}}]]}'
)


def test_state_saved_by_release_0_1_0_still_loads():
    options = {"prior": "ema", "half_life": 3.0, "per_cluster": True, "min_cluster_groups": 1}
    replayed = ebpo.make_estimator("ebpo", **options)
    replayed([1, 0, 1, 1, 0, 0, 0.5, 1], [0, 0, 1, 1, 2, 2, 3, 3], clusters=["a", "a", "b", "b", ("t", 1), ("t", 1), "a", "a"])
    replayed([1, 0, 0, 0], [5, 5, 6, 6], clusters=["a", "a", "b", "b"])
    loaded = ebpo.make_estimator("ebpo", **options)
    loaded.load_state_dict(STATE_0_1_0)
    expected = json.loads(json.dumps(replayed.state_dict()))
    assert json.loads(json.dumps(loaded.state_dict())) == expected
    assert ("t", 1) in loaded.cluster_priors  # the JSON list came back as the tuple label


def test_merge_refuses_other_estimators_and_options_and_changes_nothing():
    est = fed(prior="ema", half_life=3.0)
    before = est.state_dict()
    for other, message in [
        (None, "merge expects another 'ebpo' estimator, got 'NoneType'"),
        (ebpo.make_estimator("grpo"), "merge expects another 'ebpo' estimator, got 'grpo'"),
        (fed("ebpo_bb"), "got 'ebpo_bb'"),
        (fed(prior="history"), "cannot merge an estimator with prior='history'"),
        (fed(prior="ema", half_life=5.0), "half_life=5.0"),
    ]:
        with pytest.raises(ValueError, match=message):
            est.merge(other)
        assert est.state_dict() == before


def test_merge_that_overflows_changes_nothing():
    est = ebpo.make_estimator("ebpo")
    est([0.0, 1.0, 0.0, 1.0], [0, 0, 1, 1])
    before = est.state_dict()
    other = ebpo.make_estimator("ebpo")  # finite on its own; 4·4/8·(1e154)² overflows once merged
    other(torch.full((4,), 1e154, dtype=torch.float64), [0, 0, 1, 1])
    with pytest.raises(ValueError, match="overflow"):
        est.merge(other)
    assert est.state_dict() == before


# ---------------------------------------------------------------------- overflow never reaches the prior
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


def test_prior_that_would_overflow_is_not_committed():
    """Group statistics fit float64 but the pooled M2 of the running prior does not."""
    est = ebpo.make_estimator("ebpo")
    est([1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1])
    before = est.state_dict()
    rewards = torch.tensor([-1e153, 1e153] * 200, dtype=torch.float64)
    with pytest.raises(ValueError, match="running statistics overflow"):
        est(rewards, np.repeat(np.arange(200), 2))
    assert est.state_dict() == before


@pytest.mark.parametrize("name", ["grpo", "rloo", "dr_grpo", "jspo", "reinforce_pp_baseline", "ebpo"])
def test_advantages_that_do_not_fit_fp16_are_refused(name):
    """Issue #11 item 7: fp16 rewards of ±60000 gave ±inf in rloo."""
    est = ebpo.make_estimator(name, normalize="none") if name == "ebpo" else ebpo.make_estimator(name)
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


# ---------------------------------------------------------------------- prior_mean
def test_prior_mean_group_means_is_the_mean_of_group_means_for_every_prior():
    rewards = [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]  # group 0: 4 responses, group 1: 2
    ids = [0, 0, 0, 0, 1, 1]
    for prior in ("history", "batch", "ema"):
        by_rewards = ebpo.make_estimator("ebpo", prior=prior)(rewards, ids)
        by_means = ebpo.make_estimator("ebpo", prior=prior, prior_mean="group_means")(rewards, ids)
        assert by_rewards.metrics["prior_mean"] == pytest.approx(4 / 6)
        assert by_means.metrics["prior_mean"] == pytest.approx(0.5)
    equal_groups = ([1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1])
    torch.testing.assert_close(
        ebpo.make_estimator("ebpo", prior_mean="group_means")(*equal_groups).advantages,
        ebpo.make_estimator("ebpo")(*equal_groups).advantages,
    )


def test_all_fail_batch_gets_exactly_zero_under_batch_normalisation():
    """The batch-normalisation caveat: when every group fails, centring removes the shared penalty;
    the result must be exactly 0, not amplified rounding residue, and the metrics must say so."""
    est = ebpo.make_estimator("ebpo")
    for step in range(3):
        est([1, 1, 1, 0] * 4, np.repeat(np.arange(4) + 10 * step, 4))
    res = est([0.0] * 16, np.repeat(np.arange(4), 4))
    assert res.advantages.abs().max() == 0
    assert res.metrics["zero_signal_group_frac"] == 1.0
    assert res.metrics["saturated_failure_signal_frac"] == 0.0
    # without normalisation the penalty −S·μ_glob survives
    kept = ebpo.make_estimator("ebpo", normalize="none")
    for step in range(3):
        kept([1, 1, 1, 0] * 4, np.repeat(np.arange(4) + 10 * step, 4))
    assert (kept([0.0] * 16, np.repeat(np.arange(4), 4)).advantages < 0).all()
