"""The group-relative baselines EBPO is compared with: GRPO, Dr. GRPO, RLOO, REINFORCE++, JSPO.

All are stateless: each call sees only its own batch. Notation: group ``m`` has ``n_m`` valid
responses with rewards ``r_{m,i}``, mean ``r̄_m`` and unbiased variance ``s²_m``.
"""

from __future__ import annotations

import torch

from ebpo.estimators.base import AdvantageEstimator, Batch, _check_choice, register_estimator
from ebpo.functional import leave_one_out_mean, masked_std, normalize_advantages

__all__ = ["GRPO", "DrGRPO", "RLOO", "ReinforcePlusPlusBaseline", "JSPO"]

GRPO_SCALES = ("group", "batch", "none")


@register_estimator("grpo")
class GRPO(AdvantageEstimator):
    """GRPO (Shao et al., 2024): ``A = (r − r̄_m) / (std_m + eps)``.

    Args:
        scale: ``"group"`` divides by the group's unbiased std (verl, DeepSeekMath); ``"batch"`` by
            the unbiased std of all rewards of the batch (TRL's ``scale_rewards="batch"``);
            ``"none"`` does not divide (Dr. GRPO).

    A singleton group follows verl's convention: mean 0 and std 1, so its advantage is
    ``r / (1 + eps)``.
    """

    def __init__(self, *, scale: str = "group", eps: float = 1e-6, nan_policy: str = "raise") -> None:
        super().__init__(eps=eps, nan_policy=nan_policy)
        _check_choice("scale", scale, GRPO_SCALES)
        self.scale = scale

    def _compute(self, batch: Batch, *, update: bool):
        singleton = batch.group_count <= 1
        baseline = batch.per_row(_group_mean_baseline(batch))
        centred = batch.rewards - baseline
        if self.scale == "group":
            group_std = torch.where(singleton, torch.ones_like(batch.group_variance), batch.group_variance.sqrt())
            advantage = centred / (batch.per_row(group_std) + self.eps)
        elif self.scale == "batch":
            advantage = centred / (masked_std(batch.rewards, batch.weight) + self.eps)
        else:
            advantage = centred
        return baseline, advantage, torch.zeros_like(advantage), {}


@register_estimator("dr_grpo")
class DrGRPO(GRPO):
    """Dr. GRPO (Liu et al., 2025): GRPO without the std division, ``A = r − r̄_m``."""

    def __init__(self, *, scale: str = "none", eps: float = 1e-6, nan_policy: str = "raise") -> None:
        super().__init__(scale=scale, eps=eps, nan_policy=nan_policy)


@register_estimator("rloo")
class RLOO(AdvantageEstimator):
    """REINFORCE leave-one-out (Ahmadian et al., 2024): ``A = r_i − mean_{j≠i} r_j``.

    A singleton group has no other response: its baseline is 0 (verl's convention).
    """

    def _compute(self, batch: Batch, *, update: bool):
        baseline = leave_one_out_mean(batch.rewards, batch.group_index, batch.group_count, batch.group_mean)
        return baseline, batch.rewards - baseline, torch.zeros_like(baseline), {}


@register_estimator("reinforce_pp_baseline")
class ReinforcePlusPlusBaseline(AdvantageEstimator):
    """REINFORCE++ with a group baseline (Hu, 2025): subtract ``r̄_m``, then whiten over the batch.

    ``A = (a − mean(a)) / (std(a) + eps)`` with ``a = r − r̄_m`` over all valid responses. This is also
    the revision's "GRPO + batch normalisation" ablation: EBPO with no shrinkage. verl whitens over
    tokens (long responses weigh more); here every response weighs one.
    """

    def _compute(self, batch: Batch, *, update: bool):
        baseline = batch.per_row(_group_mean_baseline(batch))
        advantage = normalize_advantages(batch.rewards - baseline, batch.weight, "batch", self.eps)
        return baseline, advantage, torch.zeros_like(baseline), {}


@register_estimator("jspo")
class JSPO(AdvantageEstimator):
    """James–Stein shrinkage baseline (Zeng, Zhou, Arora, Zanette, 2025), batch statistics only.

    For response ``i`` of prompt ``m`` (``n = n_m`` valid responses, ``K`` non-empty groups):

        b_{m,i} = (1 − λ_m) · mean_{j≠i} r_{m,j}  +  λ_m · μ_{−m},
        λ_m     = ((n − 1)/n) · v_{−m} / (v_{−m} + s_{−m}),

    where, over the OTHER prompts ``k ≠ m``: ``μ_{−m}`` is the mean of their group means,
    ``v_{−m}`` the mean of ``s²_k / n_k`` and ``s_{−m}`` the (population) variance of their group
    means. Leaving out response ``i`` and prompt ``m`` keeps the baseline independent of ``r_{m,i}``,
    so the policy gradient stays unbiased. Advantage ``A = r − b``, no std normalisation.

    Edge cases: with no other prompt (``K = 1``) ``λ = 0`` (plain RLOO); a singleton group has no
    leave-one-out mean and ``λ = 0`` by the formula, so its baseline is 0 as in RLOO; when
    ``v + s ≤ eps`` ``λ = (n − 1)/n`` (nothing separates the prompts).
    """

    def _compute(self, batch: Batch, *, update: bool):
        nonempty = batch.nonempty.to(torch.float64)
        n = batch.group_count
        num_groups = nonempty.sum()
        others = (num_groups - nonempty).clamp(min=1)  # number of OTHER non-empty groups
        mean_noise = torch.where(n > 0, batch.group_variance / n.clamp(min=1), torch.zeros_like(n))

        sum_means = (batch.group_mean * nonempty).sum()
        sum_means_sq = (batch.group_mean**2 * nonempty).sum()
        sum_noise = (mean_noise * nonempty).sum()
        others_mean = (sum_means - batch.group_mean * nonempty) / others
        others_mean_sq = (sum_means_sq - batch.group_mean**2 * nonempty) / others
        others_var = (others_mean_sq - others_mean**2).clamp(min=0)
        others_noise = (sum_noise - mean_noise * nonempty) / others

        denominator = others_noise + others_var
        # As in EBPO, a denominator within eps of 0 means nothing separates the prompts (and
        # guards against the rounding residue of the leave-one-out variance).
        ratio = torch.where(denominator > self.eps, others_noise / denominator.clamp(min=self.eps), torch.ones_like(n))
        has_others = (num_groups - nonempty) > 0
        lam = torch.where(has_others & (n > 0), (n - 1) / n.clamp(min=1) * ratio, torch.zeros_like(n))

        loo = leave_one_out_mean(batch.rewards, batch.group_index, batch.group_count, batch.group_mean)
        lam_row = batch.per_row(lam)
        baseline = (1 - lam_row) * loo + lam_row * batch.per_row(others_mean)
        return baseline, batch.rewards - baseline, lam_row, {"jspo_lambda_mean": _mean_over_groups(lam, batch)}


def _group_mean_baseline(batch: Batch) -> torch.Tensor:
    """``[K]`` group means, 0 for singleton groups (verl's convention: mean 0, std 1)."""
    return torch.where(batch.group_count <= 1, torch.zeros_like(batch.group_mean), batch.group_mean)


def _mean_over_groups(per_group: torch.Tensor, batch: Batch) -> float:
    nonempty = batch.nonempty
    return float(per_group[nonempty].mean()) if nonempty.any() else 0.0
