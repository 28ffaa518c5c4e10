"""James–Stein shrinkage baselines (Zeng, Zhou, Arora, Zanette, 2025, "Shrinking the Variance",
arXiv 2511.03710): JSPO, and JSPO++ with its :class:`ShrinkageSmoother`.

Both mix each response's leave-one-out group mean with the mean of the prompts' group means, with
a James–Stein weight λ. JSPO is stateless; JSPO++ smooths its λ and mean across steps. Notation:
group ``m`` has ``n_m`` valid responses with rewards ``r_{m,i}``, mean ``r̄_m`` and unbiased
variance ``s²_m``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ebpo.estimators.base import AdvantageEstimator, Batch
from ebpo.estimators.functional import (
    leave_one_group_out_moments,
    leave_one_out_mean,
    masked,
    time_weighted_ema_decay,
)
from ebpo.estimators.registry import register_estimator
from ebpo.estimators.state import MAX_STATE_MEAN
from ebpo.estimators.validation import check_outputs
from ebpo.utils.checks import check_choice

__all__ = ["JSPO", "JSPOPlusPlus", "ShrinkageSmoother"]

JSPO_LAMBDA_FORMS = ("released_code", "project_page")


@register_estimator("jspo")
class JSPO(AdvantageEstimator):
    """James–Stein shrinkage baseline (Zeng, Zhou, Arora, Zanette, 2025, "Shrinking the Variance",
    arXiv 2511.03710; code: github.com/guanning03/JSPO-Official, ``compute_jspo_outcome_advantage``
    in code/verl/trainer/ppo/core_algos.py). Batch statistics only.

    For response ``k`` of prompt ``i`` (``m_i`` valid responses; ``K`` prompts with a valid
    response in the batch):

        b_{i,k} = (1 − λ_i) · mean_{l≠k} r_{i,l}  +  λ_i · μ_{−i},      A_{i,k} = r_{i,k} − b_{i,k},

    where, over the OTHER prompts ``j ≠ i``: ``μ_{−i}`` is the mean of their group means (project
    page eq. 7), ``s_{−i}`` the population variance of their group means, and ``v_{−i}`` the mean
    of ``s²_j / m_j`` (unbiased group variance over group size) over those with ``m_j ≥ 2``. Then

    * ``lambda_form="released_code"`` (default; the authors' code, eps = 1e-6 there too):
      ``λ_i = v_{−i} / (v_{−i} + s_{−i} + eps)``;
    * ``lambda_form="project_page"``: ``λ_i = ((K − 1)/K) · v_{−i} / (v_{−i} + s_{−i} + eps)``,
      the project page's eq. 11 (which has no eps), ``K`` the number of PROMPTS in the batch.

    When ``v + s`` is ~0 this gives ``λ ≈ 0``: plain RLOO. Leaving out response ``k`` and prompt
    ``i`` keeps the baseline independent of ``r_{i,k}``: the policy gradient stays unbiased. No
    std normalisation.

    The released code is defined only for rows grouped in consecutive equal blocks of ``m ≥ 2``
    responses (it asserts ``m ≥ 2`` and cuts the batch by position); there ``μ_{−i}``, the mean of
    all the other prompts' responses in their code, is the mean of their means, and this estimator
    equals it to rounding (tests/estimators/test_james_stein.py). Elsewhere, our conventions: rows
    are grouped by id in any order; masked rows are dropped first; a prompt with a single valid response has
    no leave-one-out mean, so its baseline is ``μ_{−i}`` (reported λ = 1) and it is left out of
    ``v`` (no variance estimate) but not of ``μ`` and ``s``; with no other prompt (``K = 1``)
    ``λ = 0`` (plain RLOO; a lone response's baseline is 0) — the released code returns NaN there.

    Metrics: ``jspo_lambda_mean``, ``jspo_v_mean``, ``jspo_s_mean`` (over prompts; the authors log
    the same quantities as trace/js_lambda, trace/v_square, trace/s_square).
    """

    def __init__(
        self, *, lambda_form: str = "released_code", eps: float = 1e-6, nan_policy: str = "raise"
    ) -> None:
        super().__init__(eps=eps, nan_policy=nan_policy)
        self.lambda_form = check_choice("lambda_form", lambda_form, JSPO_LAMBDA_FORMS)

    def _compute(self, batch: Batch, *, update: bool):
        n = batch.group_count
        prompts = batch.nonempty
        multi = n > 1
        # μ_{−i}, s_{−i} over the other prompts' means; v_{−i} over the other prompts' s²/m.
        other_prompts, others_mean, others_var = leave_one_group_out_moments(
            batch.group_mean, prompts
        )
        _, others_noise, _ = leave_one_group_out_moments(_sampling_noise(batch), multi)

        lam = others_noise / (others_noise + others_var + self.eps)
        if self.lambda_form == "project_page":
            num_prompts = prompts.sum().to(n.dtype)
            lam = lam * (num_prompts - 1) / num_prompts.clamp(min=1)
        has_others = other_prompts > 0
        lam = torch.where(
            has_others, torch.where(multi, lam, torch.ones_like(lam)), torch.zeros_like(lam)
        )
        lam = torch.where(prompts, lam, torch.zeros_like(lam))

        loo = leave_one_out_mean(
            batch.rewards, batch.group_index, batch.group_count, batch.group_mean
        )
        lam_row = batch.per_row(lam)
        baseline = (1 - lam_row) * loo + lam_row * batch.per_row(
            torch.where(has_others, others_mean, torch.zeros_like(n))
        )
        metrics = {
            "jspo_lambda_mean": _mean_over_groups(lam, batch),
            "jspo_v_mean": _mean_over_groups(others_noise, batch),
            "jspo_s_mean": _mean_over_groups(others_var, batch),
        }
        return baseline, batch.rewards - baseline, lam_row, metrics


#: relative rounding allowed when checking the bounds of a loaded smoother state
_STATE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class ShrinkageSmoother:
    """The time-weighted EMA of ``jspo_plus_plus``'s per-step λ and mean (see
    :func:`ebpo.estimators.functional.time_weighted_ema_decay`), kept as running sums so that a
    step costs O(1) and a checkpoint resumes it exactly (the authors keep the whole history in process memory).

    ``weight = Σ_k Π_{i>k} d_i`` (the debiasing total), ``lambda_sum`` and ``mean_sum`` the same
    weighted sums of the observations; the smoothed values are their ratios.
    """

    steps: int = 0
    weight: float = 0.0
    lambda_sum: float = 0.0
    mean_sum: float = 0.0

    def after(self, lam: float, mean: float, coef: float) -> ShrinkageSmoother:
        """The smoother with one more step observed (self is unchanged)."""
        decay = time_weighted_ema_decay(self.steps + 1, coef)
        return ShrinkageSmoother(
            self.steps + 1,
            self.weight * decay + 1.0,
            self.lambda_sum * decay + lam,
            self.mean_sum * decay + mean,
        )

    @property
    def lam(self) -> float:
        return self.lambda_sum / self.weight if self.steps else 0.0

    @property
    def mean(self) -> float:
        return self.mean_sum / self.weight if self.steps else 0.0

    def state_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "weight": self.weight,
            "lambda_sum": self.lambda_sum,
            "mean_sum": self.mean_sum,
        }

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any], steps: int) -> ShrinkageSmoother:
        """Rebuild from :meth:`state_dict` (``steps``: its step count, already checked), refusing
        what no run produces: every step adds 1 to ``weight`` after decaying it by at most 1, so
        ``1 ≤ weight ≤ steps`` once a step was taken (all 0 before); λ lies in [0, 1], so
        ``0 ≤ lambda_sum ≤ weight``; everything is finite. Also refused: a smoothed mean
        ``mean_sum / weight`` beyond ``MAX_STATE_MEAN`` (1e150) in magnitude, with which later
        calls would overflow."""
        try:
            numbers = {key: state[key] for key in ("weight", "lambda_sum", "mean_sum")}
        except (KeyError, TypeError) as error:
            raise ValueError(
                f"state must have 'weight', 'lambda_sum', 'mean_sum'; missing {error}"
            ) from error
        for key, value in numbers.items():
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
            ):
                raise ValueError(f"{key} must be a finite number, got {value!r}")
        weight, lambda_sum = float(numbers["weight"]), float(numbers["lambda_sum"])
        if steps == 0 and any(numbers.values()):
            raise ValueError(
                f"a state with steps 0 must have weight, lambda_sum and mean_sum 0, got {numbers}"
            )
        slack = 1 + _STATE_TOLERANCE
        if steps and not 1 / slack <= weight <= steps * slack:
            raise ValueError(f"weight must lie in [1, steps] = [1, {steps}], got {weight!r}")
        if not -_STATE_TOLERANCE <= lambda_sum <= weight * slack:
            raise ValueError(
                f"lambda_sum must lie in [0, weight] = [0, {weight!r}] (λ is in [0, 1]), got {lambda_sum!r}"
            )
        mean_sum = float(numbers["mean_sum"])
        if abs(mean_sum) > MAX_STATE_MEAN * max(weight, 1.0):
            raise ValueError(
                f"mean_sum = {mean_sum!r} is too large: the smoothed mean mean_sum/weight must be at "
                f"most {MAX_STATE_MEAN:g} in magnitude, or the advantages' statistics overflow "
                "float64 (every later call would fail)"
            )
        return cls(steps, weight, lambda_sum, mean_sum)


@register_estimator("jspo_plus_plus")
class JSPOPlusPlus(AdvantageEstimator):
    """JSPO++: one James–Stein λ and one shrinkage target for the whole batch, smoothed across
    steps (the authors' ``compute_jspo_plus_plus_outcome_advantage``, JSPO-Official,
    code/verl/trainer/ppo/core_algos.py; selected there by ``algorithm.adv_estimator=jspo_plus_plus``
    and smoothed by ``algorithm.js_smooth_coef``).

    Over the ``K`` prompts with a valid response in the batch: ``μ_t`` = mean of the group means,
    ``s_t`` = population variance of the group means, ``v_t`` = mean of ``s²_j / m_j`` over the
    prompts with ``m_j ≥ 2`` (0 if none), and ``λ_t = v_t / (v_t + s_t + eps)``. With
    ``smooth_coef`` > 0, the λ and μ used are the time-weighted EMAs (W&B's chart smoothing, as
    the authors; see :func:`ebpo.estimators.functional.time_weighted_ema_decay`) of every step's ``λ_t`` and
    ``μ_t`` so far, this batch included; with 0 (the default, as ``js_smooth_coef`` in their
    config) they are this batch's. Then

        b_{i,k} = (1 − λ) · mean_{l≠k} r_{i,l}  +  λ · μ,      A_{i,k} = r_{i,k} − b_{i,k}.

    Unlike ``jspo`` nothing is left out: λ and μ include prompt ``i`` (and response ``k``), so
    the baseline is not independent of ``r_{i,k}`` — the trade the authors make for one stable λ.
    No std normalisation.

    Args:
        smooth_coef: in [0, 1]; the authors' ``js_smooth_coef`` (0.99 in their run scripts). The
            EMA's base weight is ``min(sqrt(smooth_coef), 0.999)``.
        eps: added to ``v + s`` (1e-6, the authors' default).
        nan_policy: ``"raise"`` or ``"mask"`` (see :class:`AdvantageEstimator`).

    Equal to the authors' function to rounding on the batches it accepts (consecutive blocks of
    the same number ``m ≥ 2`` of responses; their μ is the mean of all rewards, which is then the
    mean of the group means); see tests/estimators/test_james_stein.py. Elsewhere, our
    conventions: masked rows are dropped first; a prompt with one valid response has no leave-one-out mean, so its
    baseline is μ (reported λ = 1) and it stays out of ``v``; a batch with no valid row is not a
    step. Deliberate difference: the smoothing history is in :meth:`state_dict` (saved with the
    checkpoint, so a resumed run continues it); the authors keep it in process memory, so their
    resumed runs restart the smoothing.

    Metrics: ``jspo_lambda`` and ``jspo_mean`` (the λ and μ used), ``jspo_lambda_batch`` and
    ``jspo_batch_mean`` (this batch's, before smoothing), ``jspo_v``, ``jspo_s``.
    """

    checks_own_outputs = True
    state_keys = ("steps", "weight", "lambda_sum", "mean_sum")

    def __init__(
        self, *, smooth_coef: float = 0.0, eps: float = 1e-6, nan_policy: str = "raise"
    ) -> None:
        super().__init__(eps=eps, nan_policy=nan_policy)
        if (
            isinstance(smooth_coef, bool)
            or not isinstance(smooth_coef, (int, float))
            or not 0.0 <= smooth_coef <= 1.0  # also refuses NaN
        ):
            raise ValueError(
                f"smooth_coef must be a number in [0, 1] (0 = no smoothing), got {smooth_coef!r}"
            )
        self.smooth_coef = float(smooth_coef)
        self.reset()

    @property
    def carries_state(self) -> bool:
        """Only with smoothing: ``smooth_coef=0`` uses this batch's λ and μ alone."""
        return self.smooth_coef > 0

    @property
    def decays_per_call(self) -> bool:
        """The smoothing's EMA weighs calls."""
        return self.smooth_coef > 0

    # ------------------------------------------------------------------ state
    def reset(self) -> None:
        with self._state_lock:
            self.smoother = ShrinkageSmoother()

    @property
    def steps(self) -> int:
        return self.smoother.steps

    def _saved_state(self) -> dict[str, Any]:
        return self.smoother.state_dict()

    def _restored_state(self, state: Mapping[str, Any], steps: int) -> dict[str, Any]:
        """The smoother of a saved state, refusing sums no run can produce (see
        :meth:`ShrinkageSmoother.from_state_dict`)."""
        return {"smoother": ShrinkageSmoother.from_state_dict(state, steps)}

    def _state_options(self) -> tuple[str, ...]:
        """``smooth_coef`` (the sums mean something else under another); ``eps`` may differ."""
        return ("smooth_coef",)

    # ------------------------------------------------------------------ advantages
    def _compute(self, batch: Batch, *, update: bool):
        n = batch.group_count
        prompts = batch.nonempty.to(n.dtype)
        multi = (n > 1).to(n.dtype)
        num_prompts, num_multi = float(prompts.sum()), float(multi.sum())
        if num_prompts == 0:  # nothing observed: not a step
            zeros = torch.zeros_like(batch.rewards)
            return (
                zeros,
                zeros,
                zeros,
                self._metrics(self.smoother, self.smoother.lam, self.smoother.mean, 0.0, 0.0),
            )

        batch_mean = float((batch.group_mean * prompts).sum()) / num_prompts
        spread = float((prompts * (batch.group_mean - batch_mean) ** 2).sum()) / num_prompts
        noise = float((_sampling_noise(batch) * multi).sum()) / max(num_multi, 1.0)
        batch_lambda = noise / (noise + spread + self.eps)
        smoother = self.smoother.after(batch_lambda, batch_mean, self.smooth_coef)
        lam, target = (
            (smoother.lam, smoother.mean) if self.smooth_coef > 0 else (batch_lambda, batch_mean)
        )

        lam_group = torch.where(n > 1, torch.full_like(n, lam), torch.ones_like(n))
        lam_group = torch.where(n > 0, lam_group, torch.zeros_like(n))
        lam_row = batch.per_row(lam_group)
        loo = leave_one_out_mean(
            batch.rewards, batch.group_index, batch.group_count, batch.group_mean
        )
        baseline = (1 - lam_row) * loo + lam_row * target
        advantage = batch.rewards - baseline

        # Validate everything before committing: an overflowing batch must not reach the smoother.
        check_outputs(
            batch,
            advantages=masked(advantage, batch.weight),
            baselines=masked(baseline, batch.weight),
            shrinkage=lam_group,
        )
        metrics = self._metrics(smoother, lam, target, noise, spread, batch_lambda, batch_mean)
        sums = smoother.state_dict()
        overflowed = sorted(k for k, v in {**metrics, **sums}.items() if not math.isfinite(v))
        if overflowed:
            raise ValueError(
                f"the statistics {overflowed} of this batch overflow float64; rescale the rewards"
            )
        if update:
            self.smoother = smoother
        return baseline, advantage, lam_row, metrics

    @staticmethod
    def _metrics(
        smoother: ShrinkageSmoother,
        lam: float,
        mean: float,
        noise: float,
        spread: float,
        batch_lambda: float | None = None,
        batch_mean: float | None = None,
    ) -> dict[str, float]:
        return {
            "jspo_lambda": lam,
            "jspo_mean": mean,
            "jspo_lambda_batch": lam if batch_lambda is None else batch_lambda,
            "jspo_batch_mean": mean if batch_mean is None else batch_mean,
            "jspo_v": noise,
            "jspo_s": spread,
            "jspo_steps": float(smoother.steps),
        }


def _sampling_noise(batch: Batch) -> torch.Tensor:
    """``[K]`` the variance of each group's mean, ``s²_m / n_m`` (0 for fewer than 2 responses)."""
    n = batch.group_count
    return torch.where(n > 1, batch.group_variance / n.clamp(min=1), torch.zeros_like(n))


def _mean_over_groups(per_group: torch.Tensor, batch: Batch) -> float:
    nonempty = batch.nonempty
    return float(per_group[nonempty].mean()) if nonempty.any() else 0.0
