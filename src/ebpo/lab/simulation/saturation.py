"""Experiment 2, saturated failure (Theorem 3.2, Corollary 3.5): which estimators still give
all-zero groups a signal, and what batch normalisation does to it.

Theorem 3.2: EBPO's raw advantage of an all-zero group is ``−S·μ``. Centring over the batch turns
the penalty into ``−S·r̄_batch``: it only exists relative to the rest of the batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ebpo.estimators import EBPO, make_estimator
from ebpo.lab.simulation.common import (
    SIGNAL_TOL,
    check_group_size,
    progress_bar,
    seeded_generator,
)
from ebpo.lab.simulation.scenarios import SCENARIOS, BetaMixture, sample_success_rates
from ebpo.lab.simulation.specs import build_estimator, fresh_prompts
from ebpo.utils.checks import check_positive_int

__all__ = ["SATURATION_ESTIMATORS", "penalty_curve", "saturation"]

#: The estimator specs of the experiment by default.
SATURATION_ESTIMATORS = (
    "grpo", "dr_grpo", "rloo", "jspo", "reinforce_pp", "ebpo", "ebpo_center", "ebpo_none", "ebpo_bb",
)  # fmt: skip


def saturation(
    *,
    scenarios: Mapping[str, BetaMixture] | None = None,
    group_size: int = 4,
    estimators: Sequence[str] = SATURATION_ESTIMATORS,
    steps: int = 20,
    prompts_per_step: int = 256,
    seed: int = 0,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Signal given to all-zero groups, with and without batch normalisation.

    Each scenario is run for ``steps`` batches; then one extra "all-fail" batch (every prompt has
    ``θ = 0``, e.g. a batch of impossible prompts) is fed with the prior built on that history.

    Row keys: ``scenario, estimator, failed_frac`` (all-zero groups / groups),
    ``failed_signal_frac`` (of those, fraction with a non-zero advantage), ``failed_adv`` (mean
    advantage of their responses, after normalisation), ``failed_raw`` (mean raw advantage
    ``r − V = −V``), ``predicted_raw`` (Theorem 3.2: ``−S·μ_glob``; only for EBPO),
    ``predicted_centred`` (after centring, ``−S·r̄_batch``), and the same signal fraction on the
    all-fail batch (``allfail_signal_frac``, ``allfail_adv``).

    Why centring changes the penalty: with equal group sizes S is the same for every group, so the
    batch mean of the raw advantages ``a = r − (1 − S)r̄_m − Sμ`` is ``S(r̄_batch − μ)``; an all-zero
    group's ``−Sμ`` becomes ``−Sμ − S(r̄_batch − μ) = −S·r̄_batch``. The prior mean μ cancels: the
    penalty is set by how well the REST of the batch did, and vanishes when the whole batch fails.
    """
    scenarios = dict(SCENARIOS if scenarios is None else scenarios)
    check_group_size(group_size)
    check_positive_int("steps", steps)
    check_positive_int("prompts_per_step", prompts_per_step)
    rows: list[dict[str, Any]] = []
    configs = list(scenarios)
    for index, scenario in enumerate(progress_bar(configs, progress, "saturation")):
        gen = seeded_generator(seed, 2, index)
        theta = sample_success_rates(scenarios[scenario], (steps, prompts_per_step), gen)
        draws = torch.rand(
            (steps, prompts_per_step, group_size), generator=gen, dtype=torch.float64
        )
        rewards = (draws < theta[..., None]).double()
        for spec in estimators:
            rows.append(_saturation_row(scenario, spec, rewards))
    return rows


def _saturation_row(scenario: str, spec: str, rewards: torch.Tensor) -> dict[str, Any]:
    """One row of :func:`saturation`: a fresh estimator built from ``spec`` fed every batch of
    ``rewards`` (``[steps, M, G]``) in order, then the all-fail batch."""
    steps, prompts_per_step, g = rewards.shape
    group_ids = torch.arange(prompts_per_step).repeat_interleave(g)
    failed = rewards.sum(-1) == 0  # [steps, M]
    batch_mean = rewards.mean(dim=(1, 2))  # [steps]
    est = build_estimator(spec)
    adv_sum = raw_sum = pred_raw = pred_centred = 0.0
    n_failed = n_signal = 0
    for t in range(steps):
        res = est(rewards[t].flatten(), group_ids, prompt_keys=fresh_prompts(est, group_ids, t))
        rows_failed = failed[t].repeat_interleave(g)
        adv = res.advantages.double()
        n_failed += int(failed[t].sum())
        signal = (adv.view(prompts_per_step, g).abs() > SIGNAL_TOL).any(-1)
        n_signal += int(signal[failed[t]].sum())
        adv_sum += float(adv[rows_failed].sum())
        raw_sum += float((-res.baselines.double())[rows_failed].sum())
        s = res.shrinkage.double()[rows_failed]
        pred_raw += float((-s * res.metrics.get("prior_mean", float("nan"))).sum())
        pred_centred += float((-s * batch_mean[t]).sum())
    n_rows = max(n_failed * g, 1)
    zeros = torch.zeros(prompts_per_step * g, dtype=torch.float64)
    allfail = est(zeros, group_ids, prompt_keys=fresh_prompts(est, group_ids, steps)).advantages
    allfail_signal = (allfail.double().view(prompts_per_step, g).abs() > SIGNAL_TOL).any(-1)
    # Theorem 3.2's −S·μ is checked where μ is the reported ``prior_mean``: EBPO itself.
    # EBPO-BB (a subclass) shrinks toward its fitted Beta prior's mean α/(α + β) instead
    # (Beta(1, 1) during its warm-up), which it does not report as ``prior_mean``.
    predicts = type(est) is EBPO
    return {
        "scenario": scenario,
        "G": g,
        "estimator": spec,
        "failed_frac": n_failed / (steps * prompts_per_step),
        "failed_signal_frac": n_signal / max(n_failed, 1),
        "failed_adv": adv_sum / n_rows,
        "failed_raw": raw_sum / n_rows,
        "predicted_raw": pred_raw / n_rows if predicts else float("nan"),
        "predicted_centred": pred_centred / n_rows if predicts else float("nan"),
        "allfail_signal_frac": float(allfail_signal.double().mean()),
        "allfail_adv": float(allfail.mean()),
    }


def penalty_curve(
    *,
    means: Sequence[float] = tuple(np.linspace(0.05, 0.95, 19)),
    concentration: float = 4.0,
    group_size: int = 4,
    steps: int = 5,
    prompts_per_step: int = 256,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Corollary 3.5 as a curve: the advantage of all-zero groups against the mean success rate.

    For each ``μ`` in ``means``, θ ~ Beta(μ·c, (1 − μ)·c) with ``c = concentration``; EBPO is run
    with ``normalize`` none / center / batch on the same rewards. Rows: ``mu, shrinkage`` (mean S
    on all-zero groups), ``predicted_raw`` (−S·μ_glob), ``raw``, ``centred``, ``normalised`` (mean
    advantage of all-zero groups' responses), ``failed_frac``.
    """
    check_group_size(group_size)
    check_positive_int("steps", steps)
    check_positive_int("prompts_per_step", prompts_per_step)
    if not (isinstance(concentration, (int, float)) and concentration > 0):
        raise ValueError(f"concentration must be a positive number, got {concentration!r}")
    if any(not 0 < m < 1 for m in means):
        raise ValueError(f"means must lie strictly between 0 and 1, got {list(means)}")
    g = group_size
    group_ids = torch.arange(prompts_per_step).repeat_interleave(g)
    rows = []
    for index, mu in enumerate(means):
        mixture = BetaMixture((1.0,), (mu * concentration,), ((1 - mu) * concentration,))
        gen = seeded_generator(seed, 5, index)
        theta = sample_success_rates(mixture, (steps, prompts_per_step), gen)
        draws = torch.rand((steps, prompts_per_step, g), generator=gen, dtype=torch.float64)
        rewards = (draws < theta[..., None]).double()
        failed_rows = (rewards.sum(-1) == 0).repeat_interleave(g, dim=1)  # [steps, M*G]
        row: dict[str, Any] = {"mu": float(mu), "failed_frac": float(failed_rows.double().mean())}
        for label, mode in (("raw", "none"), ("centred", "center"), ("normalised", "batch")):
            est = make_estimator("ebpo", normalize=mode)
            adv, shrink, predicted = [], [], []
            for t in range(steps):
                res = est(rewards[t].flatten(), group_ids)
                f = failed_rows[t]
                adv.append(res.advantages.double()[f])
                shrink.append(res.shrinkage.double()[f])
                predicted.append(-res.shrinkage.double()[f] * res.metrics["prior_mean"])
            any_failed = bool(failed_rows.any())
            row[label] = float(torch.cat(adv).mean()) if any_failed else float("nan")
            if mode == "none":
                row["shrinkage"] = float(torch.cat(shrink).mean()) if any_failed else float("nan")
                row["predicted_raw"] = (
                    float(torch.cat(predicted).mean()) if any_failed else float("nan")
                )
        rows.append(row)
    return rows
