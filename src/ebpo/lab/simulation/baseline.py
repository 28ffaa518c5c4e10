"""Experiment 1, baseline quality (Theorem 3.3): how close each estimator's baseline comes to the
true success rate, next to the closed forms.

Prompt success rates ``θ ~`` a Beta mixture, Bernoulli rewards, groups of ``G``. For every
estimator: MSE of its baseline against ``θ``, the fraction of groups with no signal and the
variance of the advantages, next to Theorem 3.3's Bayes risk ``R(w) = (1 − w)²σ²/G + w²τ²``,
minimised at ``w = S`` with ``R(S) = (1 − S)σ²/G``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ebpo.estimators import GRPO, RLOO, AdvantageEstimator, ReinforcePlusPlusBaseline
from ebpo.estimators.functional import empirical_bayes_baseline, shrinkage_factor
from ebpo.lab.simulation.common import (
    check_group_size,
    progress_bar,
    seeded_generator,
    zero_signal_frac,
)
from ebpo.lab.simulation.scenarios import (
    SCENARIOS,
    BetaMixture,
    sample_success_rates,
    theorem_3_3,
)
from ebpo.lab.simulation.specs import build_estimator, fresh_prompts
from ebpo.utils.checks import check_positive_int

__all__ = ["BASELINE_ESTIMATORS", "ORACLE", "baseline_quality", "closed_form_mse"]

#: The estimator specs of the experiment by default.
BASELINE_ESTIMATORS = ("grpo", "rloo", "jspo", "ebpo", "ebpo_batch", "ebpo_within", "ebpo_bb")

#: The ``estimator`` of the rows of the oracle shrinkage baseline (the TRUE prior; not a spec).
ORACLE = "oracle_eb"


def baseline_quality(
    *,
    scenarios: Mapping[str, BetaMixture] | None = None,
    group_sizes: Sequence[int] = (2, 4, 8, 16, 32),
    estimators: Sequence[str] = BASELINE_ESTIMATORS,
    steps: int = 20,
    prompts_per_step: int = 256,
    seed: int = 0,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Baseline MSE against the true success rate, zero-signal groups and advantage variance.

    For each scenario and ``G``, ``steps`` batches of ``prompts_per_step`` prompts are drawn once and
    fed to every estimator in order (common random numbers, so differences between rows are not
    sampling noise; running priors accumulate as in training). Rows also hold an ``oracle_eb`` entry:
    ``V = (1 − S)r̄ + S·μ`` with the TRUE ``μ, σ², τ²`` — Theorem 3.3 says its MSE is
    ``(1 − S)σ²/G`` exactly, whereas the estimators must estimate the prior (the paper's pooled σ²
    is ``μ(1 − μ) = σ² + τ²`` and raw τ² is ``τ² + σ²/G``, so their S differs from the optimum).

    Returns one row per (scenario, G, estimator) with keys ``scenario, G, estimator, mse, mse_se``
    (Monte-Carlo standard error over groups), ``predicted_mse`` (closed form where one exists: oracle,
    group mean, leave-one-out; NaN otherwise), ``thm33_mse, group_mean_mse, shrinkage`` (mean S, or
    JSPO's λ), ``optimal_shrinkage, zero_signal_frac, adv_var``.
    """
    scenarios = dict(SCENARIOS if scenarios is None else scenarios)
    check_positive_int("steps", steps)
    check_positive_int("prompts_per_step", prompts_per_step)
    for g in group_sizes:
        check_group_size(g)
    for spec in estimators:
        build_estimator(spec)  # fail early on a bad spec
    rows: list[dict[str, Any]] = []
    configs = [(s, g) for s in scenarios for g in group_sizes]
    for index, (scenario, g) in enumerate(progress_bar(configs, progress, "baseline quality")):
        mixture = scenarios[scenario]
        theory = theorem_3_3(mixture, g)
        gen = seeded_generator(seed, 1, index)
        theta = sample_success_rates(mixture, (steps, prompts_per_step), gen)
        draws = torch.rand((steps, prompts_per_step, g), generator=gen, dtype=torch.float64)
        rewards = (draws < theta[..., None]).double()
        rows.append(_oracle_row(scenario, g, rewards, theta, theory))
        for spec in estimators:
            rows.append(_estimator_row(scenario, g, spec, rewards, theta, theory))
    return rows


def _oracle_row(
    scenario: str,
    g: int,
    rewards: torch.Tensor,
    theta: torch.Tensor,
    theory: Mapping[str, float],
) -> dict[str, Any]:
    """The row of the shrinkage baseline with the TRUE prior (``rewards`` ``[steps, M, G]``,
    ``theta`` ``[steps, M]``)."""
    true_shrinkage = shrinkage_factor(
        theory["sigma2"], theory["tau2"], torch.tensor([float(g)], dtype=torch.float64), 1e-12
    )
    oracle = empirical_bayes_baseline(rewards.mean(-1), theory["mu"], true_shrinkage)
    oracle_err = ((oracle - theta) ** 2).flatten()
    nan = float("nan")
    return _baseline_row(
        scenario,
        g,
        ORACLE,
        oracle_err,
        theory["mse_shrinkage"],
        theory["shrinkage"],
        theory,
        nan,
        nan,
    )


def _estimator_row(
    scenario: str,
    g: int,
    spec: str,
    rewards: torch.Tensor,
    theta: torch.Tensor,
    theory: Mapping[str, float],
) -> dict[str, Any]:
    """The row of a fresh estimator built from ``spec``, fed every step's batch in order."""
    steps, prompts_per_step = theta.shape
    group_ids = torch.arange(prompts_per_step).repeat_interleave(g)
    theta_rows = theta.repeat_interleave(g, dim=1)  # [steps, M*G]
    est = build_estimator(spec)
    err, shrink, zero_signal, adv_var = [], [], [], []
    for t in range(steps):
        res = est(rewards[t].flatten(), group_ids, prompt_keys=fresh_prompts(est, group_ids, t))
        err.append((res.baselines.double() - theta_rows[t]) ** 2)
        shrink.append(float(res.shrinkage.double().mean()))
        advantages = res.advantages.double()
        zero_signal.append(zero_signal_frac(advantages.view(prompts_per_step, g)))
        adv_var.append(float(advantages.var()))
    # Per-group errors (rows of a group share one baseline except for leave-one-out ones).
    per_group = torch.stack(err).view(steps, prompts_per_step, g).mean(-1).flatten()
    return _baseline_row(
        scenario,
        g,
        spec,
        per_group,
        closed_form_mse(est, theory),
        float(np.mean(shrink)),
        theory,
        float(np.mean(zero_signal)),
        float(np.mean(adv_var)),
    )


def closed_form_mse(estimator: AdvantageEstimator, theory: Mapping[str, float]) -> float:
    """The MSE of ``estimator``'s baseline against ``θ`` where theory gives it (``theory`` from
    :func:`~ebpo.lab.simulation.scenarios.theorem_3_3`): ``σ²/G`` for the group mean (GRPO,
    Dr. GRPO, REINFORCE++ with baseline), ``σ²/(G − 1)`` for RLOO's leave-one-out mean; NaN for
    estimated priors (no closed form: compare with the oracle)."""
    if isinstance(estimator, (GRPO, ReinforcePlusPlusBaseline)):
        return theory["mse_group_mean"]
    if isinstance(estimator, RLOO):
        return theory["mse_leave_one_out"]
    return float("nan")


def _baseline_row(
    scenario: str,
    g: int,
    estimator: str,
    errors: torch.Tensor,
    predicted: float,
    shrink: float,
    theory: Mapping[str, float],
    zero_signal: float,
    adv_var: float,
) -> dict[str, Any]:
    errors = errors.double()
    return {
        "scenario": scenario,
        "G": g,
        "estimator": estimator,
        "mse": float(errors.mean()),
        "mse_se": float(errors.std() / math.sqrt(errors.numel())),
        "predicted_mse": predicted,
        "thm33_mse": theory["mse_shrinkage"],
        "group_mean_mse": theory["mse_group_mean"],
        "shrinkage": shrink,
        "optimal_shrinkage": theory["shrinkage"],
        "zero_signal_frac": zero_signal,
        "adv_var": adv_var,
    }
