"""KRPO: a Kalman-filter baseline, in the form of grpo-composer's ``KalmanAdvantageFunction``
(``grpo_composer/core/advantages/kalman.py``; its verl estimator ``kalman_grpo``): one scalar filter
over the batch means of successive calls, its estimate the baseline and its posterior standard
deviation the scale."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from ebpo.estimators.base import AdvantageEstimator, Batch
from ebpo.estimators.functional import masked
from ebpo.estimators.registry import register_estimator
from ebpo.estimators.validation import check_outputs
from ebpo.utils.checks import check_positive, is_real

__all__ = ["KRPO"]


@register_estimator("krpo")
class KRPO(AdvantageEstimator):
    """KRPO: ``A = (r − x̂) / (√P + eps)``, ``(x̂, P)`` the Kalman filter's state after this batch.

    The filter tracks the mean reward with constant dynamics. Its measurement is ``m``, the mean
    reward of the batch's valid responses. The first measurement sets ``x̂ = m, P = 1``; each later
    one predicts ``P⁻ = P + Q`` and updates with the gain ``K = P⁻ / (P⁻ + R)``:
    ``x̂ ← x̂ + K (m − x̂)``, ``P ← (1 − K) P⁻``. Every response of the batch shares the baseline
    ``x̂``: the groups do not enter. ``P`` falls toward ``≈ √(QR)``, so the advantages grow to
    ``≈ (r − x̂) / (QR)^{1/4}`` (18× with the defaults), as in the reference.

    Args:
        process_noise: ``Q`` (1e-5, the reference's default and its KRPO config's).
        measurement_noise: ``R`` (1e-2, likewise).
        eps: added to ``√P`` (1e-8, the reference's default).

    A call with ``update=False`` returns the advantages with the state this batch would give, and
    keeps the state. Metrics: ``krpo_estimate`` (``x̂``), ``krpo_variance`` (``P``).
    """

    checks_own_outputs = True
    state_keys = ("steps", "estimate", "variance")

    def __init__(
        self,
        *,
        process_noise: float = 1e-5,
        measurement_noise: float = 1e-2,
        eps: float = 1e-8,
        nan_policy: str = "raise",
    ) -> None:
        super().__init__(eps=eps, nan_policy=nan_policy)
        self.process_noise = check_positive("process_noise", process_noise)
        self.measurement_noise = check_positive("measurement_noise", measurement_noise)
        self.reset()

    @property
    def decays_per_call(self) -> bool:
        """True: each call is one step of the filter (``Q`` is added per call)."""
        return True

    def reset(self) -> None:
        with self._state_lock:
            self.estimate: float | None = None
            self.variance = 1.0
            self.steps = 0

    def filtered(self, measurement: float) -> tuple[float, float]:
        """``(x̂, P)`` after folding ``measurement`` into the current state."""
        if self.estimate is None:
            return measurement, 1.0
        predicted = self.variance + self.process_noise
        gain = predicted / (predicted + self.measurement_noise)
        return self.estimate + gain * (measurement - self.estimate), (1.0 - gain) * predicted

    def _compute(self, batch: Batch, *, update: bool):
        if batch.num_valid == 0:  # nothing measured: not a step
            zeros = torch.zeros_like(batch.rewards)
            return zeros, zeros, zeros, {}
        measurement = float(masked(batch.rewards, batch.weight).sum()) / batch.num_valid
        estimate, variance = self.filtered(measurement)
        baseline = torch.full_like(batch.rewards, estimate)
        advantage = masked(
            (batch.rewards - estimate) / (math.sqrt(variance) + self.eps), batch.weight
        )
        shrinkage = torch.zeros_like(advantage)
        check_outputs(
            batch,
            advantages=advantage,
            baselines=masked(baseline, batch.weight),
            shrinkage=shrinkage,
        )
        if update:
            self.estimate, self.variance, self.steps = estimate, variance, self.steps + 1
        return (
            baseline,
            advantage,
            shrinkage,
            {"krpo_estimate": estimate, "krpo_variance": variance},
        )

    # ------------------------------------------------------------------ state
    def _saved_state(self) -> dict[str, Any]:
        """``estimate`` (None before the first batch) and ``variance``."""
        return {"steps": self.steps, "estimate": self.estimate, "variance": self.variance}

    def _restored_state(self, state: Mapping[str, Any], steps: int) -> dict[str, Any]:
        estimate, variance = state.get("estimate"), state.get("variance")
        if estimate is not None and not (is_real(estimate) and math.isfinite(estimate)):
            raise ValueError(f"estimate must be a finite number or None, got {estimate!r}")
        if not (is_real(variance) and 0 < variance <= 1):
            raise ValueError(f"variance must be a number in (0, 1], got {variance!r}")
        if (estimate is None) != (steps == 0):
            raise ValueError(
                f"estimate is {estimate!r} after {steps} steps (None exactly before the first)"
            )
        return {
            "estimate": None if estimate is None else float(estimate),
            "variance": float(variance),
            "steps": steps,
        }

    def _state_options(self) -> tuple[str, ...]:
        return ("process_noise", "measurement_noise")
