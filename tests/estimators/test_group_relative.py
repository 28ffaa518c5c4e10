"""GRPO, Dr. GRPO, RLOO and REINFORCE++ against the slow per-group references in
tests/reference.py, on random batches: shuffled rows, unequal group sizes, masks, singletons,
continuous rewards, string ids."""

from __future__ import annotations

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
