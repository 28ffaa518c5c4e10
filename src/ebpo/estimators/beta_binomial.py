"""EBPO-BB: the Beta-Binomial variant of EBPO (revision of arXiv 2602.05165).

Each prompt's success rate gets a ``Beta(α, β)`` prior fitted by the method of moments to the
running history of per-group pass rates ``p_m = r̄_m`` (the ``W_means`` statistic of EBPO):

    m = mean(p),  v = var(p),  c = m(1 − m)/v − 1,  α = m·c,  β = (1 − m)·c.

The baseline is the posterior mean of the group's success rate,

    V_m = (α + s_m) / (α + β + n_m) = (1 − S_m)·r̄_m + S_m·α/(α + β),  S_m = (α + β)/(α + β + n_m),

with ``s_m`` the sum of the group's rewards. Until ``warmup_groups`` groups have been seen, or when
the moments admit no Beta distribution (``v = 0`` or ``v ≥ m(1 − m)``), the prior is ``Beta(1, 1)``.
Rewards must lie in [0, 1]. Everything else (running prior, normalisation) is as in :class:`EBPO`.
"""

from __future__ import annotations

from typing import Any

import torch

from ebpo.estimators.base import Batch
from ebpo.estimators.ebpo import EBPO, PriorParameters
from ebpo.estimators.registry import register_estimator
from ebpo.utils.checks import check_positive_int

__all__ = ["EBPOBetaBinomial", "beta_method_of_moments"]

_BOUNDARY_MARGIN = 1e-9


def beta_method_of_moments(
    mean: torch.Tensor, variance: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(α, β)`` of the Beta distribution with this mean and variance; ``(1, 1)`` where none exists.

    A Beta distribution needs ``0 < v < m(1 − m)``. ``v = m(1 − m)`` exactly is common (every
    group mean 0 or 1) and Welford may land a rounding error below it, which would give a
    near-zero-strength prior instead of the fallback: the bound is taken with a relative margin.
    """
    bound = mean * (1 - mean) * (1 - _BOUNDARY_MARGIN)
    admissible = (mean > 0) & (mean < 1) & (variance > 0) & (variance < bound)
    concentration = torch.where(
        admissible, mean * (1 - mean) / variance.clamp(min=1e-300) - 1, torch.ones_like(mean)
    )
    alpha = torch.where(admissible, mean * concentration, torch.ones_like(mean))
    beta = torch.where(admissible, (1 - mean) * concentration, torch.ones_like(mean))
    return alpha, beta


@register_estimator("ebpo_bb")
class EBPOBetaBinomial(EBPO):
    """Beta-Binomial EBPO. Options as :class:`EBPO`, plus ``warmup_groups`` (default 8): groups of
    history needed before the fitted prior replaces ``Beta(1, 1)``. ``within_variance`` and
    ``tau2_mode`` do not apply (the Beta prior sets the shrinkage). Extra metrics: ``beta_alpha``,
    ``beta_beta`` (mean over groups)."""

    reward_range = (0.0, 1.0)

    def __init__(
        self,
        *,
        warmup_groups: int = 8,
        prior: str = "history",
        half_life: float = 50.0,
        normalize: str = "batch",
        per_cluster: bool = False,
        min_cluster_groups: int = 8,
        eps: float = 1e-6,
        nan_policy: str = "raise",
    ) -> None:
        super().__init__(
            prior=prior,
            half_life=half_life,
            normalize=normalize,
            per_cluster=per_cluster,
            min_cluster_groups=min_cluster_groups,
            eps=eps,
            nan_policy=nan_policy,
        )
        self.warmup_groups = check_positive_int("warmup_groups", warmup_groups)

    def options(self) -> dict[str, Any]:
        # EBPO's options this estimator fixes are recorded too, as ebpo 0.1.0 wrote them
        fixed = ("prior_mean_from", "within_variance", "tau2_mode")
        return {**super().options(), **{k: getattr(self, k) for k in fixed}}

    def _check_rewards(self, rewards: torch.Tensor, valid: torch.Tensor) -> None:
        outside = ((rewards < 0) | (rewards > 1)) & valid
        if outside.any():
            raise ValueError(
                f"rewards must lie in [0, 1] for ebpo_bb (Beta-Binomial prior); got {float(rewards[outside][0])}"
            )

    def _shrink(
        self, batch: Batch, params: PriorParameters
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
        alpha, beta = beta_method_of_moments(params.means_mean, params.between_variance)
        warm = params.num_groups_seen >= self.warmup_groups
        alpha = torch.where(warm, alpha, torch.ones_like(alpha))
        beta = torch.where(warm, beta, torch.ones_like(beta))
        strength = alpha + beta
        nonempty = batch.nonempty
        metrics = {
            "beta_alpha": float(alpha[nonempty].mean()) if nonempty.any() else 1.0,
            "beta_beta": float(beta[nonempty].mean()) if nonempty.any() else 1.0,
        }
        return alpha / strength, strength / (strength + batch.group_count), metrics
