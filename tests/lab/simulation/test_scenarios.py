"""ebpo.lab.simulation.scenarios: the Beta mixtures' moments and Theorem 3.3's closed forms."""

from __future__ import annotations

import pytest
import torch

from ebpo.lab import simulation as sim


def test_mixture_moments_match_samples():
    gen = torch.Generator().manual_seed(0)
    for mixture in sim.SCENARIOS.values():
        theta = sim.sample_success_rates(mixture, (200_000,), gen)
        moments = sim.mixture_moments(mixture)
        assert abs(float(theta.mean()) - moments["mu"]) < 5e-3
        assert abs(float(theta.var()) - moments["tau2"]) < 5e-3
        assert abs(float((theta * (1 - theta)).mean()) - moments["sigma2"]) < 5e-3


def test_theorem_3_3_closed_form():
    t = sim.theorem_3_3(sim.SCENARIOS["mixed"], 4)  # Beta(2,2): μ=.5, τ²=.05, σ²=.2
    assert t["mu"] == pytest.approx(0.5)
    assert t["tau2"] == pytest.approx(0.05)
    assert t["sigma2"] == pytest.approx(0.2)
    assert t["shrinkage"] == pytest.approx(0.5)
    assert t["mse_shrinkage"] == pytest.approx(0.025)
    assert t["mse_group_mean"] == pytest.approx(0.05)


def test_theorem_3_3_leave_one_out_and_bad_group_size():
    t = sim.theorem_3_3(sim.SCENARIOS["mixed"], 4)
    assert t["mse_leave_one_out"] == pytest.approx(0.2 / 3)
    with pytest.raises(ValueError, match="group_size must be an integer >= 2, got 1"):
        sim.theorem_3_3(sim.SCENARIOS["easy"], 1)


@pytest.mark.parametrize(
    "weights, alphas, betas, match",
    [
        ((0.5, 0.6), (1.0, 1.0), (1.0, 1.0), "weights must be non-negative and sum to 1"),
        ((1.0,), (1.0, 2.0), (1.0,), "equal length"),
        ((1.0,), (0.0,), (1.0,), "alphas and betas must be positive"),
    ],
)
def test_beta_mixture_rejects_bad_parameters(weights, alphas, betas, match):
    with pytest.raises(ValueError, match=match):
        sim.BetaMixture(weights, alphas, betas)
