"""The replay's plots (PNG, via :mod:`ebpo.utils.plotting`; docs/replay.md says how to read them):

* ``zero_signal.png`` — three panels over the steps: the share of groups in which an estimator
  gives every response a zero advantage; the input's all-fail and all-pass shares (the groups GRPO
  cannot learn from); the mean advantage each estimator gives the responses of all-fail groups
  (GRPO: 0; below 0: those failures are pushed down);
* ``shrinkage.png`` — the mean shrinkage per step and estimator (0 for estimators without one);
* ``nonzero_advantage.png`` — per estimator, the share of the run's responses with a non-zero
  advantage (point) and the 5th–95th percentile of that share over the steps (bar).

Runs longer than :data:`SMOOTH_ABOVE` steps are drawn as a trailing moving average (the window is
in each title); the CSV holds the raw values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ebpo.utils.plotting import moving_average, plot_intervals, plot_lines, plot_panels

__all__ = ["PLOTS", "SMOOTH_ABOVE", "write_plots"]

PLOTS = ("zero_signal.png", "shrinkage.png", "nonzero_advantage.png")
SMOOTH_ABOVE = 60
Record = dict[str, Any]


def _window(steps: int) -> int:
    return 1 if steps <= SMOOTH_ABOVE else max(2, steps // 40)


def _series(
    records: Sequence[Record], value: Callable[[Record], float], window: int
) -> tuple[list[int], list[float]]:
    return [r["step"] for r in records], moving_average([float(value(r)) for r in records], window)


def _weighted_series(
    records: Sequence[Record], name: str, field: str, weight: str, window: int
) -> tuple[list[int], list[float]]:
    """A per-step mean over some responses (``field``, over ``weight`` responses), averaged over
    the window's responses (steps without any count for nothing; NaN when a window has none)."""
    weights = np.array([r[weight] for r in records], dtype=float)
    values = np.array([r["estimators"][name][field] or 0.0 for r in records], dtype=float)
    totals = np.convolve(values * weights, np.ones(window))[: len(records)]
    counts = np.convolve(weights, np.ones(window))[: len(records)]
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(counts > 0, totals / counts, np.nan)
    return [r["step"] for r in records], means.tolist()


def _suffix(window: int) -> str:
    return "" if window == 1 else f" (moving average, {window} steps)"


def write_plots(out_dir: Path, records: Sequence[Record]) -> list[Path]:
    """Write :data:`PLOTS` to ``out_dir``; return their paths."""
    names = list(records[0]["estimators"])
    window = _window(len(records))
    suffix = _suffix(window)

    def per_estimator(field: str) -> dict[str, tuple[list[int], list[float]]]:
        return {
            name: _series(records, lambda r, n=name: r["estimators"][n][field], window)
            for name in names
        }

    inputs = {
        "all-fail groups": _series(records, lambda r: r["all_fail_groups"] / r["groups"], window),
        "all-pass groups": _series(records, lambda r: r["all_pass_groups"] / r["groups"], window),
    }
    failed = {
        name: _weighted_series(
            records, name, "all_fail_advantage_mean", "all_fail_responses", window
        )
        for name in names
    }
    paths = [
        plot_panels(
            out_dir / PLOTS[0],
            {
                "share of groups where every advantage is 0": per_estimator(
                    "zero_signal_group_frac"
                ),
                "share of groups with all rewards equal": inputs,
                "mean advantage in all-fail groups": failed,
            },
            ncols=3,
            title="Zero-signal groups per step" + suffix,
        ),
        plot_lines(
            out_dir / PLOTS[1],
            per_estimator("shrinkage_mean"),
            title="Mean shrinkage per step" + suffix,
            ylabel="weight on the prior (EBPO) / other prompts (JSPO)",
        ),
    ]
    responses = sum(r["responses"] for r in records)
    rows = []
    for name in names:
        total = sum(r["estimators"][name]["nonzero_advantage_responses"] for r in records)
        shares = [r["estimators"][name]["nonzero_advantage_frac"] for r in records]
        low, high = (float(v) for v in np.percentile(shares, [5, 95]))
        rows.append((name, total / responses, low, high))
    paths.append(
        plot_intervals(
            out_dir / PLOTS[2],
            {
                "responses with a non-zero advantage\n(point: the run; bar: 5–95% of the steps)": {
                    "run": rows
                }
            },
            xlabel="share of responses",
            reference=None,
            xlim=(0.0, 1.03),
        )
    )
    return paths
