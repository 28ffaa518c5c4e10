"""The metrics every estimator reports with its advantages (:func:`common_metrics`), whatever its
baseline: batch size, how many groups carry a learning signal, and the spread of the advantages."""

from __future__ import annotations

import math

import torch

from ebpo.estimators.batch import Batch
from ebpo.estimators.functional import segment_sum

__all__ = ["SIGNAL_THRESHOLD", "common_metrics"]

#: an advantage counts as a learning signal when |A| exceeds this (rounding residue does not)
SIGNAL_THRESHOLD = 1e-8


def common_metrics(batch: Batch, advantage: torch.Tensor) -> dict[str, float]:
    """Metrics every estimator reports.

    ``zero_variance_group_frac``: groups (of ≥ 2 responses) whose rewards are all equal — GRPO
    gives them no signal. ``zero_signal_group_frac``: groups where this estimator gives every
    response a zero advantage (``|A| ≤ SIGNAL_THRESHOLD``). ``saturated_failure_group_frac``:
    groups whose rewards are all ≤ 0; ``saturated_failure_signal_frac``: of those, the fraction
    that still get a non-zero advantage (Theorem 3.2: 0 under GRPO, > 0 under EBPO once the prior
    mean is positive).
    """
    nonempty = batch.nonempty
    num_groups = int(nonempty.sum())
    num_valid = batch.num_valid
    multi = batch.group_count > 1
    zero_variance = multi & (batch.group_variance <= 0)
    # advantage and rewards are 0 on invalid rows, so plain segment sums count valid rows only.
    advantage_sq = advantage**2
    group_signal = (
        segment_sum(advantage_sq, batch.group_index, batch.num_groups) > SIGNAL_THRESHOLD**2
    )
    positive = segment_sum(batch.rewards.clamp(min=0), batch.group_index, batch.num_groups)
    failed = nonempty & (positive == 0)
    n = max(num_valid, 1)
    adv_mean = float(advantage.sum()) / n
    # adv_mean * adv_mean, not adv_mean**2: a Python float power raises OverflowError instead of
    # giving inf (which _result reports as an overflow, in a ValueError)
    adv_var = (float(advantage_sq.sum()) - num_valid * adv_mean * adv_mean) / max(num_valid - 1, 1)
    return {
        "num_responses": float(num_valid),
        "num_groups": float(num_groups),
        "reward_mean": float((batch.group_count * batch.group_mean).sum()) / n,
        "zero_variance_group_frac": float(zero_variance.sum()) / max(int(multi.sum()), 1),
        "zero_signal_group_frac": float((nonempty & ~group_signal).sum()) / max(num_groups, 1),
        "saturated_failure_group_frac": float(failed.sum()) / max(num_groups, 1),
        "saturated_failure_signal_frac": (
            float((failed & group_signal).sum()) / max(int(failed.sum()), 1)
        ),
        "advantage_mean": adv_mean,
        "advantage_std": math.sqrt(max(adv_var, 0.0)) if num_valid > 1 else 0.0,
        "advantage_abs_max": float(advantage.abs().max()),
    }
