"""Running statistics for the EBPO prior: Welford moments with parallel merge and optional decay.

One small class, :class:`RunningMoments`, serves the three priors of :class:`ebpo.EBPO`:

* ``history`` — plain Welford/Chan accumulation over the whole run (paper, Algorithm 1);
* ``batch``   — a fresh accumulator for each call (the authors' public code);
* ``ema``     — before each step the accumulated weight and squared deviations are multiplied by
  ``γ = 0.5 ** (1 / half_life)``, so an observation made ``half_life`` steps ago counts half as
  much as a new one. With ``γ = 1`` this is exactly ``history``.

Variances are population variances (``M2 / count``), as in the authors' code; a statistic with
fewer than two observations has variance 0 (its ``M2`` is 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ebpo.estimators.validation import check_state_keys

__all__ = [
    "MAX_STATE_COUNT",
    "MAX_STATE_MEAN",
    "RunningMoments",
    "batch_moments",
    "check_step_count",
    "pooled_group_moments",
]

#: The largest count (of responses, groups or steps) a loaded state may hold: 2**53, the last
#: integer from which float64 still counts exactly (2**53 + 1 rounds back to 2**53, so a count
#: there stops growing, and the running sums lose the weight of every new observation). A run
#: would need 9e15 responses to get there: a state beyond it (``count: 1e308``, ``steps: 10**30``)
#: was not written by a run.
MAX_STATE_COUNT = 2**53

#: The largest |mean| (and standard deviation) a loaded state may describe. Folding a batch into
#: running moments adds ``δ²·w`` to M2, with ``δ`` the difference of the means and ``w`` up to the
#: batch size: at 1e150 that is 1e300 per unit of weight, which leaves room for batches of 1e8
#: responses; at 1e154 and beyond it overflows float64 on the first ordinary batch, so a state
#: there (``mean: 1e308``) would make every later call fail. Rewards the batch checks accept
#: (|r| below ~1e154) but that push a prior past this bound are refused at load with the rest.
MAX_STATE_MEAN = 1e150


def batch_moments(
    values: torch.Tensor, weight: torch.Tensor | None = None
) -> tuple[float, float, float]:
    """``(count, mean, M2)`` of a 1-D tensor, by two passes (exact to rounding).

    ``weight`` (0/1 per entry) selects entries without copying them out; weighted entries must be
    finite, the others may hold anything finite.
    """
    values = values.to(torch.float64)
    if weight is None:
        count = float(values.numel())
        if count == 0:
            return 0.0, 0.0, 0.0
        mean = values.mean()
        return count, float(mean), float(((values - mean) ** 2).sum())
    count = float(weight.sum())
    if count == 0:
        return 0.0, 0.0, 0.0
    mean = (values * weight).sum() / count
    return count, float(mean), float((((values - mean) ** 2) * weight).sum())


def pooled_group_moments(
    count: torch.Tensor, mean: torch.Tensor, unbiased_variance: torch.Tensor
) -> tuple[float, float, float]:
    """``(count, mean, M2)`` of all the rows of several groups, from per-group summaries.

    Chan et al.'s combination over groups: ``N = Σ n_k``, ``mean = Σ n_k·m_k / N``,
    ``M2 = Σ (n_k − 1)·s²_k + Σ n_k·(m_k − mean)²``. Costs O(groups) instead of O(rows).
    """
    total = float(count.sum())
    if total == 0:
        return 0.0, 0.0, 0.0
    overall = (count * mean).sum() / total
    within = ((count - 1).clamp(min=0) * unbiased_variance).sum()
    between = (count * (mean - overall) ** 2).sum()
    return total, float(overall), float(within + between)


@dataclass
class RunningMoments:
    """Count, mean and M2 (sum of squared deviations) of a stream of numbers.

    ``update`` folds a whole batch in at once with Chan et al.'s parallel formula, which equals
    Welford's one-at-a-time recursion up to rounding:

        n = n_a + n_b,   δ = mean_b − mean_a,
        mean = mean_a + δ·n_b/n,   M2 = M2_a + M2_b + δ²·n_a·n_b/n.

    ``merge`` applies the same formula to another accumulator, so statistics gathered on several
    workers combine to what one worker would have computed on all of the data.
    """

    count: float = 0.0
    mean: float = 0.0
    m2: float = 0.0

    @property
    def variance(self) -> float:
        """Population variance ``M2 / count`` (0 with no observation)."""
        return self.m2 / self.count if self.count > 0 else 0.0

    def add_moments(self, count: float, mean: float, m2: float) -> RunningMoments:
        """Fold in a batch summarised by its own ``(count, mean, M2)``.

        Raises ValueError, leaving this accumulator unchanged, if the result would not be finite
        (rewards so large that their squared deviations overflow float64): a NaN or inf moment
        would silently poison every later estimate.
        """
        if count <= 0:
            return self
        total = self.count + count
        delta = mean - self.mean
        new_mean = self.mean + delta * (count / total)
        # δ·(δ·w) rather than δ²·w: with nothing seen yet (w = 0) a huge δ must not give inf·0 = NaN.
        new_m2 = self.m2 + m2 + delta * (delta * (self.count * count / total))
        if not all(math.isfinite(v) for v in (total, new_mean, new_m2)):
            raise ValueError(
                f"running statistics overflow float64 when adding (count={count!r}, mean={mean!r}, M2={m2!r}) "
                f"to (count={self.count!r}, mean={self.mean!r}, M2={self.m2!r}); rescale the rewards"
            )
        self.count, self.mean, self.m2 = total, new_mean, new_m2
        return self

    def update(self, values: torch.Tensor, weight: torch.Tensor | None = None) -> RunningMoments:
        """Fold in every entry of ``values`` (1-D), or those with ``weight`` 1."""
        return self.add_moments(*batch_moments(values, weight))

    def merge(self, other: RunningMoments) -> RunningMoments:
        """Combine with another accumulator in place (Chan et al., 1979)."""
        if not isinstance(other, RunningMoments):
            raise ValueError(f"merge expects another RunningMoments, got {type(other).__name__}")
        return self.add_moments(other.count, other.mean, other.m2)

    def decay(self, factor: float) -> RunningMoments:
        """Down-weight everything seen so far by ``factor`` in (0, 1]; the mean is unchanged."""
        self.count *= factor
        self.m2 *= factor
        return self

    def copy(self) -> RunningMoments:
        return RunningMoments(self.count, self.mean, self.m2)

    def state_dict(self) -> dict[str, float]:
        return {"count": self.count, "mean": self.mean, "m2": self.m2}

    @classmethod
    def from_state_dict(
        cls, state: dict[str, float], name: str = "moments", *, whole_count: bool = False
    ) -> RunningMoments:
        """Rebuild from :meth:`state_dict`; refuses what no sequence of updates can produce:
        a key other than ``count``, ``mean``, ``m2``; non-finite or negative count/M2, a count
        above :data:`MAX_STATE_COUNT` (or, with ``whole_count``, one that is not a whole number:
        what a stream without decay counts), or a mean or M2 without any observation; and moments
        so large that the next update would overflow float64: ``|mean|`` above
        :data:`MAX_STATE_MEAN`, or a variance ``m2 / count`` above its square. ``name`` (e.g.
        ``global.rewards``) names the statistic in the messages."""
        check_state_keys(name, state, ("count", "mean", "m2"))
        try:
            moments = cls(*(_as_float(state[key]) for key in ("count", "mean", "m2")))
        except (KeyError, TypeError, ValueError, OverflowError) as error:
            raise ValueError(
                f"running moments state must have finite numbers 'count', 'mean', 'm2' ({name}); got {state!r}"
            ) from error
        if not all(math.isfinite(v) for v in (moments.count, moments.mean, moments.m2)):
            raise ValueError(f"running moments state must be finite ({name}); got {state!r}")
        if moments.count < 0 or moments.m2 < 0:
            raise ValueError(
                f"running moments state must have count >= 0 and m2 >= 0 ({name}); got {state!r}"
            )
        if moments.count > MAX_STATE_COUNT:
            raise ValueError(
                f"{name}.count = {moments.count!r} is more than 2**53 (the most responses or "
                "groups float64 counts exactly); no run counts that far"
            )
        if whole_count and not moments.count.is_integer():
            raise ValueError(
                f"{name}.count = {moments.count!r} must be a whole number: without decay "
                "(prior 'history' or 'batch') every response and group counts 1"
            )
        if moments.count == 0 and (moments.mean != 0 or moments.m2 != 0):
            raise ValueError(
                f"running moments state with count 0 must have mean 0 and m2 0 ({name}); got {state!r}"
            )
        if abs(moments.mean) > MAX_STATE_MEAN:
            raise ValueError(
                f"{name}.mean = {moments.mean!r} is too large: |mean| must be at most "
                f"{MAX_STATE_MEAN:g}, or the next update overflows float64 (every later call "
                "would fail)"
            )
        if moments.count > 0 and not moments.m2 / moments.count <= MAX_STATE_MEAN**2:
            raise ValueError(
                f"{name}.m2 = {moments.m2!r} is too large for count {moments.count!r}: the "
                f"variance m2/count must be at most {MAX_STATE_MEAN**2:g}, or later updates "
                "overflow float64"
            )
        return moments


def check_step_count(steps: object) -> int:
    """``steps`` of a saved state: an integer in ``[0, MAX_STATE_COUNT]``; ValueError otherwise."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be a non-negative integer, got {_shown(steps)}")
    if steps > MAX_STATE_COUNT:
        raise ValueError(
            "steps must be at most 2**53 (the most float64 counts exactly; no run takes more "
            f"steps), got {_shown(steps)}"
        )
    return steps


def _shown(value: object) -> str:
    # repr() of an integer of more than 4,300 digits raises ValueError
    if isinstance(value, int) and not -(10**20) < value < 10**20:
        try:
            return f"an integer of {len(str(abs(value)))} digits"
        except ValueError:  # beyond Python's int-to-str limit
            return "an integer of more than 4,300 digits"
    return repr(value)


def _as_float(value: object) -> float:
    # float("3") and float(True) would accept a string or a bool; a saved moment is a number.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"expected a number, got {type(value).__name__} {value!r}")
    return float(value)  # OverflowError for an int beyond float64 (10**400)
