"""Prompt-difficulty scenarios and the theory they are checked against.

Prompt success rates ``θ`` follow a mixture of Beta distributions (:class:`BetaMixture`;
:data:`SCENARIOS` holds four: easy, hard, mixed and bimodal). :func:`mixture_moments` gives ``μ = E[θ]``,
``τ² = Var(θ)`` and ``σ² = E[θ(1 − θ)]`` exactly; :func:`theorem_3_3` the paper's predictions for
groups of ``G`` Bernoulli rewards.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ebpo.lab.simulation.common import check_group_size

__all__ = ["SCENARIOS", "BetaMixture", "mixture_moments", "sample_success_rates", "theorem_3_3"]


@dataclass(frozen=True)
class BetaMixture:
    """A mixture of Beta distributions for prompt success rates: ``Σ_j w_j · Beta(a_j, b_j)``."""

    weights: tuple[float, ...]
    alphas: tuple[float, ...]
    betas: tuple[float, ...]

    def __post_init__(self) -> None:
        if not (len(self.weights) == len(self.alphas) == len(self.betas)) or not self.weights:
            raise ValueError("weights, alphas and betas must be non-empty and of equal length")
        if any(w < 0 for w in self.weights) or not math.isclose(
            sum(self.weights), 1.0, rel_tol=1e-9
        ):
            raise ValueError(f"weights must be non-negative and sum to 1, got {self.weights}")
        if any(a <= 0 for a in self.alphas) or any(b <= 0 for b in self.betas):
            raise ValueError("alphas and betas must be positive")


#: The four prompt-difficulty distributions the simulator compares: mostly solved, mostly failed,
#: broad, and a mixture of solved and failed prompts.
SCENARIOS: dict[str, BetaMixture] = {
    "easy": BetaMixture((1.0,), (6.0,), (2.0,)),  # mean 0.75
    "hard": BetaMixture((1.0,), (1.0,), (7.0,)),  # mean 0.125, many all-zero groups
    "mixed": BetaMixture((1.0,), (2.0,), (2.0,)),  # mean 0.5, broad
    "bimodal": BetaMixture((0.5, 0.5), (0.5, 6.0), (6.0, 0.5)),  # mostly solved or mostly failed
}


def mixture_moments(mixture: BetaMixture) -> dict[str, float]:
    """Exact moments of ``θ`` under a Beta mixture.

    ``μ = E[θ]``, ``τ² = Var(θ)`` (between-prompt variance) and ``σ² = E[θ(1 − θ)]`` (the expected
    within-prompt Bernoulli variance), using ``E[θ] = a/(a+b)`` and ``E[θ²] = a(a+1)/((a+b)(a+b+1))``
    per component.
    """
    w = np.asarray(mixture.weights)
    a = np.asarray(mixture.alphas)
    b = np.asarray(mixture.betas)
    m1 = float((w * a / (a + b)).sum())
    m2 = float((w * a * (a + 1) / ((a + b) * (a + b + 1))).sum())
    return {"mu": m1, "tau2": m2 - m1 * m1, "sigma2": m1 - m2}


def theorem_3_3(mixture: BetaMixture, group_size: int) -> dict[str, float]:
    """Theorem 3.3's predictions for groups of ``G`` Bernoulli rewards.

    ``S = (σ²/G)/(σ²/G + τ²)``; ``MSE(r̄) = σ²/G`` (GRPO's baseline); ``MSE(V_S) = (1 − S)σ²/G``
    (the Bayes risk of the shrinkage baseline with the TRUE prior parameters); the leave-one-out
    mean (RLOO) has ``σ²/(G − 1)``. Exact here because ``E[r̄ − θ | θ] = 0`` kills the cross term.
    """
    check_group_size(group_size)
    moments = mixture_moments(mixture)
    noise = moments["sigma2"] / group_size
    s = noise / (noise + moments["tau2"])
    return {
        **moments,
        "shrinkage": s,
        "mse_group_mean": noise,
        "mse_shrinkage": (1 - s) * noise,
        "mse_leave_one_out": moments["sigma2"] / (group_size - 1) if group_size > 1 else math.inf,
    }


def sample_success_rates(
    mixture: BetaMixture, shape: Sequence[int], generator: torch.Generator
) -> torch.Tensor:
    """``θ`` of the given shape drawn from the mixture (float64)."""
    weights = torch.tensor(mixture.weights, dtype=torch.float64)
    n = int(np.prod(shape))
    component = torch.multinomial(weights, n, replacement=True, generator=generator)
    alpha = torch.tensor(mixture.alphas, dtype=torch.float64)[component]
    beta = torch.tensor(mixture.betas, dtype=torch.float64)[component]
    # Beta via two Gammas; torch's Gamma sampler has no generator argument, so draw from a seeded
    # NumPy generator derived from ours to stay reproducible.
    rng = np.random.default_rng(int(torch.randint(0, 2**62, (1,), generator=generator)))
    x = rng.gamma(alpha.numpy())
    y = rng.gamma(beta.numpy())
    theta = torch.from_numpy(x / (x + y))
    return theta.reshape(tuple(shape))
