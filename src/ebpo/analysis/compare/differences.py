"""Paired differences of a metric between an estimator and the baseline, seed by seed.

For a metric, an estimator and the seeds both have, at every step all these runs logged:
``d_s(t) = x_s(t) − b_s(t)`` (estimator minus baseline on seed ``s``), its mean over seeds with a
95 % Student-t interval and the p-value of the paired t-test (:mod:`ebpo.analysis.paired`). And
three summaries, each a paired difference over seeds:

* ``last_step``: ``d_s`` at the last common step;
* ``auc``: the curve's mean level, ``∫ x_s dt / (t_last − t_first)`` by the trapezoid rule over the
  common steps, minus the baseline's (the value itself when there is one step);
* ``steps_to_baseline_final``: the first step (interpolated) at which the curve reaches the
  baseline's value at its last common step, minus the step at which the baseline first does
  (negative: faster). A curve that never does counts at the last step (censored: the difference
  is then conservative); ``reached`` says how many did. For metrics where higher is better.

Values are the raw logged ones, or a trailing moving mean over ``smooth`` logged values
(:func:`ebpo.utils.plotting.moving_average`) taken over each run's own log before the steps are
matched. Then :func:`count_intervals` counts the intervals computed, those excluding 0 and those
Holm's correction over all of them still leaves excluding 0.

Any finite values give finite statistics: they are computed on the values divided by a power of 2
near the largest (:func:`value_scale`: no sum or square overflows, rewards near ±1.7e308
included) and multiplied back; a difference that is itself beyond float64 is refused
(ValueError) before anything is written. :func:`flags` marks what makes a verdict empty: seed
pairs whose curves are identical at every common step, a metric that took one value at every
step of every run (both from two common steps on).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from ebpo.analysis.compare.pairing import Pairs, common_steps
from ebpo.analysis.compare.runs import Run
from ebpo.analysis.paired import (
    holm_rejections,
    paired_difference,
    steps_to_target,
    t_quantile_975,
    t_two_sided_p,
)
from ebpo.utils.plotting import moving_average

__all__ = [
    "SUMMARIES", "compare_metric", "count_intervals", "curve", "flags", "logged_values",
    "paired_p_value", "value_scale",
]  # fmt: skip

SUMMARIES = ("last_step", "auc", "steps_to_baseline_final")


def curve(
    run: Run, metric: str, steps: Sequence[int], smooth: int, scale: float = 1.0
) -> list[float]:
    """``run``'s ``metric`` divided by ``scale`` at ``steps``, after a trailing mean over
    ``smooth`` logged values; ValueError when a value the mean takes in is not finite."""
    logged = sorted(run.metrics[metric])
    raw = [run.metrics[metric][s] / scale for s in logged]
    if smooth > 1:
        bad = [s for s in logged if s <= steps[-1] and not math.isfinite(run.metrics[metric][s])]
        if bad:
            raise ValueError(
                f"RUN: {str(run.path)!r} logged {metric!r} as NaN or nothing at step(s) "
                f"{', '.join(map(str, bad[:5]))}, which --smooth {smooth} averages in: a "
                "compared value must be a finite number"
            )
    lookup = dict(zip(logged, moving_average(raw, smooth), strict=True))
    return [lookup[s] for s in steps]


def value_scale(values: Iterable[float]) -> float:
    """A power of 2 near the largest magnitude among ``values`` (1 for none): the statistics are
    computed on the values divided by it, so that no sum or square overflows or underflows
    whatever their size, and multiplied back (dividing by a power of 2 is exact)."""
    largest = max((abs(v) for v in values if math.isfinite(v)), default=0.0)
    return math.ldexp(1.0, math.frexp(largest)[1] - 1) if largest > 0 else 1.0  # from 1 to 2


def paired_p_value(stats: dict[str, float]) -> float:
    """Two-sided p of the paired t-test behind a :func:`paired_difference` result: ``t = mean /
    (sd / sqrt(n))``, ``sd / sqrt(n)`` recovered from the half-width ``t_{0.975, n−1} · sd /
    sqrt(n)``. NaN for fewer than two pairs; 1 when every difference is 0, 0 when they are all
    equal and not 0."""
    n = int(stats["n"])
    if n < 2:
        return math.nan
    half = (stats["ci_high"] - stats["ci_low"]) / 2
    standard_error = half / t_quantile_975(n - 1)
    if standard_error == 0:
        return 1.0 if stats["mean_diff"] == 0 else 0.0
    return t_two_sided_p(stats["mean_diff"] / standard_error, n - 1)


def _row(
    values: Sequence[float], reference: Sequence[float], scale: float = 1.0, **extra: Any
) -> dict[str, Any]:
    """The paired difference of ``values`` and ``reference`` (both divided by ``scale``) in the
    metric's units."""
    stats = paired_difference(values, reference)
    return {
        **extra,
        "pairs": stats["n"],
        "mean_diff": stats["mean_diff"] * scale,
        "ci_low": stats["ci_low"] * scale,
        "ci_high": stats["ci_high"] * scale,
        "p_value": paired_p_value(stats),
        "estimator_mean": sum(values) / len(values) * scale,
        "baseline_mean": sum(reference) / len(reference) * scale,
    }


def _area(steps: Sequence[int], values: Sequence[float]) -> float:
    if len(steps) == 1:
        return values[0]
    area = sum(
        (steps[i + 1] - steps[i]) * (values[i] + values[i + 1]) / 2 for i in range(len(steps) - 1)
    )
    return area / (steps[-1] - steps[0])


def _reach(steps: Sequence[int], values: Sequence[float], target: float) -> tuple[float, bool]:
    step = steps_to_target(steps, values, target)
    return (float(steps[-1]), False) if step is None else (step, True)


def compare_metric(pairs: Pairs, estimator: str, metric: str, smooth: int) -> dict[str, Any]:
    """The per-step rows, the summaries, the curves and the flags of ``estimator`` against the
    baseline on ``metric`` (see the module docstring); ValueError when the runs share no step of
    it or a difference is beyond float64 (values near its largest, 1.8e308)."""
    seeds = pairs.seeds(estimator)
    mine = [pairs.runs[estimator][s] for s in seeds]
    theirs = [pairs.runs[pairs.baseline][s] for s in seeds]
    steps = common_steps([*mine, *theirs], metric)
    scale = value_scale(v for run in (*mine, *theirs) for v in run.metrics[metric].values())
    x = [curve(run, metric, steps, smooth, scale) for run in mine]
    b = [curve(run, metric, steps, smooth, scale) for run in theirs]
    per_step = [
        _row([c[i] for c in x], [c[i] for c in b], scale, step=step) for i, step in enumerate(steps)
    ]
    reached = [_reach(steps, c, r[-1]) for c, r in zip(x, b, strict=True)]
    baseline_reached = [_reach(steps, r, r[-1]) for r in b]
    summaries = {
        "last_step": {**per_step[-1]},
        "auc": _row([_area(steps, c) for c in x], [_area(steps, c) for c in b], scale, step=None),
        "steps_to_baseline_final": {
            **_row([s for s, _ in reached], [s for s, _ in baseline_reached], step=None),
            "reached": sum(ok for _, ok in reached),
        },
    }
    _check_finite(metric, estimator, pairs.baseline, [*per_step, *summaries.values()])
    return {
        "estimator": estimator,
        "metric": metric,
        "seeds": seeds,
        "steps": per_step,
        "summaries": summaries,
        "flags": flags(seeds, x, b, steps, logged_values([*mine, *theirs], metric)),
        "curves": {
            "step": steps,
            estimator: {s: [v * scale for v in c] for s, c in zip(seeds, x, strict=True)},
            pairs.baseline: {s: [v * scale for v in c] for s, c in zip(seeds, b, strict=True)},
        },
    }


def flags(
    seeds: Sequence[str],
    x: Sequence[Sequence[float]],
    b: Sequence[Sequence[float]],
    steps: Sequence[int],
    logged: Sequence[float],
) -> dict[str, Any]:
    """What makes a verdict on these curves empty, both from two common steps on (one value per
    run says nothing of a curve): ``identical_pairs``, the seeds whose estimator and baseline
    curves are equal at every common step (the same run given twice?), and ``never_moved``,
    whether every value ``logged`` (every run's, at every step it logged the metric, common or
    not) is one and the same (a constant says nothing about training)."""
    if len(steps) < 2:
        return {"identical_pairs": [], "never_moved": False}
    return {
        "identical_pairs": [s for s, c, r in zip(seeds, x, b, strict=True) if c == r],
        "never_moved": len(set(logged)) == 1 and math.isfinite(logged[0]),
    }


def logged_values(runs: Sequence[Run], metric: str) -> list[float]:
    """Every value of ``metric`` that ``runs`` logged, at every step (NaN included)."""
    return [value for run in runs for value in run.metrics[metric].values()]


def _check_finite(metric: str, estimator: str, baseline: str, rows: Sequence[dict]) -> None:
    """ValueError when a statistic overflowed float64 (its interval with two pairs or more)."""
    keys = ("mean_diff", "estimator_mean", "baseline_mean")
    for row in rows:
        wanted = keys + (("ci_low", "ci_high") if row["pairs"] >= 2 else ())
        if not all(math.isfinite(row[k]) for k in wanted):
            raise ValueError(
                f"RUN: {estimator} − {baseline} on {metric!r}: the difference or its interval "
                "is beyond the largest float64 (1.8e308); divide the metric by a constant "
                "before comparing"
            )


def count_intervals(comparisons: Sequence[dict[str, Any]], alpha: float = 0.05) -> dict[str, Any]:
    """Mark every interval (per step and summary rows with two pairs or more) ``holm``: whether
    it still excludes 0 after Holm's correction over all of them; return the counts."""
    rows = [
        row
        for comparison in comparisons
        for row in (
            *comparison["steps"],
            *(comparison["summaries"][name] for name in SUMMARIES if name != "last_step"),
        )
        if row["pairs"] >= 2
    ]
    rejected = holm_rejections([row["p_value"] for row in rows], alpha)
    for row, keep in zip(rows, rejected, strict=True):
        row["holm"] = keep
    for comparison in comparisons:  # the last step's interval is a per-step one, counted once
        comparison["summaries"]["last_step"]["holm"] = comparison["steps"][-1].get("holm", False)
    return {
        "alpha": alpha,
        "intervals": len(rows),
        "excluding_zero": sum(_excludes_zero(row) for row in rows),
        "expected_by_chance": alpha * len(rows),
        "holm_excluding_zero": sum(rejected),
    }


def _excludes_zero(row: dict[str, Any]) -> bool:
    return row["ci_low"] > 0 or row["ci_high"] < 0
