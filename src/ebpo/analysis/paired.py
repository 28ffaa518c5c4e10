"""Paired statistics, shared by ``ebpo bench`` (its cells) and ``ebpo compare`` (a user's runs):
Student-t intervals of a mean and of a paired difference, the two-sided p-value of a paired t-test
and the Holm correction over many of them, and steps-to-target on an evaluation curve.

Paired design: for each seed every method starts from the same warm start and trains on the same
prompt stream, so ``d_s = x_s − y_s`` (method minus reference on seed ``s``) removes what the seeds
share (the warm start's quality, the difficulty of the prompts drawn). The interval is
``mean(d) ± t_{0.975, n−1} · sd(d) / sqrt(n)`` with ``sd`` the sample (n−1) standard deviation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ebpo.utils.checks import check_int

__all__ = [
    "holm_rejections",
    "mean_ci",
    "paired_difference",
    "steps_to_target",
    "t_quantile_975",
    "t_two_sided_p",
]

# t_{0.975, df} for df = 1..30 (scipy.stats.t.ppf(0.975, df)); larger df use the Cornish-Fisher
# expansion below (error < 1e-6 for df > 30). A table keeps the lab free of a scipy dependency.
_T975 = (
    12.706204736, 4.30265273, 3.182446305, 2.776445105, 2.570581836, 2.446911851, 2.364624252,
    2.306004135, 2.262157163, 2.228138852, 2.20098516, 2.17881283, 2.160368656, 2.144786688,
    2.131449546, 2.119905299, 2.109815578, 2.10092204, 2.093024054, 2.085963447, 2.079613845,
    2.073873068, 2.06865761, 2.063898562, 2.059538553, 2.055529439, 2.051830516, 2.048407142,
    2.045229642, 2.042272456,
)  # fmt: skip
_Z975 = 1.959963984540054


def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom."""
    check_int("df", df, low=1)
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


def mean_ci(values: Sequence[float | None]) -> dict[str, float]:
    """``{"mean", "ci", "n"}``: the mean and the half-width of its two-sided 95% Student-t
    interval, ``t_{0.975, n-1} · s / sqrt(n)``. ``ci`` is NaN for one value; everything is NaN for
    none. None and NaN values are ignored."""
    clean = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    n = len(clean)
    if n == 0:
        return {"mean": math.nan, "ci": math.nan, "n": 0}
    mean = sum(clean) / n
    if n == 1:
        return {"mean": mean, "ci": math.nan, "n": 1}
    return {"mean": mean, "ci": t_quantile_975(n - 1) * _sd(clean, mean) / math.sqrt(n), "n": n}


def _sd(values: Sequence[float], mean: float) -> float:
    """The sample standard deviation, the deviations scaled by the largest before squaring: no
    square overflows (deviations of 1e200) or underflows to 0 (deviations of 1e-200)."""
    deviations = [v - mean for v in values]
    largest = max(abs(d) for d in deviations)
    if largest == 0 or not math.isfinite(largest):
        return largest
    return largest * math.sqrt(sum((d / largest) ** 2 for d in deviations) / (len(values) - 1))


def paired_difference(values: Sequence[float], reference: Sequence[float]) -> dict[str, float]:
    """Mean of ``values[s] − reference[s]`` over seeds with its 95% Student-t interval:
    ``{"mean_diff", "ci_low", "ci_high", "n"}`` (interval NaN for fewer than two pairs)."""
    if len(values) != len(reference):
        raise ValueError(
            f"values and reference must pair up seed by seed, got {len(values)} and {len(reference)} values"
        )
    stats = mean_ci([v - r for v, r in zip(values, reference, strict=True)])
    return {
        "mean_diff": stats["mean"],
        "ci_low": stats["mean"] - stats["ci"],
        "ci_high": stats["mean"] + stats["ci"],
        "n": stats["n"],
    }


def steps_to_target(steps: Sequence[float], values: Sequence[float], target: float) -> float | None:
    """The first step at which the curve reaches ``target``, interpolating linearly between
    evaluation points (a curve evaluated every 25 steps still gives a step between them); None
    when it never does."""
    if len(steps) != len(values):
        raise ValueError(f"steps and values differ in length: {len(steps)} vs {len(values)}")
    previous = None
    for step, value in zip(steps, values, strict=True):
        if value is None or not math.isfinite(value):
            continue
        if value >= target:
            if previous is None or previous[1] >= target:
                return float(step)
            (s0, v0) = previous
            return s0 + (target - v0) / (value - v0) * (step - s0)
        previous = (step, value)
    return None


def t_two_sided_p(t: float, df: int) -> float:
    """``P(|T| >= |t|)`` for Student's t with ``df`` degrees of freedom, exact for integer ``df``
    (Abramowitz & Stegun 26.7.3-4): with ``θ = atan(|t| / sqrt(df))`` and ``c = cos²θ``,
    ``A = sinθ · (1 + c/2 + 1·3/(2·4) c² + …)`` (``(df − 2)/2`` terms after the first) for even
    ``df``, ``A = (2/π) · (θ + sinθ cosθ · (1 + 2/3 c + 2·4/(3·5) c² + …))`` (``(df − 3)/2``
    terms after the first; ``A = 2θ/π`` for ``df = 1``) for odd ``df``, and ``p = 1 − A``.
    NaN for a NaN ``t``; 0 for an infinite one."""
    check_int("df", df, low=1)
    if math.isnan(t):
        return math.nan
    if math.isinf(t):
        return 0.0
    theta = math.atan(abs(t) / math.sqrt(df))
    c = math.cos(theta) ** 2
    if df % 2 == 0:
        term = total = 1.0
        for k in range(1, (df - 2) // 2 + 1):
            term *= c * (2 * k - 1) / (2 * k)
            total += term
        area = math.sin(theta) * total
    elif df == 1:
        area = 2 * theta / math.pi
    else:
        term = total = 1.0
        for k in range(1, (df - 3) // 2 + 1):
            term *= c * (2 * k) / (2 * k + 1)
            total += term
        area = 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)
    return min(1.0, max(0.0, 1.0 - area))


def holm_rejections(p_values: Sequence[float], alpha: float = 0.05) -> list[bool]:
    """Which of ``p_values`` Holm's step-down procedure rejects at family-wise level ``alpha``:
    sorted ascending, ``p_(i)`` (i = 1..m) is rejected while ``p_(j) <= alpha / (m − j + 1)`` for
    every ``j <= i``; the first one that fails stops the procedure. NaN values are never rejected
    and count in ``m`` (an interval that could not be computed is still a comparison made)."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: (math.isnan(p_values[i]), p_values[i]))
    rejected = [False] * m
    for rank, index in enumerate(order):
        p = p_values[index]
        if math.isnan(p) or p > alpha / (m - rank):
            break
        rejected[index] = True
    return rejected
