"""EBPO-BB (Beta-Binomial prior): against the reference, the posterior-mean form, the fallback to
Beta(1, 1), and its reward range."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ebpo
from tests import reference
from tests.estimators.batches import as_tensor, batches, check


@settings(max_examples=50, deadline=None)
@given(
    st.lists(batches(unit_interval=True), min_size=1, max_size=4),
    st.sampled_from(["history", "batch"]),
    st.integers(1, 6),
)
def test_ebpo_bb_matches_reference(stream, prior, warmup_groups):
    est = ebpo.make_estimator("ebpo_bb", prior=prior, warmup_groups=warmup_groups)
    ref = reference.ReferenceEBPO(prior=prior, beta_binomial=True, warmup_groups=warmup_groups)
    for rewards, ids, mask, _ in stream:
        res = est(as_tensor(rewards), ids, mask=mask)
        adv, base, shrink, _ = ref(rewards, ids, mask)
        check(res.advantages, adv)
        check(res.baselines, base)
        check(res.shrinkage, shrink)


def test_ebpo_bb_posterior_mean_form():
    """After warm-up the baseline is (α + s)/(α + β + n) with α, β from the method of moments."""
    est = ebpo.make_estimator("ebpo_bb", warmup_groups=1, normalize="none")
    rewards = [1, 1, 0, 0, 1, 0, 0, 0, 1, 1, 1, 0]
    ids = [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    res = est(rewards, ids)
    means = np.array([0.5, 0.25, 0.75])
    m, v = means.mean(), means.var()
    c = m * (1 - m) / v - 1
    alpha, beta = m * c, (1 - m) * c
    expected = [
        (alpha + 2) / (alpha + beta + 4),
        (alpha + 1) / (alpha + beta + 4),
        (alpha + 3) / (alpha + beta + 4),
    ]
    np.testing.assert_allclose(res.baselines.numpy()[[0, 4, 8]], expected, rtol=1e-6)


def test_ebpo_bb_falls_back_to_uniform_prior_on_the_boundary():
    """Group means all 0 or 1 give v = m(1 − m) exactly: no Beta distribution, so Beta(1, 1),
    whatever rounding the running moments introduce."""
    rewards = [0.0] * 24 + [0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    ids = [0] * 24 + [1, 2, 3, 3, 4, 3, 5, 6]
    res = ebpo.make_estimator("ebpo_bb", warmup_groups=1)(as_tensor(rewards), ids)
    assert res.metrics["beta_alpha"] == 1.0 and res.metrics["beta_beta"] == 1.0
    assert res.shrinkage[0] == pytest.approx(2 / 26)


def test_ebpo_bb_rejects_rewards_outside_unit_interval():
    est = ebpo.make_estimator("ebpo_bb")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        est([1.0, 2.0], [0, 0])
    assert est.state_dict()["steps"] == 0
