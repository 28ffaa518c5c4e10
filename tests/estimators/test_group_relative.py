"""GRPO, Dr. GRPO, RLOO and REINFORCE++ (whitened over responses, and over tokens as verl) against
the slow per-group references in tests/reference.py, on random batches: shuffled rows, unequal
group sizes, masks, singletons, continuous rewards, string ids."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import ebpo
from tests import reference
from tests.estimators.batches import as_tensor, batches, check


@settings(max_examples=60, deadline=None)
@given(batches(), st.sampled_from(["group", "batch", "none"]))
def test_grpo_matches_reference(batch, scale):
    rewards, ids, mask, _ = batch
    res = ebpo.make_estimator("grpo", scale=scale)(as_tensor(rewards), ids, mask=mask)
    adv, base = reference.grpo(rewards, ids, mask, scale=scale)
    check(res.advantages, adv)
    check(res.baselines, base)


@settings(max_examples=30, deadline=None)
@given(batches())
def test_dr_grpo_is_grpo_without_scaling(batch):
    rewards, ids, mask, _ = batch
    res = ebpo.make_estimator("dr_grpo")(as_tensor(rewards), ids, mask=mask)
    check(res.advantages, reference.grpo(rewards, ids, mask, scale="none")[0])


@settings(max_examples=60, deadline=None)
@given(batches())
def test_rloo_matches_reference(batch):
    rewards, ids, mask, _ = batch
    res = ebpo.make_estimator("rloo")(as_tensor(rewards), ids, mask=mask)
    adv, base = reference.rloo(rewards, ids, mask)
    check(res.advantages, adv)
    check(res.baselines, base)


@settings(max_examples=60, deadline=None)
@given(batches())
def test_reinforce_pp_baseline_matches_reference(batch):
    rewards, ids, mask, _ = batch
    res = ebpo.make_estimator("reinforce_pp_baseline")(as_tensor(rewards), ids, mask=mask)
    adv, base = reference.reinforce_pp(rewards, ids, mask)
    check(res.advantages, adv)
    check(res.baselines, base)


@st.composite
def with_token_counts(draw):
    rewards, ids, mask, _ = draw(batches())
    counts = draw(st.lists(st.integers(0, 6), min_size=len(rewards), max_size=len(rewards)))
    return rewards, ids, mask, counts


@settings(max_examples=80, deadline=None)
@given(with_token_counts())
def test_reinforce_pp_whitened_over_tokens_matches_reference(batch):
    """Issue #21 item 13: whiten="tokens" is verl's masked_whiten over the response tokens (the
    reference repeats each response once per token)."""
    rewards, ids, mask, counts = batch
    est = ebpo.make_estimator("reinforce_pp_baseline", whiten="tokens")
    res = est(as_tensor(rewards), ids, mask=mask, token_counts=counts)
    adv, base = reference.reinforce_pp_tokens(rewards, ids, counts, mask)
    check(res.advantages, adv)
    check(res.baselines, base)


def test_reinforce_pp_whiten_modes_differ_when_lengths_differ():
    rewards, ids = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0], [0, 0, 0, 1, 1, 2]
    by_response = ebpo.make_estimator("reinforce_pp_baseline")(rewards, ids)
    equal = ebpo.make_variant("reinforce_pp_verl")(rewards, ids, token_counts=[5] * 6)
    uneven = ebpo.make_variant("reinforce_pp_verl")(rewards, ids, token_counts=[1, 9, 2, 7, 3, 4])
    # Equal lengths c: the token mean is the response mean, and the variances differ only by
    # Bessel's correction over L = c·N tokens instead of N responses (plus eps vs 1e-8).
    n, c = 6, 5
    factor = ((c * n - 1) / (c * (n - 1))) ** 0.5
    torch.testing.assert_close(equal.advantages, by_response.advantages * factor, atol=1e-5, rtol=0)
    assert (uneven.advantages - by_response.advantages).abs().max() > 0.1


def test_reinforce_pp_verl_needs_token_counts_and_the_others_ignore_them():
    est = ebpo.make_variant("reinforce_pp_verl")
    assert est.uses_token_counts and est.whiten == "tokens"
    with pytest.raises(ValueError, match=r"token_counts is required .*whiten='tokens'"):
        est([1.0, 0.0], [0, 0])
    for name in ebpo.available_estimators():
        plain = ebpo.make_estimator(name)
        if name == "opo":  # it always weighs by tokens: tests/estimators/test_opo.py
            assert plain.uses_token_counts
            continue
        assert not plain.uses_token_counts
        keys = {"prompt_keys": [0, 0, 1, 1]}  # SPO's
        a = plain([1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1], **keys).advantages
        b = ebpo.make_estimator(name)(
            [1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1], token_counts=[3, 1, 4, 1], **keys
        )
        assert torch.equal(a, b.advantages), name
