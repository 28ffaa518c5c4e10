"""The data an estimator works on and returns: the validated :class:`Batch` and the
:class:`AdvantageResult`. Plain data classes, so that validation, metrics and the estimators can
all import them without importing each other."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

import torch

__all__ = ["AdvantageResult", "Batch"]


@dataclass(frozen=True)
class AdvantageResult:
    """What an estimator returns for a batch of N responses.

    Attributes:
        advantages: ``[N]`` one advantage per response; 0 for masked rows.
        baselines: ``[N]`` the baseline subtracted from each reward, before any normalisation.
        shrinkage: ``[N]`` weight on the prior for the response's group (0 when the estimator has
            no prior).
        metrics: scalars for logging (see each estimator's docstring).
    """

    advantages: torch.Tensor
    baselines: torch.Tensor
    shrinkage: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Batch:
    """A validated batch, in float64, with its group structure.

    Masked rows keep their group index but have ``valid`` False and reward 0; every statistic
    weights rows by ``valid``.
    """

    rewards: torch.Tensor  # [N] float64, 0 where not valid
    valid: torch.Tensor  # [N] bool
    weight: torch.Tensor | None  # [N] float64 1.0 where valid else 0.0; None: all rows valid
    group_index: torch.Tensor  # [N] int64 in [0, num_groups)
    num_groups: int
    group_count: torch.Tensor  # [K] float64, valid rows per group
    group_mean: torch.Tensor  # [K] float64
    group_variance: torch.Tensor  # [K] float64, unbiased; 0 for fewer than 2 valid rows
    cluster_index: torch.Tensor | None  # [K] int64 cluster of each group, or None
    cluster_labels: list[Hashable] | None  # set exactly when cluster_index is
    out_dtype: torch.dtype
    out_device: torch.device
    token_counts: torch.Tensor | None = None  # [N] float64 tokens per response, 0 where not valid
    prompt_keys: torch.Tensor | None = None  # [K] int64 stable hash of each group's prompt key

    @property
    def nonempty(self) -> torch.Tensor:
        """``[K]`` groups with at least one valid row."""
        return self.group_count > 0

    @property
    def num_valid(self) -> int:
        return int(self.group_count.sum())

    def per_row(self, per_group: torch.Tensor) -> torch.Tensor:
        return per_group[self.group_index]
