"""GRPO-BN: GRPO's group-mean baseline with EBPO's batch normalisation (the EBPO authors'
ablation, ``compute_grpo_bn_outcome_advantage`` in their verl fork).

EBPO vs GRPO-BN isolates EBPO's shrinkage (same normalisation, different baseline); GRPO-BN vs
GRPO isolates the normalisation (same baseline, batch instead of group scaling).
"""

from __future__ import annotations

import torch

from ebpo.estimators.base import AdvantageEstimator, Batch
from ebpo.estimators.ebpo import NORMALIZE_MODES
from ebpo.estimators.functional import normalize_advantages
from ebpo.estimators.registry import register_estimator
from ebpo.utils.checks import check_choice

__all__ = ["GRPOBatchNorm"]


@register_estimator("grpo_bn")
class GRPOBatchNorm(AdvantageEstimator):
    """GRPO-BN: ``a = r − r̄_m``, then ``A = (a − mean(a)) / (std(a) + eps)`` over the batch.

    ``r̄_m`` is the mean reward of the response's group; a group with a single response is its
    own baseline (``a = 0``, the authors' convention; verl's GRPO instead uses mean 0, std 1).
    The batch statistics run over every valid response with the unbiased std (see
    :func:`~ebpo.estimators.functional.normalize_advantages`).

    Args:
        normalize: ``"batch"`` (default, the authors' ``norm_adv_by_std_in_grpo=True``),
            ``"center"`` (``A = a − mean(a)``, their ``norm_adv_by_std_in_grpo=False``) or
            ``"none"`` (``A = a``: Dr. GRPO with lone responses at 0). The same option as EBPO's.
    """

    def __init__(
        self, *, normalize: str = "batch", eps: float = 1e-6, nan_policy: str = "raise"
    ) -> None:
        super().__init__(eps=eps, nan_policy=nan_policy)
        self.normalize = check_choice("normalize", normalize, NORMALIZE_MODES)

    def _compute(self, batch: Batch, *, update: bool):
        baseline = batch.per_row(batch.group_mean)
        raw = batch.rewards - baseline
        advantage = normalize_advantages(raw, batch.weight, self.normalize, self.eps)
        return baseline, advantage, torch.zeros_like(raw), {}
