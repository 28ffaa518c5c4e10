"""The figures of ``ebpo bench``'s results folder, from the summary of its finished cells
(:func:`ebpo.lab.bench.summary.aggregate`):

* ``paired.png`` / ``paired_equal_lr.png`` — every paired difference of a contrast (method −
  baseline) with its 95% interval, each method at its validation-chosen rate / method and baseline
  at the same rate; all panels on one x scale;
* ``contrasts.png`` — the contrasts over G, one panel per checkpoint, at the validation-chosen
  rates (e.g. shrinkage and normalisation side by side as G grows);
* ``heldout_pass1.png``, ``reward.png``, ``grad_norm.png``, ``entropy.png`` — seed-mean curves
  with 95% bands as small multiples: one panel per method and G, the method against GRPO (grey)
  on scales shared by every panel, so that no method hides under another;
* ``shrinkage.png`` — EBPO's mean shrinkage S, one panel per G (GRPO has none).

Pass@1 is in % (as in the console and the tables), and bands are clipped to the range a quantity
can take.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ebpo.lab.bench.config import BenchConfig
from ebpo.lab.bench.methods import REFERENCE_METHOD
from ebpo.utils.plotting import (
    Limits,
    moving_average,
    plot_interval_lines,
    plot_intervals,
    plot_panels,
)

__all__ = ["figure_label", "write_plots"]

#: curve -> (file name, title, y label, scale, limits of the plotted value)
CURVES: dict[str, tuple[str, str, str, float, Limits]] = {
    "pass1": ("heldout_pass1", "held-out Pass@1", "Pass@1 (%)", 100.0, (0.0, 100.0)),
    "reward": ("reward", "training reward", "mean reward", 1.0, (0.0, 1.0)),
    "grad_norm": ("grad_norm", "gradient norm", "gradient norm", 1.0, (0.0, None)),
    "entropy": ("entropy", "token entropy", "entropy (nats)", 1.0, (0.0, None)),
    "shrinkage": ("shrinkage", "EBPO mean shrinkage S", "S (weight on the prior)", 1.0, (0.0, 1.0)),
}


def figure_label(summary: Mapping[str, Any]) -> str:
    """What every figure's title starts with when the results are not evidence (the short form of
    :func:`~ebpo.lab.bench.report.caveats`, which results.md and the console show): a smoke test
    (``--quick``), and differences that are 0 by construction because no cell learned. A PNG
    shown on its own must carry it too. Empty otherwise."""
    learning = summary["learning"]
    parts = ["SMOKE TEST (--quick), not evidence"] if summary["config"].get("smoke_test") else []
    if learning["cells"] and len(learning["unchanged"]) == learning["cells"]:
        parts.append("differences 0 by construction: no cell learned")
    return "; ".join(parts) + " — " if parts else ""


def write_plots(summary: Mapping[str, Any], config: BenchConfig, out: Path) -> list[Path]:
    """Draw every figure the summary has data for into ``out``, each title headed by
    :func:`figure_label`; returns their paths."""
    label = figure_label(summary)
    images = _paired_plots(summary, config, out, label)
    contrasts = _contrast_plot(summary, config, out, label)
    if contrasts is not None:
        images.append(contrasts)
    for curve in CURVES:
        path = _curve_plot(summary, curve, out, label)
        if path is not None:
            images.append(path)
    return images


def _paired_plots(
    summary: Mapping[str, Any], config: BenchConfig, out: Path, label: str
) -> list[Path]:
    images = []
    # paired.png: each method at its validation-chosen rate; paired_equal_lr.png: method and baseline
    # at the same rate (one row of panels per rate), which isolates the estimator from its rate
    for comparison, name, what in (
        ("best_lr", "paired", "validation-chosen learning rates"),
        ("equal_lr", "paired_equal_lr", "method and baseline at the same learning rate"),
    ):
        rows = sorted(
            (
                r
                for r in summary["paired"]
                if r["comparison"] == comparison and r["checkpoint"] != "steps_to_target"
            ),
            key=lambda r: (r["lr"] if comparison == "equal_lr" else 0.0, r["G"]),
        )
        if not rows:
            continue
        panels: dict[str, dict[str, list]] = {}
        for r in rows:
            panel = f"G = {r['G']}" + (f", lr {r['lr']:g}" if comparison == "equal_lr" else "")
            panels.setdefault(panel, {}).setdefault(_step_label(r, config), []).append(
                (r["contrast"], 100 * r["mean_diff"], 100 * r["ci_low"], 100 * r["ci_high"])
            )
        images.append(
            plot_intervals(
                out / f"{name}.png",
                panels,
                ncols=len({r["G"] for r in rows}),
                xlabel="held-out Pass@1, method − baseline (points)",
                title=f"{label}Paired differences, 95% interval over seeds ({what})",
            )
        )
    return images


def _step_label(row: Mapping[str, Any], config: BenchConfig) -> str:
    final = row["checkpoint"] == "final"
    return f"step {config.steps} (final)" if final else f"step {row['checkpoint']}"


def _contrast_plot(
    summary: Mapping[str, Any], config: BenchConfig, out: Path, label: str
) -> Path | None:
    """``contrasts.png``: each contrast over G at the validation-chosen rates, a panel per
    checkpoint; None when no contrast has paired seeds."""
    rows = [
        r
        for r in summary["paired"]
        if r["comparison"] == "best_lr" and r["checkpoint"] != "steps_to_target"
    ]
    if not rows:
        return None
    panels: dict[str, dict[str, list]] = {}
    for r in sorted(rows, key=lambda r: r["G"]):
        points = panels.setdefault(_step_label(r, config), {}).setdefault(r["contrast"], [])
        points.append((r["G"], 100 * r["mean_diff"], 100 * r["ci_low"], 100 * r["ci_high"]))
    seeds = sorted({r["seeds"] for r in rows})
    return plot_interval_lines(
        out / "contrasts.png",
        panels,
        xlabel="G (responses per prompt)",
        ylabel="held-out Pass@1, method − baseline (points)",
        title=f"{label}Contrasts over G: mean paired difference and 95% interval over the seeds "
        f"(n = {'/'.join(map(str, seeds))}; validation-chosen learning rates)",
    )


def _curve_plot(summary: Mapping[str, Any], curve: str, out: Path, label: str) -> Path | None:
    """One curve as small multiples (method vs GRPO per G), or, for the shrinkage, one panel per
    G with every method that has one. None when no cell has the curve."""
    name, title, ylabel, scale, limits = CURVES[curve]
    data: dict[tuple[str, int], dict[str, list[float]]] = {}
    for key, entry in summary["curves"].items():
        method, g = key.split("|")
        values = entry.get(curve)
        if values and values["step"] and any(v is not None for v in values["mean"]):
            data[(method, int(g))] = _smoothed(values, curve, scale)
    if not data:
        return None
    group_sizes = sorted({g for _, g in data})
    methods = list(dict.fromkeys(m for m, _ in data))
    panels: dict[str, dict[str, tuple[list, list]]] = {}
    bands: dict[str, dict[str, tuple[list, list]]] = {}

    def add(panel: str, method: str, g: int) -> None:
        if (method, g) in data:
            d = data[(method, g)]
            panels.setdefault(panel, {})[method] = (d["step"], d["mean"])
            bands.setdefault(panel, {})[method] = (d["lower"], d["upper"])

    reference = REFERENCE_METHOD if REFERENCE_METHOD in methods else None
    if curve == "shrinkage" or reference is None or methods == [reference]:
        for g in group_sizes:
            for method in methods:
                add(f"G = {g}", method, g)
        panel_size, ncols = (4.2, 3.0), len(group_sizes)
    else:
        for method in methods:
            if method == reference:
                continue
            for g in group_sizes:
                panel = f"{method} vs {reference}, G = {g}"
                add(panel, reference, g)
                add(panel, method, g)
        panel_size, ncols = (3.4, 2.4), len(group_sizes)
    what = "validation-chosen learning rates"
    return plot_panels(
        out / f"{name}.png",
        panels,
        bands=bands,
        ncols=ncols,
        ylabel=ylabel,
        title=f"{label}{title}, mean and 95% CI over seeds ({what})",
        limits=limits,
        sharex=True,
        sharey=True,
        reference=reference,
        panel_size=panel_size,
    )


def _smoothed(values: Mapping[str, list], curve: str, scale: float) -> dict[str, list[float]]:
    """The curve in plotted units: Pass@1 as evaluated, per-step training curves as a moving
    average over a fifteenth of the run (the bands likewise). Steps without a value are left out."""
    keep = [i for i, v in enumerate(values["mean"]) if v is not None]
    window = 1 if curve == "pass1" else max(1, len(keep) // 15)
    out = {"step": [values["step"][i] for i in keep]}
    for key in ("mean", "lower", "upper"):
        out[key] = [scale * v for v in moving_average([values[key][i] for i in keep], window)]
    return out
