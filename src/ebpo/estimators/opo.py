"""OPO (Hao et al., 2025, "On-Policy RL with Optimal Reward Baseline"): the length-weighted group
baseline, as verl's ``compute_opo_outcome_advantage``."""

from __future__ import annotations

import torch

from ebpo.estimators.base import AdvantageEstimator, Batch
from ebpo.estimators.registry import register_estimator

__all__ = ["OPO"]


@register_estimator("opo")
class OPO(AdvantageEstimator):
    """OPO: ``A = r − b_m`` with ``b_m = Σ_i l_i r_i / Σ_i l_i`` over group ``m``'s responses,
    ``l_i`` the response's number of tokens (``token_counts``, required: verl's
    ``response_mask.sum(-1)``). No normalisation.

    A group with a single response has baseline 0 (verl's convention). A group whose responses
    hold no token at all (``Σ l = 0``, where verl divides 0 by 0) gets its plain mean. To reproduce
    verl's function row for row, pass its padding rows unmasked with a token count of 0: verl
    counts them in their group's size (a group of one response and one padding row is not lone).
    """

    @property
    def uses_token_counts(self) -> bool:
        return True

    def _compute(self, batch: Batch, *, update: bool):
        assert batch.token_counts is not None  # prepare() requires them (uses_token_counts)
        tokens = torch.zeros(batch.num_groups, dtype=torch.float64)
        tokens.index_add_(0, batch.group_index, batch.token_counts)
        weighted = torch.zeros_like(tokens).index_add_(
            0, batch.group_index, batch.token_counts * batch.rewards
        )
        has_tokens = tokens > 0
        group_baseline = torch.where(
            has_tokens, weighted / torch.where(has_tokens, tokens, 1.0), batch.group_mean
        )
        group_baseline = torch.where(
            batch.group_count <= 1, torch.zeros_like(group_baseline), group_baseline
        )
        baseline = batch.per_row(group_baseline)
        return baseline, batch.rewards - baseline, torch.zeros_like(baseline), {}
