"""OPO against verl's own ``compute_opo_outcome_advantage`` (run, not ported)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ebpo
from tests.estimators.batches import fidelity_batches

core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")


def _verl_opo(rewards, ids, lengths):
    """verl's function on a [N, T] batch whose response i has ``lengths[i]`` tokens (its reward on
    the last one), the per-row advantage read off a token of the response."""
    width = max(int(lengths.max()), 1)
    response_mask = (torch.arange(width)[None, :] < torch.as_tensor(lengths)[:, None]).double()
    token_rewards = torch.zeros(len(rewards), width, dtype=torch.float64)
    last = torch.as_tensor(np.maximum(lengths - 1, 0))
    token_rewards[torch.arange(len(rewards)), last] = torch.as_tensor(rewards, dtype=torch.float64)
    advantages, _ = core_algos.compute_opo_outcome_advantage(
        token_level_rewards=token_rewards, response_mask=response_mask, index=ids
    )
    return advantages, response_mask


def test_opo_equals_verls_function_on_uneven_batches_with_padding_rows():
    est = ebpo.make_estimator("opo")
    rng = np.random.default_rng(0)
    compared = 0
    for rewards, ids, mask in fidelity_batches(seed=9, count=200):
        lengths = rng.integers(1, 12, size=len(rewards))
        if mask is not None:  # verl's padding rows: no token, reward 0, counted in their group
            lengths = np.where(mask, lengths, 0)
            rewards = np.where(mask, rewards, 0.0)
        groups = {g: lengths[ids == g].sum() for g in np.unique(ids)}
        if any(total == 0 for total in groups.values()):  # verl divides 0 by 0 there
            continue
        expected, response_mask = _verl_opo(rewards, np.asarray(ids, dtype=object), lengths)
        res = est(torch.tensor(rewards), ids, token_counts=lengths)
        ours = res.advantages[:, None] * response_mask
        torch.testing.assert_close(ours, expected, rtol=1e-12, atol=1e-12)
        compared += 1
    assert compared > 150


def test_the_baseline_weighs_each_response_by_its_length():
    res = ebpo.make_estimator("opo")([1.0, 0.0, 0.5], [0, 0, 1], token_counts=[3, 1, 7])
    assert res.baselines.tolist() == [0.75, 0.75, 0.0]  # a lone response: baseline 0
    assert res.advantages.tolist() == [0.25, -0.75, 0.5]


def test_a_group_without_tokens_gets_its_plain_mean_and_token_counts_are_required():
    res = ebpo.make_estimator("opo")([1.0, 0.0], [0, 0], token_counts=[0, 0])
    assert res.baselines.tolist() == [0.5, 0.5]
    with pytest.raises(ValueError, match="token_counts is required"):
        ebpo.make_estimator("opo")([1.0, 0.0], [0, 0])
