"""Clip-Cov (Cui et al., 2025, "The Entropy Mechanism of Reinforcement Learning for Reasoning LMs").

The token selection of verl's ``compute_policy_loss_clip_cov`` (verl 0.9.1,
``verl/trainer/ppo/core_algos.py``), restated here as a pure function:

1. ``ratio = exp(logp − old_logp)``; tokens that the PPO clip already clips
   (``−A·clamp(ratio, 1−ε_low, 1+ε_high) > −A·ratio``) and padding are not candidates.
2. Centred covariance per token: ``cov = (A − mean A) · (logp − mean logp)``, both means over the
   micro-batch's valid tokens (the advantage is broadcast over the completion's tokens).
3. Candidates: ``lb < cov < ub``. Pick ``max(int(ratio · #valid tokens), 1)`` of them uniformly at
   random (fewer if there are fewer candidates).
4. verl multiplies the chosen tokens' policy loss by 0. :class:`EBPOTrainer` instead detaches their
   log-probability inside TRL's loss, which gives the same gradient without copying TRL's loss code
   (the logged loss value still includes them, and with ``beta > 0`` their KL gradient is dropped too).
"""

from __future__ import annotations

import torch

__all__ = ["clip_cov_select"]


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp(min=1)


@torch.no_grad()
def clip_cov_select(
    per_token_logps: torch.Tensor,
    old_per_token_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_cov_ratio: float,
    clip_cov_lb: float,
    clip_cov_ub: float,
    epsilon_low: float,
    epsilon_high: float,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Boolean ``(B, T)`` mask of the tokens whose policy-gradient Clip-Cov switches off.

    Args:
        per_token_logps: ``(B, T)`` log-probabilities under the current policy.
        old_per_token_logps: ``(B, T)`` log-probabilities under the sampling policy.
        advantages: ``(B,)`` per completion or ``(B, T)`` per token.
        mask: ``(B, T)`` 1 for completion tokens that enter the loss.
        clip_cov_ratio: fraction of the valid tokens to pick (> 0).
        clip_cov_lb, clip_cov_ub: open window on the covariance.
        epsilon_low, epsilon_high: PPO clip range, to exclude tokens the clip already handles.
        generator: random source for the pick (a CPU generator; verl uses the global one).
    """
    if clip_cov_ratio <= 0:
        raise ValueError(f"clip_cov_ratio must be positive, got {clip_cov_ratio}")
    logp = per_token_logps.detach().float()
    old = old_per_token_logps.detach().float()
    adv = advantages.detach().float()
    if adv.dim() == 1:
        adv = adv.unsqueeze(1)
    adv = adv.expand_as(logp)
    valid = mask.bool()
    maskf = valid.float()

    ratio = torch.exp(logp - old)
    loss_unclipped = -adv * ratio
    loss_clipped = -adv * torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    clipped_by_ppo = (loss_clipped > loss_unclipped) & valid

    cov = (adv - _masked_mean(adv, maskf)) * (logp - _masked_mean(logp, maskf))
    candidates = valid & ~clipped_by_ppo & (cov > clip_cov_lb) & (cov < clip_cov_ub)

    selected = torch.zeros_like(valid)
    index = candidates.nonzero()
    if len(index) == 0:
        return selected
    num_clip = max(int(clip_cov_ratio * int(valid.sum())), 1)
    perm = torch.randperm(len(index), generator=generator)[: min(num_clip, len(index))].to(
        index.device
    )
    chosen = index[perm]
    selected[chosen[:, 0], chosen[:, 1]] = True
    return selected
