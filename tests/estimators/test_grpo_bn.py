"""GRPO-BN against the port of the EBPO authors' ``compute_grpo_bn_outcome_advantage``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ebpo
from tests.estimators.batches import assert_valid_rows_equal, fidelity_batches
from tests.estimators.comparator_references import authors_grpo_bn


def _valid_rows(rewards, ids, mask):
    keep = np.ones(len(rewards), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    return keep, np.asarray(rewards)[keep], np.asarray(ids)[keep]


@pytest.mark.parametrize(("normalize", "norm_adv_by_std"), [("batch", True), ("center", False)])
def test_grpo_bn_equals_the_authors_function_on_uneven_batches(normalize, norm_adv_by_std):
    est = ebpo.make_estimator("grpo_bn", normalize=normalize)
    compared = 0
    for rewards, ids, mask in fidelity_batches(seed=3):
        keep, kept_rewards, kept_ids = _valid_rows(rewards, ids, mask)
        if keep.sum() < 2:  # their unbiased std of one row is NaN
            continue
        res = est(torch.tensor(rewards), ids, mask=mask)
        # The authors' function has no mask: it sees the valid rows only.
        expected = authors_grpo_bn(kept_rewards, kept_ids, norm_adv_by_std_in_grpo=norm_adv_by_std)
        assert_valid_rows_equal(res.advantages, keep, expected)
        compared += 1
    assert compared > 250


def test_a_lone_response_is_its_own_baseline_unlike_grpo():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    ids = [0, 0, 0, 1]  # group 1 is a lone response
    res = ebpo.make_estimator("grpo_bn", normalize="none")(rewards, ids)
    assert res.baselines.tolist() == [1 / 3, 1 / 3, 1 / 3, 1.0]
    assert res.advantages[3] == 0.0
    # verl's GRPO gives a lone response mean 0, std 1
    assert ebpo.make_estimator("grpo")(rewards, ids).advantages[3] > 0.99


def test_grpo_bn_differs_from_reinforce_pp_only_on_lone_responses():
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    even = [0, 0, 1, 1, 2, 2]
    bn, rpp = ebpo.make_estimator("grpo_bn"), ebpo.make_estimator("reinforce_pp_baseline")
    torch.testing.assert_close(bn(rewards, even).advantages, rpp(rewards, even).advantages)
    lone = [0, 0, 1, 1, 2, 3]
    assert not torch.allclose(bn(rewards, lone).advantages, rpp(rewards, lone).advantages)


def test_grpo_bn_refuses_an_unknown_normalisation_in_one_line():
    with pytest.raises(ValueError, match=r"normalize must be one of \['batch', 'center', 'none'\]"):
        ebpo.make_estimator("grpo_bn", normalize="group")
