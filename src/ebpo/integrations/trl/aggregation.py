"""From TRL's ``(N, num_reward_funcs)`` reward matrix to what the estimator and DAPO's filter see.

Pure tensor functions, free of TRL (torch only, so that the arithmetic of :mod:`.batch_advantages`
is tested without a trainer); :class:`~ebpo.integrations.trl.EBPOTrainer` applies them to the
rewards TRL 1.16 gathered from every process (groups are contiguous blocks of ``num_generations``
rows; NaN marks a reward function that returned None for a completion).

- :func:`combine_rewards` — one reward per completion, as TRL combines them before its own
  normalisation (``multi_objective_aggregation``): ``"sum_then_normalize"`` is the weighted sum,
  ``"normalize_then_sum"`` (GDPO) normalises every reward function within each group first.
- :func:`unscorable_rows` — completions every *user* reward function returned None for. The DAPO
  overlong penalty, which the trainer appends as one more reward function, always returns a number;
  it must not make an unscorable completion scored.
- :func:`lone_response_rows` — the only scored completion of its group: it has no group baseline.
- :func:`zero_variance_groups` — DAPO's group filter.
"""

from __future__ import annotations

import torch

__all__ = [
    "AGGREGATIONS",
    "TRL_NORMALIZE_EPS",
    "combine_rewards",
    "group_nanstd",
    "lone_response_rows",
    "unscorable_rows",
    "zero_variance_groups",
]

#: accepted values of ``multi_objective_aggregation`` (TRL 1.16's)
AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")
#: TRL adds this to a standard deviation before dividing by it
TRL_NORMALIZE_EPS = 1e-4


def unscorable_rows(rewards_per_func: torch.Tensor, columns: slice | None = None) -> torch.Tensor:
    """``(N,)`` True where every reward function in ``columns`` (default: all) returned None (NaN)."""
    selected = rewards_per_func if columns is None else rewards_per_func[:, columns]
    return torch.isnan(selected).all(dim=1)


def combine_rewards(
    rewards_per_func: torch.Tensor,
    weights: torch.Tensor,
    *,
    aggregation: str = "sum_then_normalize",
    num_generations: int | None = None,
) -> torch.Tensor:
    r"""``(N,)`` one reward per completion, NaN where no reward function scored it.

    ``"sum_then_normalize"`` (TRL's default): ``r = Σ_k w_k r_k`` over the functions that scored the
    completion. ``"normalize_then_sum"`` (GDPO; TRL 1.16 ``_generate_and_score_completions``): each
    function is first normalised within its group,

        r = Σ_k w_k (r_k − mean_g r_k) / (std_g r_k + 1e-4),

    with NaN-aware group mean and unbiased std (TRL's ``nanstd``, as :func:`group_nanstd`; a
    function that scored fewer than two completions of the group has std NaN there and adds
    nothing). TRL then normalises ``r`` over
    the batch; EBPOTrainer hands ``r`` to the estimator instead. Computed in ``rewards_per_func``'s
    dtype, as TRL does.
    """
    weights = weights.to(device=rewards_per_func.device, dtype=rewards_per_func.dtype).unsqueeze(0)
    unscorable = unscorable_rows(rewards_per_func)
    if aggregation == "sum_then_normalize":
        per_func = rewards_per_func
    elif aggregation == "normalize_then_sum":
        if num_generations is None:
            raise ValueError("num_generations is needed with aggregation='normalize_then_sum'")
        num_funcs = rewards_per_func.size(1)
        grouped = rewards_per_func.view(-1, num_generations, num_funcs)
        mean = torch.nanmean(grouped, dim=1, keepdim=True)
        std = group_nanstd(grouped) if num_generations > 1 else torch.zeros_like(mean)
        per_func = ((grouped - mean) / (std + TRL_NORMALIZE_EPS)).view(-1, num_funcs)
    else:
        raise ValueError(
            f"multi_objective_aggregation must be one of {list(AGGREGATIONS)}, got {aggregation!r}"
        )
    rewards = (per_func * weights).nansum(dim=1)
    return rewards.masked_fill(unscorable, torch.nan)


def group_nanstd(grouped: torch.Tensor) -> torch.Tensor:
    r"""``(M, 1, K)`` unbiased std over dim 1 of ``(M, G, K)``, ignoring NaN; NaN where fewer than two
    values are scored: ``s = sqrt(mean_i (x_i − x̄)² · n / (n − 1))``.

    TRL 1.16's ``trl.trainer.utils.nanstd(grouped, dim=1, keepdim=True)``, the same operations in
    the same order so that the result is TRL's to the last bit (the tests compare the two), written
    out here so that this module does not import TRL.
    """
    mean = torch.nanmean(grouped, dim=1, keepdim=True)
    variance = torch.nanmean((grouped - mean) ** 2, dim=1, keepdim=True)
    count = torch.sum(~torch.isnan(grouped), dim=1, keepdim=True)
    correction = count / (count - 1)
    correction = torch.where(count > 1, correction, torch.full_like(correction, float("nan")))
    variance *= correction  # Bessel's correction
    return torch.sqrt(variance)


def lone_response_rows(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """``(N,)`` True for a scored (non-NaN) completion that is the only scored one of its group."""
    scored = ~torch.isnan(rewards.reshape(-1, num_generations))
    lone_group = scored.sum(dim=1, keepdim=True) == 1
    return (scored & lone_group).reshape(-1)


def zero_variance_groups(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """``(N // num_generations,)`` True for groups whose non-NaN rewards all agree, or that have none.

    ``rewards`` is ``(N,)`` with contiguous groups; NaN marks completions no reward function scored.
    A group with a single scored completion counts as zero-variance (it carries no contrast).
    """
    grouped = rewards.detach().reshape(-1, num_generations).double()
    scored = ~torch.isnan(grouped)
    count = scored.sum(dim=1)
    high = torch.where(scored, grouped, torch.full_like(grouped, -torch.inf)).amax(dim=1)
    low = torch.where(scored, grouped, torch.full_like(grouped, torch.inf)).amin(dim=1)
    return (count < 2) | (high - low <= 0)
