"""The bandit studies: learning rates and priors.

:func:`learning_rate_study` compares the estimators each at its own best learning rate (chosen on
validation seeds) and all at an equal one; :func:`prior_study` compares history / batch / EMA /
per-cluster priors under shuffled and topic-ordered data (Proposition 3.8).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ebpo.lab.simulation.bandit import ORDERS, BanditConfig, make_bandit, run_bandit
from ebpo.lab.simulation.common import check_group_size, progress_bar
from ebpo.lab.simulation.specs import build_estimator, with_normalize
from ebpo.utils.checks import check_choice

__all__ = ["PRIOR_VARIANTS", "learning_rate_study", "prior_study"]


def _final(curve: np.ndarray, fraction: float = 0.1) -> float:
    """Mean of the last ``fraction`` of a learning curve (less noisy than its last point)."""
    k = max(1, int(round(len(curve) * fraction)))
    return float(np.mean(curve[-k:]))


def learning_rate_study(
    config: BanditConfig,
    *,
    estimators: Sequence[str],
    group_sizes: Sequence[int],
    learning_rates: Sequence[float],
    steps: int,
    validation_seeds: Sequence[int],
    report_seeds: Sequence[int],
    equal_lr: float | None = None,
    metric: str = "train_acc",
    progress: bool = False,
) -> dict[str, Any]:
    """Each estimator at its own best learning rate, and all at an equal one.

    Estimators scale advantages differently (group vs batch standardisation, none for Dr. GRPO,
    RLOO, JSPO), so one learning rate favours some of them. For every (estimator, G) all
    ``learning_rates`` are run on ``validation_seeds`` (different bandit instances and samples);
    the rate with the best final ``metric`` (mean of the last 10% of the curve) is then reported on
    ``report_seeds``, which played no part in the choice, together with the common rate ``equal_lr``
    (default: the middle of ``learning_rates``) for the equal-learning-rate table.

    Returns ``{"rows": [...], "curves": {(estimator, G, lr): [seeds, steps + 1]}, "best_lr":
    {(estimator, G): lr}, "equal_lr": lr}`` where rows hold ``estimator, G, lr, split, final,
    final_se, auc`` (auc: mean of the curve).
    """
    lrs = [float(x) for x in learning_rates]
    if len(lrs) < 1 or any(not (math.isfinite(x) and x > 0) for x in lrs):
        raise ValueError(f"learning_rates must be positive numbers, got {learning_rates!r}")
    if not validation_seeds or not report_seeds:
        raise ValueError("validation_seeds and report_seeds must be non-empty")
    if set(validation_seeds) & set(report_seeds):
        raise ValueError(
            "validation_seeds and report_seeds must be disjoint (choose the learning rate on held-out seeds)"
        )
    if metric not in ("train_acc", "heldout_acc"):
        raise ValueError(f"metric must be 'train_acc' or 'heldout_acc', got {metric!r}")
    equal = lrs[len(lrs) // 2] if equal_lr is None else float(equal_lr)
    for spec in estimators:
        build_estimator(spec)
    bandits = {s: make_bandit(config, s) for s in (*validation_seeds, *report_seeds)}
    curves: dict[tuple[str, int, float], np.ndarray] = {}
    rows: list[dict[str, Any]] = []

    def evaluate(spec: str, g: int, lr: float, split: str, seeds: Sequence[int]) -> None:
        stacked = np.stack(
            [
                run_bandit(bandits[s], spec, group_size=g, lr=lr, steps=steps, seed=s)[metric]
                for s in seeds
            ]
        )
        finals = np.array([_final(c) for c in stacked])
        se = float(finals.std(ddof=1) / math.sqrt(len(finals))) if len(finals) > 1 else float("nan")
        rows.append(
            {
                "estimator": spec,
                "G": g,
                "lr": lr,
                "split": split,
                "final": float(finals.mean()),
                "final_se": se,
                "auc": float(stacked.mean()),
            }
        )
        if split == "report":
            curves[(spec, g, lr)] = stacked

    best: dict[tuple[str, int], float] = {}
    configs = [(e, g) for e in estimators for g in group_sizes]
    for spec, g in progress_bar(configs, progress, "bandit lr sweep"):
        for lr in lrs:
            evaluate(spec, g, lr, "validation", validation_seeds)
        val = [
            r for r in rows if r["split"] == "validation" and r["estimator"] == spec and r["G"] == g
        ]
        best[(spec, g)] = max(val, key=lambda r: r["final"])["lr"]
        # Only the chosen rate and the common one are run on the report seeds.
        for lr in dict.fromkeys((best[(spec, g)], equal)):
            evaluate(spec, g, lr, "report", report_seeds)
    return {"rows": rows, "curves": curves, "best_lr": best, "equal_lr": equal}


#: (label, estimator spec, data order) of the prior study.
PRIOR_VARIANTS: tuple[tuple[str, str, str], ...] = (
    ("grpo / shuffled", "grpo", "shuffled"),
    ("ebpo history / shuffled", "ebpo", "shuffled"),
    ("ebpo batch / shuffled", "ebpo_batch", "shuffled"),
    ("ebpo ema / shuffled", "ebpo:prior=ema,half_life=3", "shuffled"),
    ("ebpo per-cluster / shuffled", "ebpo:per_cluster=true", "shuffled"),
    ("ebpo history / topic", "ebpo", "topic"),
    ("ebpo batch / topic", "ebpo_batch", "topic"),
    ("ebpo ema / topic", "ebpo:prior=ema,half_life=3", "topic"),
    ("grpo / topic", "grpo", "topic"),
)


def prior_study(
    config: BanditConfig,
    *,
    variants: Sequence[tuple[str, str, str]] = PRIOR_VARIANTS,
    group_size: int = 4,
    learning_rates: Sequence[float],
    steps: int,
    validation_seeds: Sequence[int],
    report_seeds: Sequence[int],
    normalize: str | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Which prior, which data order: history / batch / EMA priors, topic-ordered vs shuffled data,
    per-cluster priors (Proposition 3.8).

    Proposition 3.8: a single prior's squared error against the prompts' success rates is, under a
    random order, ``Var(θ) = E_k[Var(θ | k)] + Var_k(μ_k)``; a topic-coherent stream lets the prior
    track ``μ_k`` and removes the second term — if the prior can follow (a batch or EMA prior; the
    history prior averages over all past topics). Per-cluster priors remove it without reordering.
    Each variant gets its own learning rate from ``learning_rates`` on ``validation_seeds``.
    ``normalize`` (if given) overrides the EBPO variants' normalisation: with ``"batch"`` or
    ``"center"`` and equal group sizes a single prior's mean cancels out of the advantages (only S
    matters), so the prior's accuracy only shows in the gradient with ``"none"`` or per-cluster
    priors.

    Returns ``{"rows": [...], "curves": {label: {key: [seeds, T]}}, "best_lr": {label: lr}}``; rows
    hold ``variant, lr, final, final_se, prior_error, theta_var, shrinkage, zero_signal``.
    """
    check_group_size(group_size)
    variants = [(label, with_normalize(spec, normalize), order) for label, spec, order in variants]
    for _, spec, order in variants:
        build_estimator(spec)
        check_choice("order", order, ORDERS)
    bandits = {s: make_bandit(config, s) for s in (*validation_seeds, *report_seeds)}
    rows, curves, best = [], {}, {}
    for label, spec, order in progress_bar(variants, progress, "bandit priors"):
        scores: dict[float, float] = {}
        for lr in learning_rates:
            runs = [
                run_bandit(
                    bandits[s], spec, group_size=group_size, lr=lr, steps=steps, order=order, seed=s
                )
                for s in validation_seeds
            ]
            scores[lr] = float(np.mean([_final(r["train_acc"]) for r in runs]))
        lr = max(scores, key=lambda rate: scores[rate])
        best[label] = lr
        runs = [
            run_bandit(
                bandits[s], spec, group_size=group_size, lr=lr, steps=steps, order=order, seed=s
            )
            for s in report_seeds
        ]
        stacked = {k: np.stack([r[k] for r in runs]) for k in runs[0]}
        curves[label] = stacked
        finals = np.array([_final(c) for c in stacked["train_acc"]])
        rows.append(
            {
                "variant": label,
                "estimator": spec,
                "order": order,
                "lr": lr,
                "final": float(finals.mean()),
                "final_se": float(finals.std(ddof=1) / math.sqrt(len(finals)))
                if len(finals) > 1
                else float("nan"),
                "prior_error": float(np.nanmean(stacked["prior_error"]))
                if np.isfinite(stacked["prior_error"]).any()
                else float("nan"),
                "theta_var": float(np.mean(stacked["theta_var"])),
                "shrinkage": float(np.nanmean(stacked["shrinkage"]))
                if np.isfinite(stacked["shrinkage"]).any()
                else float("nan"),
                "zero_signal": float(np.mean(stacked["zero_signal"])),
            }
        )
    return {"rows": rows, "curves": curves, "best_lr": best}
