"""One generation batch's rewards → the advantages and metrics :class:`EBPOTrainer` trains on.

Pure arithmetic, free of TRL (torch, the estimators and the TRL-free :mod:`.aggregation` only), so
that "which advantages, for which rows" is tested without a trainer. The trainer gathers the
inputs from TRL (the ``(N, K)`` reward matrix of every process, the completions' token counts),
calls :func:`batch_advantages` and places the output (its process's slice of the rows, the
metrics, DAPO's mask, the completions table).

The steps, for ``N`` completions in contiguous groups of ``G = num_generations``:

1. one reward per completion, as TRL combines the reward functions
   (:func:`.aggregation.combine_rewards`; NaN where no reward function scored the completion);
2. the rows the estimator sees: an unscored completion is always NaN (the estimator, built with
   ``nan_policy="mask"``, leaves it out: advantage 0, not in any statistic); a *lone* completion
   (the only scored one of its group) follows the batch's :class:`LoneRowPolicy`;
3. the estimator's advantages ``A = estimator(r, ⌊i / G⌋)`` (group ``⌊i / G⌋`` for row ``i``;
   for ``ebpo``, the paper's Algorithm 1: ``a = r − V_m`` with the empirical-Bayes baseline
   ``V_m = (1 − S_m)·r̄_m + S_m·μ_glob``, then normalised over the batch);
4. the metrics: the estimator's ``res.metrics``, ``grpo_zero_signal_group_frac`` (the groups
   GRPO gives no signal: the zero-variance ones) and, when DAPO's filter is on,
   ``filtered_group_frac`` with the groups it drops.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any

import torch

from ebpo.estimators import AdvantageEstimator
from ebpo.estimators.validation import stable_key_hash
from ebpo.integrations.trl.aggregation import (
    combine_rewards,
    lone_response_rows,
    zero_variance_groups,
)

__all__ = [
    "FILTER_METRICS",
    "BatchAdvantages",
    "LoneRowPolicy",
    "batch_advantages",
    "prompt_key",
]

#: what DAPO's group filter may compare (``EBPOConfig.filter_groups_metric``)
FILTER_METRICS = ("accuracy", "reward")


class LoneRowPolicy(enum.Enum):
    """What a completion that is the only scored one of its group gets, and whose numbers train.

    ``PRIOR``: the estimator scores it like any other row; its prior (estimated from the other
    prompts and steps) is its baseline (``ebpo``, ``ebpo_bb``: the trait ``uses_prior``).

    ``LEAVE_OUT``: it is left out of the estimator (NaN), so it gets advantage 0 and is in no
    statistic: a group-relative baseline (``rloo``, ``jspo``, ...) has nothing to compare it with,
    and TRL gives it 0 too.

    ``TRL_GRPO``: TRL's GRPO (``grpo``, ``dr_grpo``) as ``GRPOTrainer`` treats it: it counts in the
    batch's statistics (the std of ``scale_rewards="batch"``), then its advantage is set to 0; the
    estimator's advantages train.

    ``TRL_GRPO_OWN``: as ``TRL_GRPO``, and the advantages ``GRPOTrainer`` computed itself are kept,
    so that the run is ``trl grpo``'s to the last bit (the estimator, in float64, agrees with them
    to float32 rounding): TRL's eps and scaling (see
    :func:`.estimator_settings.uses_trls_own_advantages`).
    """

    PRIOR = "prior"
    LEAVE_OUT = "leave_out"
    TRL_GRPO = "trl_grpo"
    TRL_GRPO_OWN = "trl_grpo_own"

    @property
    def follows_trl_grpo(self) -> bool:
        """TRL's own GRPO family (its eps, its scale)."""
        return self in (LoneRowPolicy.TRL_GRPO, LoneRowPolicy.TRL_GRPO_OWN)

    @property
    def keeps_trls_advantages(self) -> bool:
        """Whether the advantages TRL computed stay in place (and in its completions table)."""
        return self is LoneRowPolicy.TRL_GRPO_OWN


@dataclass(frozen=True)
class BatchAdvantages:
    """What :func:`batch_advantages` returns; every tensor covers the whole gathered batch.

    Attributes:
        rewards: ``(N,)`` one reward per completion (NaN: unscored).
        estimator_rewards: ``(N,)`` what the estimator saw (lone rows NaN under ``LEAVE_OUT``).
        advantages: ``(N,)`` in the estimator's output dtype; 0 for unscored rows, and for lone
            rows except under ``PRIOR``.
        metrics: the estimator's metrics, ``grpo_zero_signal_group_frac`` and, with DAPO's filter,
            ``filtered_group_frac`` (names without the trainer's ``ebpo/`` prefix, in this order).
        dropped_groups: ``(N / G,)`` True for the groups DAPO's filter drops; None without it.
        keeps_trls_advantages: whether the trainer keeps TRL's own advantages
            (:attr:`LoneRowPolicy.keeps_trls_advantages`).
        num_generations: the group size ``G``.
    """

    rewards: torch.Tensor
    estimator_rewards: torch.Tensor
    advantages: torch.Tensor
    metrics: dict[str, float]
    dropped_groups: torch.Tensor | None
    keeps_trls_advantages: bool
    num_generations: int

    @property
    def dropped_rows(self) -> torch.Tensor | None:
        """``(N,)`` True for every completion of a dropped group; None without DAPO's filter."""
        if self.dropped_groups is None:
            return None
        return self.dropped_groups.repeat_interleave(self.num_generations)


def batch_advantages(
    rewards_per_func: torch.Tensor,
    weights: torch.Tensor,
    num_generations: int,
    estimator: AdvantageEstimator,
    policy: LoneRowPolicy,
    *,
    aggregation: str = "sum_then_normalize",
    clusters: Any = None,
    token_counts: torch.Tensor | None = None,
    prompt_keys: Any = None,
    update: bool = True,
    filter_metric: str | None = None,
    user_columns: slice | None = None,
) -> BatchAdvantages:
    """Advantages and metrics of one generation batch (see the module docstring for the steps).

    Args:
        rewards_per_func: ``(N, K)`` TRL's reward matrix of the whole batch (NaN: the function
            returned None), groups in contiguous blocks of ``num_generations`` rows.
        weights: ``(K,)`` TRL's ``reward_weights``.
        estimator: the trainer's live estimator; ``update=True`` (training) updates its state.
        policy: the lone-row policy of ``estimator`` (:func:`.estimator_settings.lone_row_policy`).
        aggregation: TRL's ``multi_objective_aggregation``.
        clusters, token_counts, prompt_keys: passed to the estimator (per-cluster priors;
            token-weighted whitening; SPO's per-prompt tracker, keys of :func:`prompt_key`), row
            ``i`` for completion ``i``.
        filter_metric: None (no DAPO filter), ``"accuracy"`` (the weighted sum of the
            ``user_columns`` reward functions, without the overlong punishment) or ``"reward"``
            (the combined reward of step 1).
        user_columns: the user's reward functions among the ``K`` columns (default: all).

    Raises:
        ValueError: an unknown aggregation or filter metric, or what the estimator refuses.
    """
    if filter_metric is not None and filter_metric not in FILTER_METRICS:
        raise ValueError(
            f"filter_metric must be None or one of {list(FILTER_METRICS)}, got {filter_metric!r}"
        )
    rewards = combine_rewards(
        rewards_per_func, weights, aggregation=aggregation, num_generations=num_generations
    ).cpu()
    lone = lone_response_rows(rewards, num_generations)
    estimator_rewards = rewards
    if policy is LoneRowPolicy.LEAVE_OUT:
        estimator_rewards = rewards.masked_fill(lone, torch.nan)
    group_ids = torch.arange(rewards.numel()) // num_generations
    result = estimator(
        estimator_rewards,
        group_ids,
        clusters=clusters,
        token_counts=token_counts,
        prompt_keys=prompt_keys,
        update=update,
    )
    advantages = result.advantages
    if policy.follows_trl_grpo:
        # GRPOTrainer counts a lone completion in the batch's std, then gives it advantage 0.
        advantages = advantages.masked_fill(lone.to(advantages.device), 0.0)

    metrics = {key: float(value) for key, value in result.metrics.items()}
    metrics["grpo_zero_signal_group_frac"] = float(result.metrics["zero_variance_group_frac"])
    dropped = None
    if filter_metric is not None:
        compared = rewards
        if filter_metric == "accuracy":
            columns = slice(None) if user_columns is None else user_columns
            compared = combine_rewards(rewards_per_func[:, columns], weights[columns]).cpu()
        dropped = zero_variance_groups(compared, num_generations)
        metrics["filtered_group_frac"] = float(dropped.float().mean())
    return BatchAdvantages(
        rewards=rewards,
        estimator_rewards=estimator_rewards,
        advantages=advantages,
        metrics=metrics,
        dropped_groups=dropped,
        keeps_trls_advantages=policy.keeps_trls_advantages,
        num_generations=num_generations,
    )


def prompt_key(prompt: Any) -> int:
    """The key of a TRL prompt for an estimator that tracks prompts across steps (SPO): the
    :func:`~ebpo.estimators.validation.stable_key_hash` of its text, a plain prompt as it is, a
    conversation (a list of messages) as sorted-key JSON. Only text counts: an image in a message
    is written as its type name, so two prompts differing only in their images share a key."""
    if not isinstance(prompt, str):
        prompt = json.dumps(prompt, sort_keys=True, default=lambda value: type(value).__name__)
    return stable_key_hash(prompt)
