"""Pure tensor functions shared by every estimator: grouping, per-group moments, shrinkage.

Everything here is vectorised over groups with segment sums (``index_add_``): a batch of N
responses in K groups costs a handful of O(N) tensor operations, whatever K is. Groups are
identified by a dense integer ``group_index`` in ``[0, K)`` (see :func:`factorize`), rows need
not be contiguous and groups may have different sizes. ``valid`` marks the rows that count;
invalid rows (padding, rejected samples) contribute nothing to any sum.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import torch

__all__ = [
    "factorize",
    "segment_sum",
    "group_moments",
    "leave_one_out_mean",
    "shrinkage_factor",
    "empirical_bayes_baseline",
    "normalize_advantages",
    "masked_std",
]


def factorize(ids: Any) -> tuple[torch.Tensor, list[Hashable]]:
    """Map arbitrary group ids to dense integers.

    Returns ``(index, labels)`` with ``index[i]`` in ``[0, len(labels))`` and ``labels[index[i]]``
    equal to ``ids[i]``. Integer tensors and arrays go through ``torch.unique``; strings and other
    orderable ids (verl passes a numpy object array of uuid strings) through ``np.unique``. Ids that
    cannot be sorted together (mixed types, tuples) fall back to a dictionary, which is slower.
    """
    if isinstance(ids, torch.Tensor):
        if ids.dtype.is_floating_point or ids.dtype.is_complex:
            raise ValueError(f"group_ids must hold integers or hashable ids, got a {ids.dtype} tensor")
        unique, index = torch.unique(ids.detach().cpu(), return_inverse=True)
        return index, unique.tolist()
    array = ids if isinstance(ids, np.ndarray) else _as_object_array(ids)
    if array.dtype.kind in "iub":
        unique, index = torch.unique(torch.from_numpy(np.ascontiguousarray(array)), return_inverse=True)
        return index, unique.tolist()
    if array.dtype.kind == "f":
        raise ValueError(f"group_ids must hold integers or hashable ids, got floats ({array.dtype})")
    try:
        unique, inverse = np.unique(array, return_inverse=True)
    except TypeError:  # ids of types that do not order together: hash them instead
        first_seen: dict[Hashable, int] = {}
        inverse = np.fromiter((first_seen.setdefault(x, len(first_seen)) for x in array), dtype=np.int64, count=len(array))
        unique = list(first_seen)
    return torch.from_numpy(np.asarray(inverse, dtype=np.int64).reshape(-1)), [_plain(x) for x in unique]


def _as_object_array(ids: Sequence[Hashable]) -> np.ndarray:
    array = np.empty(len(ids), dtype=object)
    array[:] = list(ids)
    # Keep a numeric dtype for plain int lists so the fast torch path applies.
    if len(array) and all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in array[:64]):
        try:
            return np.asarray(ids, dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            return array
    return array


def _plain(x: Any) -> Any:
    return x.item() if isinstance(x, np.generic) else x


def segment_sum(values: torch.Tensor, index: torch.Tensor, num_segments: int) -> torch.Tensor:
    """``out[k] = sum(values[i] for i with index[i] == k)``."""
    return torch.zeros(num_segments, dtype=values.dtype, device=values.device).index_add_(0, index, values)


def group_moments(
    rewards: torch.Tensor, index: torch.Tensor, valid: torch.Tensor, num_groups: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-group count, mean and unbiased variance over the valid rows.

    ``mean_k = (1/n_k) Σ r_i``, ``var_k = Σ (r_i − mean_k)² / (n_k − 1)``. Two passes (mean first,
    then squared deviations) so that large rewards do not lose precision. Empty groups get mean 0,
    groups with fewer than 2 valid rows get variance 0.
    """
    weight = valid.to(rewards.dtype)
    count = segment_sum(weight, index, num_groups)
    total = segment_sum(rewards * weight, index, num_groups)
    mean = total / count.clamp(min=1)
    squared_deviation = segment_sum(((rewards - mean[index]) ** 2) * weight, index, num_groups)
    variance = torch.where(count > 1, squared_deviation / (count - 1).clamp(min=1), torch.zeros_like(count))
    return count, mean, variance


def leave_one_out_mean(
    rewards: torch.Tensor, index: torch.Tensor, count: torch.Tensor, mean: torch.Tensor
) -> torch.Tensor:
    """Mean of the OTHER valid responses of each response's group: ``(n·r̄ − r_i)/(n − 1)``.

    A response alone in its group has no other response; its leave-one-out mean is 0 (verl's
    convention for singleton groups).
    """
    n = count[index]
    return torch.where(n > 1, (n * mean[index] - rewards) / (n - 1).clamp(min=1), torch.zeros_like(rewards))


def shrinkage_factor(
    sigma2: torch.Tensor | float, tau2: torch.Tensor | float, group_size: torch.Tensor, eps: float
) -> torch.Tensor:
    """Weight on the prior mean, EBPO eq. (shrinkage): ``S = (σ²/n) / (σ²/n + τ²)``.

    ``σ²`` is the within-group variance, ``τ²`` the between-group variance and ``n`` the number of
    valid responses in the group. Both variances are non-negative, so ``S`` lies in [0, 1]. When the
    denominator is at most ``eps`` (no variance seen anywhere yet) ``S = 1``, as in the authors' code:
    with no evidence that prompts differ, trust the prior.
    """
    sigma2_t = torch.as_tensor(sigma2, dtype=group_size.dtype, device=group_size.device)
    tau2_t = torch.as_tensor(tau2, dtype=group_size.dtype, device=group_size.device)
    noise = sigma2_t / group_size.clamp(min=1)
    denominator = noise + tau2_t
    return torch.where(denominator > eps, noise / denominator.clamp(min=eps), torch.ones_like(denominator))


def empirical_bayes_baseline(
    group_mean: torch.Tensor, prior_mean: torch.Tensor | float, shrinkage: torch.Tensor
) -> torch.Tensor:
    """EBPO baseline ``V = (1 − S)·r̄ + S·μ_glob`` (the posterior mean of the prompt's success rate)."""
    return (1 - shrinkage) * group_mean + shrinkage * prior_mean


def masked_std(values: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Unbiased (n−1) standard deviation of the valid entries; 1 when fewer than 2 are valid.

    Taking 1 rather than NaN for a single value follows verl's convention for singleton groups and
    keeps a one-response batch finite.
    """
    n = valid.sum()
    if n < 2:
        return torch.ones((), dtype=values.dtype, device=values.device)
    selected = values[valid]
    return selected.std()


def normalize_advantages(
    raw: torch.Tensor, valid: torch.Tensor, mode: str, eps: float
) -> torch.Tensor:
    """Batch normalisation of raw advantages (EBPO Algorithm 1, last step).

    ``"batch"``: ``(a − mean(a)) / (std(a) + eps)`` over all valid responses of the batch;
    ``"center"``: ``a − mean(a)`` (the authors' code when ``norm_adv_by_std_in_grpo`` is False);
    ``"none"``: ``a``. Invalid rows are 0 in the output.
    """
    if mode == "none":
        return torch.where(valid, raw, torch.zeros_like(raw))
    n_valid = int(valid.sum())
    if n_valid == 0:
        return torch.zeros_like(raw)
    centred = raw - raw[valid].mean()
    if mode == "batch":
        centred = centred / (masked_std(raw, valid) + eps)
    return torch.where(valid, centred, torch.zeros_like(raw))
