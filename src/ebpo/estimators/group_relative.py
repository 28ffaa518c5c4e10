"""The group-relative baselines: GRPO, Dr. GRPO, RLOO, REINFORCE++ with a group baseline.

Each is stateless: a call sees only its own batch, and a group's baseline comes from the rewards of
the same group. (JSPO and JSPO++, which also shrink toward the other prompts' mean, are in
:mod:`ebpo.estimators.james_stein`.) Notation: group ``m`` has ``n_m`` valid responses with rewards
``r_{m,i}``, mean ``r̄_m`` and unbiased variance ``s²_m``.
"""

from __future__ import annotations

import torch

from ebpo.estimators.base import AdvantageEstimator, Batch
from ebpo.estimators.functional import (
    leave_one_out_mean,
    masked,
    masked_std,
    normalize_advantages,
    token_whiten,
)
from ebpo.estimators.registry import register_estimator
from ebpo.utils.checks import check_choice

__all__ = ["GRPO", "DrGRPO", "RLOO", "ReinforcePlusPlusBaseline"]

GRPO_SCALES = ("group", "batch", "none")
WHITEN_MODES = ("responses", "tokens")


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

    def __init__(
        self, *, scale: str = "group", eps: float = 1e-6, nan_policy: str = "raise"
    ) -> None:
        super().__init__(eps=eps, nan_policy=nan_policy)
        self.scale = check_choice("scale", scale, GRPO_SCALES)

    def _compute(self, batch: Batch, *, update: bool):
        singleton = batch.group_count <= 1
        baseline = batch.per_row(_group_mean_baseline(batch))
        centred = batch.rewards - baseline
        if self.scale == "group":
            group_std = torch.where(
                singleton, torch.ones_like(batch.group_variance), batch.group_variance.sqrt()
            )
            advantage = centred / (batch.per_row(group_std) + self.eps)
        elif self.scale == "batch":
            advantage = centred / (masked_std(batch.rewards, batch.weight) + self.eps)
        else:
            advantage = centred
        return baseline, advantage, torch.zeros_like(advantage), {}


@register_estimator("dr_grpo")
class DrGRPO(GRPO):
    """Dr. GRPO (Liu et al., 2025): GRPO without the std division, ``A = r − r̄_m``."""

    def __init__(
        self, *, scale: str = "none", eps: float = 1e-6, nan_policy: str = "raise"
    ) -> None:
        super().__init__(scale=scale, eps=eps, nan_policy=nan_policy)


@register_estimator("rloo")
class RLOO(AdvantageEstimator):
    """REINFORCE leave-one-out (Ahmadian et al., 2024): ``A = r_i − mean_{j≠i} r_j``.

    A singleton group has no other response: its baseline is 0 (verl's convention).
    """

    def _compute(self, batch: Batch, *, update: bool):
        baseline = leave_one_out_mean(
            batch.rewards, batch.group_index, batch.group_count, batch.group_mean
        )
        return baseline, batch.rewards - baseline, torch.zeros_like(baseline), {}


@register_estimator("reinforce_pp_baseline")
class ReinforcePlusPlusBaseline(AdvantageEstimator):
    """REINFORCE++ with a group baseline (Hu, 2025): subtract ``r̄_m``, then whiten over the batch.

    Args:
        whiten: ``"responses"`` (default): ``A = (a − mean(a)) / (std(a) + eps)`` with
            ``a = r − r̄_m`` over all valid responses, each weighing one (the revision's "GRPO +
            batch normalisation" ablation: EBPO with no shrinkage). ``"tokens"``: as verl's
            ``reinforce_plus_plus_baseline`` (``compute_reinforce_plus_plus_baseline_outcome_advantage``),
            which whitens ``a`` broadcast over the response tokens with ``masked_whiten``: mean
            weighted by each response's token count, unbiased variance over the tokens,
            ``A = (a − mean) / sqrt(var + 1e-8)`` (verl's constant; ``eps`` is not used); see
            :func:`~ebpo.estimators.functional.token_whiten`. It needs ``token_counts`` in every
            call (verl: ``response_mask.sum(-1)``). The variant ``reinforce_pp_verl`` selects it.

    A singleton group's baseline is 0 (verl's convention). To reproduce verl's function row for
    row, pass its padding rows (an all-zero response mask) unmasked with a token count of 0: verl
    counts them in their group's mean (and size), and leaves them out of the whitening only.
    """

    def __init__(
        self, *, whiten: str = "responses", eps: float = 1e-6, nan_policy: str = "raise"
    ) -> None:
        super().__init__(eps=eps, nan_policy=nan_policy)
        self.whiten = check_choice("whiten", whiten, WHITEN_MODES)

    @property
    def uses_token_counts(self) -> bool:
        """True with ``whiten="tokens"``."""
        return self.whiten == "tokens"

    def _compute(self, batch: Batch, *, update: bool):
        baseline = batch.per_row(_group_mean_baseline(batch))
        raw = batch.rewards - baseline
        if self.whiten == "tokens":
            assert batch.token_counts is not None  # prepare() requires them (uses_token_counts)
            advantage = masked(token_whiten(raw, batch.token_counts), batch.weight)
        else:
            advantage = normalize_advantages(raw, batch.weight, "batch", self.eps)
        return baseline, advantage, torch.zeros_like(baseline), {}


def _group_mean_baseline(batch: Batch) -> torch.Tensor:
    """``[K]`` group means, 0 for singleton groups (verl's convention: mean 0, std 1)."""
    return torch.where(batch.group_count <= 1, torch.zeros_like(batch.group_mean), batch.group_mean)


# Named methods (the estimator with options): the REINFORCE++ whitening over responses, and as verl.
register_estimator("reinforce_pp")(ReinforcePlusPlusBaseline)
register_estimator("reinforce_pp_verl", {"whiten": "tokens"})(ReinforcePlusPlusBaseline)
