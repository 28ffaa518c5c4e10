"""The replay's plots (PNG, via :mod:`ebpo.utils.plotting`; docs/replay.md says how to read them):

* ``zero_signal.png`` — left: the share of groups in which an estimator gives every response a
  zero advantage, per step and estimator; right: the input's all-fail and all-pass shares (the
  groups GRPO cannot learn from);
* ``shrinkage.png`` — the mean shrinkage per step and estimator (0 for estimators without one);
* ``nonzero_advantage.png`` — per estimator, the share of the run's responses with a non-zero
  advantage (point) and the 5th–95th percentile of that share over the steps (bar).

Runs longer than :data:`SMOOTH_ABOVE` steps are drawn as a trailing moving average (the window is
in each title); the CSV holds the raw values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ebpo.utils.plotting import moving_average, plot_intervals, plot_lines, plot_panels

__all__ = ["PLOTS", "SMOOTH_ABOVE", "write_plots"]

PLOTS = ("zero_signal.png", "shrinkage.png", "nonzero_advantage.png")
SMOOTH_ABOVE = 60


def _window(steps: int) -> int:
    return 1 if steps <= SMOOTH_ABOVE else max(2, steps // 40)


def _series(
    records: Sequence[dict[str, Any]], value: Any, window: int
) -> tuple[list[int], list[float]]:
    x = [r["step"] for r in records]
    return x, moving_average([float(value(r)) for r in records], window)


def _suffix(window: int) -> str:
    return "" if window == 1 else f" (moving average, {window} steps)"


def write_plots(out_dir: Path, records: Sequence[dict[str, Any]]) -> list[Path]:
    """Write :data:`PLOTS` to ``out_dir``; return their paths."""
    names = list(records[0]["estimators"])
    window = _window(len(records))
    suffix = _suffix(window)
    per_estimator = {
        name: _series(
            records, lambda r, n=name: r["estimators"][n]["zero_signal_group_frac"], window
        )
        for name in names
    }
    inputs = {
        "all-fail groups": _series(records, lambda r: r["all_fail_groups"] / r["groups"], window),
        "all-pass groups": _series(records, lambda r: r["all_pass_groups"] / r["groups"], window),
    }
    paths = [
        plot_panels(
            out_dir / PLOTS[0],
            {
                "groups where every advantage is 0": per_estimator,
                "groups with all rewards equal (GRPO: no signal)": inputs,
            },
            ylabel="share of the step's groups",
            ncols=2,
            title="Zero-signal groups per step" + suffix,
        ),
        plot_lines(
            out_dir / PLOTS[1],
            {
                name: _series(
                    records, lambda r, n=name: r["estimators"][n]["shrinkage_mean"], window
                )
                for name in names
            },
            title="Mean shrinkage per step" + suffix,
            ylabel="weight on the prior (EBPO) / other prompts (JSPO)",
        ),
    ]
    rows = []
    for name in names:
        total = sum(r["estimators"][name]["nonzero_advantage_responses"] for r in records)
        responses = sum(r["responses"] for r in records)
        shares = np.array([r["estimators"][name]["nonzero_advantage_frac"] for r in records])
        low, high = (float(v) for v in np.percentile(shares, [5, 95]))
        rows.append(
            (name, total / responses, low, high) if responses else (name, math.nan, low, high)
        )
    paths.append(
        plot_intervals(
            out_dir / PLOTS[2],
            {"responses with a non-zero advantage": {"run (bar: steps' 5th–95th pct)": rows}},
            xlabel="share of responses",
            reference=None,
        )
    )
    return paths
