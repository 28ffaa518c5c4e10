"""The group-relative baselines EBPO is compared with: GRPO, Dr. GRPO, RLOO, REINFORCE++, JSPO.

All are stateless: each call sees only its own batch. Notation: group ``m`` has ``n_m`` valid
responses with rewards ``r_{m,i}``, mean ``r̄_m`` and unbiased variance ``s²_m``.
"""

from __future__ import annotations

import torch

from ebpo.estimators.base import AdvantageEstimator, Batch, _check_choice, register_estimator
from ebpo.functional import (
    leave_one_group_out_moments,
    leave_one_out_mean,
    masked_std,
    normalize_advantages,
)

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


JSPO_LAMBDA_FORMS = ("released_code", "project_page")


@register_estimator("jspo")
class JSPO(AdvantageEstimator):
    """James–Stein shrinkage baseline (Zeng, Zhou, Arora, Zanette, 2025, "Shrinking the Variance",
    arXiv 2511.03710), batch statistics only.

    For response ``k`` of prompt ``i`` (``m_i`` valid responses; ``K`` prompts with a valid
    response in the batch):

        b_{i,k} = (1 − λ_i) · mean_{l≠k} r_{i,l}  +  λ_i · μ_{−i},      A_{i,k} = r_{i,k} − b_{i,k},

    where, over the OTHER prompts ``j ≠ i``: ``μ_{−i}`` is the mean of their group means,
    ``s_{−i}`` the population variance of their group means, and ``v_{−i}`` the mean of
    ``s²_j / m_j`` (unbiased group variance over group size) over those with ``m_j ≥ 2``. Then

    * ``lambda_form="released_code"`` (default; the authors' ``compute_jspo_outcome_advantage``
      as described in issue #10): ``λ_i = v_{−i} / (v_{−i} + s_{−i} + eps)``, eps = 1e-6 there;
    * ``lambda_form="project_page"``: ``λ_i = ((K − 1)/K) · v_{−i} / (v_{−i} + s_{−i} + eps)``,
      the formula of the project page, with ``K`` the number of PROMPTS in the batch.

    When ``v + s`` is ~0 this gives ``λ ≈ 0``: plain RLOO. Leaving out response ``k`` and prompt
    ``i`` keeps the baseline independent of ``r_{i,k}``: the policy gradient stays unbiased. No
    std normalisation.

    Our conventions where the formula is undefined (the authors' code assumes every prompt has
    the same number ≥ 2 of responses; we could not obtain it to check): a prompt with a single
    valid response has no leave-one-out mean, so its baseline is ``μ_{−i}`` (reported λ = 1); a
    prompt's singleton-ness also keeps it out of ``v`` (it has no variance estimate) but not out
    of ``μ`` and ``s``; with no other prompt (``K = 1``) ``λ = 0`` and a singleton's baseline is
    0 (RLOO's convention). Masked rows are dropped before anything is counted.
    """

    def __init__(self, *, lambda_form: str = "released_code", eps: float = 1e-6, nan_policy: str = "raise") -> None:
        super().__init__(eps=eps, nan_policy=nan_policy)
        _check_choice("lambda_form", lambda_form, JSPO_LAMBDA_FORMS)
        self.lambda_form = lambda_form

    def _compute(self, batch: Batch, *, update: bool):
        n = batch.group_count
        prompts = batch.nonempty
        multi = n > 1
        # μ_{−i}, s_{−i} over the other prompts' means; v_{−i} over the other prompts' s²/m.
        other_prompts, others_mean, others_var = leave_one_group_out_moments(batch.group_mean, prompts)
        noise = torch.where(multi, batch.group_variance / n.clamp(min=1), torch.zeros_like(n))
        _, others_noise, _ = leave_one_group_out_moments(noise, multi)

        lam = others_noise / (others_noise + others_var + self.eps)
        if self.lambda_form == "project_page":
            num_prompts = prompts.sum().to(n.dtype)
            lam = lam * (num_prompts - 1) / num_prompts.clamp(min=1)
        has_others = other_prompts > 0
        lam = torch.where(has_others, torch.where(multi, lam, torch.ones_like(lam)), torch.zeros_like(lam))
        lam = torch.where(prompts, lam, torch.zeros_like(lam))

        loo = leave_one_out_mean(batch.rewards, batch.group_index, batch.group_count, batch.group_mean)
        lam_row = batch.per_row(lam)
        baseline = (1 - lam_row) * loo + lam_row * batch.per_row(torch.where(has_others, others_mean, torch.zeros_like(n)))
        return baseline, batch.rewards - baseline, lam_row, {"jspo_lambda_mean": _mean_over_groups(lam, batch)}


def _group_mean_baseline(batch: Batch) -> torch.Tensor:
    """``[K]`` group means, 0 for singleton groups (verl's convention: mean 0, std 1)."""
    return torch.where(batch.group_count <= 1, torch.zeros_like(batch.group_mean), batch.group_mean)


def _mean_over_groups(per_group: torch.Tensor, batch: Batch) -> float:
    nonempty = batch.nonempty
    return float(per_group[nonempty].mean()) if nonempty.any() else 0.0
