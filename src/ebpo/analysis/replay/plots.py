"""The replay's plots (PNG, via :mod:`ebpo.utils.plotting`; docs/replay.md says how to read them).
Estimators are drawn as small multiples, one panel each against GRPO (grey), so that estimators
whose values coincide (the EBPO family often gives every group a signal: all at 0) stay visible:

* ``zero_signal.png`` — per estimator, the share of groups in which it gives every response a
  zero advantage; then the input's all-fail and all-pass shares of groups per step (the groups
  GRPO cannot learn from);
* ``all_fail_advantage.png`` — per estimator, the mean advantage of the responses in all-fail
  groups (GRPO: 0; below 0: those failures are pushed down);
* ``shrinkage.png`` — per estimator that shrinks (its shrinkage is not 0 at every step; GRPO has
  none and is not drawn), the mean weight on the prior per step;
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

from ebpo.analysis.replay.engine import REFERENCE
from ebpo.utils.file_sets import Writer
from ebpo.utils.plotting import moving_average, plot_intervals, plot_panels

__all__ = ["PLOTS", "SMOOTH_ABOVE", "plot_writers"]

PLOTS = ("zero_signal.png", "all_fail_advantage.png", "shrinkage.png", "nonzero_advantage.png")
SMOOTH_ABOVE = 60
Record = dict[str, Any]
Series = dict[str, tuple[list[int], list[float]]]


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


def plot_writers(records: Sequence[Record]) -> dict[str, Writer]:
    """The plots of ``records`` (module doc) as writers of a file set
    (:func:`ebpo.utils.file_sets.write_file_set`); ``shrinkage.png`` only when an estimator
    shrinks."""
    names = list(records[0]["estimators"])
    others = [name for name in names if name != REFERENCE] or [REFERENCE]
    window = _window(len(records))
    suffix = _suffix(window)

    def field_of(name: str, field: str) -> tuple[list[int], list[float]]:
        return _series(records, lambda r: r["estimators"][name][field], window)

    def against_grpo(series: Callable[[str], tuple[list[int], list[float]]]) -> dict[str, Series]:
        return {
            f"{name} against {REFERENCE}": {REFERENCE: series(REFERENCE), name: series(name)}
            for name in others
        }

    # the input's two shares in panels of their own (they may coincide), after the estimators,
    # so that each estimator has the same colour in every figure
    zero = {
        **against_grpo(lambda name: field_of(name, "zero_signal_group_frac")),
        "the input: all-fail groups (all rewards equal, ≤ 0)": {
            "all-fail groups": _series(
                records, lambda r: r["all_fail_groups"] / r["groups"], window
            )
        },
        "the input: all-pass groups (all rewards equal, > 0)": {
            "all-pass groups": _series(
                records, lambda r: r["all_pass_groups"] / r["groups"], window
            )
        },
    }
    failed = against_grpo(
        lambda name: _weighted_series(
            records, name, "all_fail_advantage_mean", "all_fail_responses", window
        )
    )
    shrinking = [n for n in names if any(r["estimators"][n]["shrinkage_mean"] for r in records)]
    not_drawn = [n for n in names if n not in shrinking]
    writers: dict[str, Writer] = {
        PLOTS[0]: lambda path: plot_panels(
            path,
            zero,
            ncols=_columns(len(zero)),
            sharex=True,
            sharey=True,
            reference=REFERENCE,
            ylabel="share of groups",
            title="Zero-signal groups per step: the share of groups where every advantage is 0"
            + suffix,
        ),
        PLOTS[1]: lambda path: plot_panels(
            path,
            failed,
            ncols=_columns(len(failed)),
            sharex=True,
            sharey=True,
            reference=REFERENCE,
            ylabel="mean advantage",
            title="Mean advantage of the responses in all-fail groups" + suffix,
        ),
    }
    if shrinking:
        writers[PLOTS[2]] = lambda path: plot_panels(
            path,
            {name: {name: field_of(name, "shrinkage_mean")} for name in shrinking},
            ncols=_columns(len(shrinking)),
            sharex=True,
            sharey=True,
            ylabel="weight on the prior / other prompts",
            title="Mean shrinkage per step"
            + suffix
            + (f"; without shrinkage, not drawn: {', '.join(not_drawn)}" if not_drawn else ""),
        )
    writers[PLOTS[3]] = lambda path: _nonzero_plot(path, records, names)
    return writers


def _columns(panels: int) -> int:
    """Two columns up to four panels (a square), three up to nine, then four."""
    return 2 if panels <= 4 else 3 if panels <= 9 else 4


def _nonzero_plot(path: Path, records: Sequence[Record], names: Sequence[str]) -> Path:
    responses = sum(r["responses"] for r in records)
    rows = []
    for name in names:
        total = sum(r["estimators"][name]["nonzero_advantage_responses"] for r in records)
        shares = [r["estimators"][name]["nonzero_advantage_frac"] for r in records]
        low, high = (float(v) for v in np.percentile(shares, [5, 95]))
        rows.append((name, total / responses, low, high))
    return plot_intervals(
        path,
        {
            "responses with a non-zero advantage\n(point: the run; bar: 5–95% of the steps)": {
                "run": rows
            }
        },
        xlabel="share of responses",
        reference=None,
        xlim=(0.0, 1.03),
    )
