"""Pure tensor functions shared by every estimator: per-group moments, shrinkage, normalisation.

Everything here is vectorised over groups with segment sums (``index_add_``): a batch of N
responses in K groups costs a handful of O(N) tensor operations, whatever K is. Groups are
identified by a dense integer ``group_index`` in ``[0, K)`` (the input parsing of
:mod:`ebpo.estimators.validation` makes it from the caller's ids with
:func:`~ebpo.estimators.validation.factorize`), rows need not be contiguous and groups may have
different sizes. ``valid`` marks the rows that count;
invalid rows (padding, rejected samples) contribute nothing to any sum.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # the batch is only read here; base imports this module
    from ebpo.estimators.base import Batch

_RELATIVE_TOLERANCE = 1e-12

__all__ = [
    "SIGNAL_THRESHOLD",
    "common_metrics",
    "segment_sum",
    "group_moments",
    "batch_moments",
    "pooled_group_moments",
    "leave_one_out_mean",
    "leave_one_group_out_moments",
    "time_weighted_ema_decay",
    "shrinkage_factor",
    "empirical_bayes_baseline",
    "normalize_advantages",
    "token_whiten",
    "masked",
    "masked_std",
]


def segment_sum(values: torch.Tensor, index: torch.Tensor, num_segments: int) -> torch.Tensor:
    """``out[k] = sum(values[i] for i with index[i] == k)``."""
    out = torch.zeros((num_segments, *values.shape[1:]), dtype=values.dtype, device=values.device)
    return out.index_add_(0, index, values)


def masked(values: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    """``values * weight``, where ``weight`` is the 0/1 validity of each row (None: all valid)."""
    return values if weight is None else values * weight


def group_moments(
    rewards: torch.Tensor, index: torch.Tensor, weight: torch.Tensor | None, num_groups: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-group count, mean and unbiased variance over the valid rows (``weight`` 1, others 0).

    ``mean_k = (1/n_k) Σ r_i``, ``var_k = Σ (r_i − mean_k)² / (n_k − 1)``. Two passes (mean first,
    then squared deviations) so that large rewards do not lose precision. Empty groups get mean 0,
    groups with fewer than 2 valid rows get variance 0. ``rewards`` must be finite everywhere.
    """
    if weight is None:
        count = torch.bincount(index, minlength=num_groups).to(rewards.dtype)
    else:
        count = segment_sum(weight, index, num_groups)
    total = segment_sum(masked(rewards, weight), index, num_groups)
    mean = total / count.clamp(min=1)
    squared_deviation = segment_sum(masked((rewards - mean[index]) ** 2, weight), index, num_groups)
    variance = torch.where(
        count > 1, squared_deviation / (count - 1).clamp(min=1), torch.zeros_like(count)
    )
    return count, mean, variance


def batch_moments(
    values: torch.Tensor, weight: torch.Tensor | None = None
) -> tuple[float, float, float]:
    """``(count, mean, M2)`` of a 1-D tensor, by two passes (exact to rounding).

    ``weight`` (0/1 per entry) selects entries without copying them out; weighted entries must be
    finite, the others may hold anything finite.
    """
    values = values.to(torch.float64)
    if weight is None:
        count = float(values.numel())
        if count == 0:
            return 0.0, 0.0, 0.0
        mean = values.mean()
        return count, float(mean), float(((values - mean) ** 2).sum())
    count = float(weight.sum())
    if count == 0:
        return 0.0, 0.0, 0.0
    mean = (values * weight).sum() / count
    return count, float(mean), float((((values - mean) ** 2) * weight).sum())


def pooled_group_moments(
    count: torch.Tensor, mean: torch.Tensor, unbiased_variance: torch.Tensor
) -> tuple[float, float, float]:
    """``(count, mean, M2)`` of all the rows of several groups, from per-group summaries.

    Chan et al.'s combination over groups: ``N = Σ n_k``, ``mean = Σ n_k·m_k / N``,
    ``M2 = Σ (n_k − 1)·s²_k + Σ n_k·(m_k − mean)²``. Costs O(groups) instead of O(rows).
    """
    total = float(count.sum())
    if total == 0:
        return 0.0, 0.0, 0.0
    overall = (count * mean).sum() / total
    within = ((count - 1).clamp(min=0) * unbiased_variance).sum()
    between = (count * (mean - overall) ** 2).sum()
    return total, float(overall), float(within + between)


def leave_one_out_mean(
    rewards: torch.Tensor, index: torch.Tensor, count: torch.Tensor, mean: torch.Tensor
) -> torch.Tensor:
    """Mean of the OTHER valid responses of each response's group: ``(n·r̄ − r_i)/(n − 1)``.

    A response alone in its group has no other response; its leave-one-out mean is 0 (verl's
    convention for singleton groups).
    """
    n = count[index]
    return torch.where(
        n > 1, (n * mean[index] - rewards) / (n - 1).clamp(min=1), torch.zeros_like(rewards)
    )


def leave_one_group_out_moments(
    values: torch.Tensor, include: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For every entry ``k``: count, mean and population variance of ``values[j]`` over the OTHER
    included entries ``j ≠ k`` (``include`` 0/1 per entry; an excluded ``k`` sees all included).

    ``c_{−k} = C − include_k``, ``mean_{−k} = (S − include_k·x_k) / c_{−k}`` with ``S = Σ_j x_j``,
    and, with ``d_j = x_j − m`` about the mean ``m`` of all included entries (so that values with a
    large common offset keep their precision) and ``T = Σ_j d_j²``,
    ``Σ_{j≠k} (x_j − mean_{−k})² = (T − d_k²) − (Σ_{j≠k} d_j)² / c_{−k}`` — exact for any ``m``.
    Mean and variance are 0 where no other entry is included. O(K) for K entries.

    Removing ``x_k`` from a sum it dominates would leave rounding residue where the answer is
    small (e.g. 1e-17 instead of an exact 0 when every other entry is 0): the at most four entries
    with ``|x_k| > Σ|x_j|/3`` or ``d_k² > T/3`` are recomputed directly from the others instead.
    Every other entry's result then carries the rounding of an ordinary sum over the others.
    """
    include = include.to(values.dtype)
    count = include.sum()
    if float(count) == 0:
        zeros = torch.zeros_like(values)
        return zeros, zeros, zeros
    kept = values * include
    total = kept.sum()
    deviation = (values - total / count) * include
    deviation_sq = deviation**2
    total_sq = deviation_sq.sum()
    others = count - include
    safe = others.clamp(min=1)
    has_others = others > 0
    others_mean = torch.where(has_others, (total - kept) / safe, torch.zeros_like(values))
    others_sum_sq = (total_sq - deviation_sq) - (deviation.sum() - deviation) ** 2 / safe
    others_var = torch.where(
        has_others, others_sum_sq.clamp(min=0) / safe, torch.zeros_like(values)
    )

    dominant = (
        ((kept.abs() * 3 > kept.abs().sum()) | (deviation_sq * 3 > total_sq)).nonzero().flatten()
    )
    if dominant.numel():
        # [d, K], d ≤ 4: the other included entries of each dominant entry, two passes.
        weight = include.expand(dominant.numel(), -1).clone()
        weight[torch.arange(dominant.numel()), dominant] = 0
        n = weight.sum(dim=1)
        mean = (weight * values).sum(dim=1) / n.clamp(min=1)
        var = (weight * (values - mean[:, None]) ** 2).sum(dim=1) / n.clamp(min=1)
        others_mean[dominant] = torch.where(n > 0, mean, torch.zeros_like(mean))
        others_var[dominant] = torch.where(n > 0, var, torch.zeros_like(var))
    return others, others_mean, others_var


#: W&B's "time weighted EMA" chart smoothing scales its decay by this x-axis span; the JSPO authors
#: smooth jspo_plus_plus's λ and mean with that formula, so the constant is part of the estimator.
TIME_WEIGHTED_EMA_SPAN = 1642.65


def time_weighted_ema_decay(step: int, coef: float) -> float:
    """Factor by which the accumulated sums decay before observation number ``step`` (1-based) is
    added, in the time-weighted EMA the JSPO authors use to smooth ``jspo_plus_plus`` (W&B's chart
    smoothing; their ``wandb_tw_ema``):

        d_1 = 1,   d_t = w ** (1642.65 / (t − 1)),   w = min(sqrt(coef), 0.999),
        smoothed_t = Σ_k (Π_{i=k+1..t} d_i) y_k  /  Σ_k Π_{i=k+1..t} d_i.

    ``d_t`` approaches 1 as ``t`` grows, so the window widens with time: with coef = 0.99,
    d_2 = 2.6e-4 (the first value is all but forgotten), d_100 = 0.92 (a window of about 12
    steps), d_1000 = 0.992 (about 120 steps).
    """
    if step <= 1:
        return 1.0
    w = min(math.sqrt(coef), 0.999)
    return w ** (TIME_WEIGHTED_EMA_SPAN / (step - 1))


def shrinkage_factor(
    sigma2: torch.Tensor | float, tau2: torch.Tensor | float, group_size: torch.Tensor, eps: float
) -> torch.Tensor:
    """Weight on the prior mean: ``S = (σ²/n) / (σ²/n + τ²)`` (EBPO, Algorithm 1's shrinkage step).

    ``σ²`` is the within-group variance, ``τ²`` the between-group variance and ``n`` the number of
    valid responses in the group. ``S`` is the ``w`` that minimises the Bayes risk
    ``R(w) = (1 − w)²·σ²/n + w²·τ²`` of the baseline ``(1 − w)·r̄ + w·μ`` (EBPO Theorem 3.3).
    Both variances are non-negative, so ``S`` lies in [0, 1]. When the denominator is at most
    ``eps`` (no variance seen anywhere yet) ``S = 1``, as in the authors' code: with no evidence
    that prompts differ, trust the prior.
    """
    sigma2_t = torch.as_tensor(sigma2, dtype=group_size.dtype, device=group_size.device)
    tau2_t = torch.as_tensor(tau2, dtype=group_size.dtype, device=group_size.device)
    noise = sigma2_t / group_size.clamp(min=1)
    denominator = noise + tau2_t
    return torch.where(
        denominator > eps, noise / denominator.clamp(min=eps), torch.ones_like(denominator)
    )


def empirical_bayes_baseline(
    group_mean: torch.Tensor, prior_mean: torch.Tensor | float, shrinkage: torch.Tensor
) -> torch.Tensor:
    """EBPO baseline ``V = (1 − S)·r̄ + S·μ_glob`` (Algorithm 1): the posterior mean of the prompt's
    success rate, whose risk ``(1 − S)·σ²/n`` is below the group mean's ``σ²/n`` whenever ``τ² > 0``
    (EBPO Theorem 3.3)."""
    return (1 - shrinkage) * group_mean + shrinkage * prior_mean


def masked_std(values: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    """Unbiased (n−1) standard deviation of the valid entries; 1 when fewer than 2 are valid.

    Taking 1 rather than NaN for a single value follows verl's convention for singleton groups and
    keeps a one-response batch finite. ``weight`` is the 0/1 validity of each entry (None: all).
    """
    n = values.numel() if weight is None else float(weight.sum())
    if n < 2:
        return torch.ones((), dtype=values.dtype, device=values.device)
    mean = masked(values, weight).sum() / n
    std = (masked((values - mean) ** 2, weight).sum() / (n - 1)).sqrt()
    _check_finite_spread(float(std))
    return std


def _check_finite_spread(std: float) -> None:
    # An overflowing sum of squares would make every advantage divided by it silently 0.
    if not math.isfinite(std):
        raise ValueError(
            "the spread of this batch overflows float64 (values near 1e154 or larger); rescale the rewards"
        )


def normalize_advantages(
    raw: torch.Tensor, weight: torch.Tensor | None, mode: str, eps: float
) -> torch.Tensor:
    """Batch normalisation of raw advantages (EBPO Algorithm 1, last step).

    ``"batch"``: ``(a − mean(a)) / (std(a) + eps)`` over all valid responses of the batch, with the
    unbiased std (1 for fewer than 2 responses), and 0 when std(a) is 0 up to rounding;
    ``"center"``: ``a − mean(a)`` (the authors' code when ``norm_adv_by_std_in_grpo`` is False);
    ``"none"``: ``a``. ``weight`` is the 0/1 validity of each row (None: all valid); invalid rows
    are 0 in the output (``raw`` must be finite there).
    """
    if mode == "none":
        return masked(raw, weight)
    n = raw.numel() if weight is None else float(weight.sum())
    if n == 0:
        return torch.zeros_like(raw)
    centred = raw - masked(raw, weight).sum() / n
    if mode == "batch":
        std = float((masked(centred**2, weight).sum() / (n - 1)).sqrt()) if n >= 2 else 1.0
        _check_finite_spread(std)
        # The revision's condition std(a) > 0: when every raw advantage is the same (e.g. every group
        # of the batch failed), centring leaves only rounding residue, which must not be amplified.
        if std <= _RELATIVE_TOLERANCE * (1.0 + float(raw.abs().max())):
            return torch.zeros_like(raw)
        centred = centred / (std + eps)
    return masked(centred, weight)


#: verl's constant in ``masked_mean`` (added to the token count) and ``masked_whiten`` (added to
#: the variance); :func:`token_whiten` uses the same one, whatever the estimator's ``eps``
VERL_WHITEN_EPS = 1e-8


def token_whiten(raw: torch.Tensor, token_counts: torch.Tensor) -> torch.Tensor:
    """verl's ``masked_whiten`` of per-response values broadcast over their tokens, in closed form.

    Response ``i`` has value ``a_i`` on each of its ``L_i`` tokens (``token_counts``; 0 on invalid
    rows). With ``L = Σ L_i`` and verl's constant ``c = 1e-8`` (:data:`VERL_WHITEN_EPS`)::

        mean = Σ L_i a_i / (L + c)
        var  = Σ L_i (a_i − mean)² / (L + c) · L / (L − 1)        (Bessel over tokens)
        Â_i  = (a_i − mean) / sqrt(var + c)

    which is what ``verl.utils.torch_functional.masked_whiten(a ⊗ 1_T · mask, mask)`` gives on
    each response token. A batch of fewer than 2 tokens, where verl raises, gets ``var = 0``. Rows
    with ``L_i = 0`` get a value but weigh nothing (verl multiplies them by their empty mask).
    """
    total = float(token_counts.sum())
    if total == 0:
        return torch.zeros_like(raw)
    weighted = raw * token_counts  # raw is finite everywhere; counts are 0 on invalid rows
    mean = weighted.sum() / (total + VERL_WHITEN_EPS)
    centred = raw - mean
    variance = (token_counts * centred**2).sum() / (total + VERL_WHITEN_EPS)
    variance = variance * (total / (total - 1)) if total > 1 else torch.zeros_like(variance)
    _check_finite_spread(float(variance))
    return centred / torch.sqrt(variance + VERL_WHITEN_EPS)


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
