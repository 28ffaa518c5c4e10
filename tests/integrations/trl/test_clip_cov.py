"""Clip-Cov token selection: its definition, and gradient equality with verl's implementation."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("trl")

from ebpo.integrations.trl import clip_cov_select  # noqa: E402

pytestmark = pytest.mark.trl

EPS_LOW, EPS_HIGH = 0.2, 0.28


def batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(6, 10, generator=g) * 4
    # Most tokens near the old policy, a few far away so that the PPO clip is active on some.
    old = logp + 0.05 * torch.randn(6, 10, generator=g)
    old[0, :3] = logp[0, :3] - 1.0
    old[3, 5:] = logp[3, 5:] + 1.0
    advantages = torch.tensor([1.5, -1.0, 0.7, -2.0, 0.0, 1.1])
    mask = torch.ones(6, 10)
    mask[2, 7:] = 0
    mask[5, 4:] = 0
    return logp, old, advantages, mask


def reference_candidates(logp, old, advantages, mask, lb, ub):
    """The definition, written out token by token."""
    adv = advantages[:, None].expand_as(logp)
    n = mask.sum()
    mean_adv = (adv * mask).sum() / n
    mean_logp = (logp * mask).sum() / n
    out = torch.zeros_like(mask, dtype=torch.bool)
    for i in range(logp.shape[0]):
        for t in range(logp.shape[1]):
            if not mask[i, t]:
                continue
            ratio = torch.exp(logp[i, t] - old[i, t])
            unclipped = -adv[i, t] * ratio
            clipped = -adv[i, t] * ratio.clamp(1 - EPS_LOW, 1 + EPS_HIGH)
            if clipped > unclipped:
                continue
            cov = (adv[i, t] - mean_adv) * (logp[i, t] - mean_logp)
            out[i, t] = lb < cov < ub
    return out


def select(logp, old, advantages, mask, ratio, lb, ub, seed=0):
    return clip_cov_select(
        logp,
        old,
        advantages,
        mask,
        clip_cov_ratio=ratio,
        clip_cov_lb=lb,
        clip_cov_ub=ub,
        epsilon_low=EPS_LOW,
        epsilon_high=EPS_HIGH,
        generator=torch.Generator().manual_seed(seed),
    )


def test_selects_a_random_ratio_of_the_candidates_only():
    logp, old, advantages, mask = batch()
    lb, ub = 0.2, 3.0
    candidates = reference_candidates(logp, old, advantages, mask, lb, ub)
    assert 3 < int(candidates.sum()) < int(mask.sum())  # the window is a real subset

    everything = select(logp, old, advantages, mask, 1.0, lb, ub)
    assert torch.equal(everything, candidates)

    ratio = 0.05  # int(0.05 * 54 valid tokens) = 2
    picked = select(logp, old, advantages, mask, ratio, lb, ub, seed=1)
    assert int(picked.sum()) == max(int(ratio * mask.sum()), 1) == 2
    assert not (picked & ~candidates).any()
    assert torch.equal(picked, select(logp, old, advantages, mask, ratio, lb, ub, seed=1))  # seeded
    draws = {
        tuple(
            select(logp, old, advantages, mask, ratio, lb, ub, seed=s).nonzero().flatten().tolist()
        )
        for s in range(20)
    }
    assert len(draws) > 1  # random pick, not the first candidates

    # at least one token even when ratio * #tokens < 1 (verl: max(int(...), 1))
    assert int(select(logp, old, advantages, mask, 1e-6, lb, ub).sum()) == 1
    # empty window: nothing
    assert not select(logp, old, advantages, mask, 1.0, 50.0, 60.0).any()


def test_per_token_advantages_match_broadcast_ones():
    logp, old, advantages, mask = batch(3)
    per_token = advantages[:, None].expand_as(logp).clone()
    assert torch.equal(
        select(logp, old, advantages, mask, 1.0, 0.1, 4.0),
        select(logp, old, per_token, mask, 1.0, 0.1, 4.0),
    )


def test_bad_ratio_raises():
    logp, old, advantages, mask = batch()
    with pytest.raises(ValueError, match="clip_cov_ratio"):
        select(logp, old, advantages, mask, 0.0, 1.0, 5.0)


@pytest.mark.slow
@pytest.mark.verl
def test_gradient_equals_verl_compute_policy_loss_clip_cov():
    """Detaching the chosen log-probs in a token-mean PPO loss = verl's Clip-Cov policy loss."""
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
    logp0, old, advantages, mask = batch(5)
    lb, ub = 0.2, 3.0
    adv_tokens = advantages[:, None].expand_as(logp0).clone()

    verl_logp = logp0.clone().requires_grad_(True)
    verl_config = SimpleNamespace(
        policy_loss=SimpleNamespace(clip_cov_ratio=1.0, clip_cov_lb=lb, clip_cov_ub=ub),
        clip_ratio=EPS_LOW,
        clip_ratio_low=EPS_LOW,
        clip_ratio_high=EPS_HIGH,
        global_batch_info={},
    )
    verl_loss, _ = core_algos.compute_policy_loss_clip_cov(
        old, verl_logp, adv_tokens, mask, loss_agg_mode="token-mean", config=verl_config
    )
    verl_loss.backward()

    ours = logp0.clone().requires_grad_(True)
    chosen = select(ours, old, advantages, mask, 1.0, lb, ub)
    logp = torch.where(chosen, ours.detach(), ours)
    ratio = torch.exp(logp - old)
    per_token = -torch.min(ratio * adv_tokens, ratio.clamp(1 - EPS_LOW, 1 + EPS_HIGH) * adv_tokens)
    ((per_token * mask).sum() / mask.sum()).backward()

    assert chosen.any() and (verl_logp.grad != 0).any()
    torch.testing.assert_close(ours.grad, verl_logp.grad)
