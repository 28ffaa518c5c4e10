"""The plots of one run (``<run>/plots/*.png``), from its ``metrics.jsonl``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ebpo.lab.runs.directory import read_metrics
from ebpo.utils.plotting import Limits, moving_average, plot_lines

__all__ = ["plot_run"]

#: plot name -> (metric key in metrics.jsonl, axis label, the range of the metric)
_CURVES: dict[str, tuple[str, str, Limits]] = {
    "reward": ("reward", "mean training reward", (None, None)),
    "entropy": ("entropy", "mean token entropy (nats)", (0.0, None)),
    "grad_norm": ("grad_norm", "gradient norm", (0.0, None)),
    "shrinkage": ("ebpo/shrinkage_mean", "mean shrinkage S (weight on the prior)", (0.0, 1.0)),
}


def smoothing_window(n_points: int) -> int:
    """The moving-average window of a per-step curve: a tenth of the run, at least 1."""
    return max(1, n_points // 10)


def plot_run(
    run_dir: Path, before: Mapping[str, Any], after: Mapping[str, Any], final_step: int
) -> list[Path]:
    """Per-step training curves (each as a faint raw line under its moving average) and held-out
    Pass@1 over steps in % (overall and per topic; step 0 is the warm-started model)."""
    records = read_metrics(run_dir / "metrics.jsonl")
    plots = []
    for name, (key, label, limits) in _CURVES.items():
        points = [(r["step"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
        if not points and name == "shrinkage":  # estimators without a prior (grpo, rloo): S = 0
            points = [(r["step"], 0.0) for r in records if "reward" in r]
        if not points:
            continue
        xs, ys = (list(v) for v in zip(*points, strict=True))
        window = smoothing_window(len(ys))
        series = {
            "per step": (xs, ys),
            f"moving average ({window} steps)": (xs, moving_average(ys, window)),
        }
        plots.append(
            plot_lines(
                run_dir / "plots" / f"{name}.png",
                series,
                title=label,
                ylabel=label,
                faint=("per step",),
                limits=limits,
            )
        )
    curve: dict[str, tuple[list[float], list[float]]] = {}
    evaluations = (
        [(0, before)]
        + [(r["step"], r) for r in records if "heldout/pass@1" in r]
        + [(final_step, after)]
    )
    for step, result in evaluations:
        if "overall" in result:
            overall, topics = result["overall"], result["topics"]
        else:
            overall = result["heldout/pass@1"]
            topics = {
                k.rsplit("/", 1)[-1]: v
                for k, v in result.items()
                if k.startswith("heldout/pass@1/")
            }
        for label, value in [("overall", overall), *topics.items()]:
            xs, ys = curve.setdefault(label, ([], []))
            xs.append(step)
            ys.append(100 * value)  # in %, as the console's tables
    plots.append(
        plot_lines(
            run_dir / "plots" / "heldout_pass1.png",
            curve,
            title="held-out Pass@1, overall and per topic",
            ylabel="Pass@1 (%)",
            limits=(0.0, 100.0),
        )
    )
    return plots
