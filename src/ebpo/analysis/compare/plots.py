"""The comparison's plots (PNG, via :mod:`ebpo.utils.plotting`), two per compared metric:

* ``difference_<metric>.png`` — one panel per estimator: the paired mean difference (estimator
  minus baseline) over the common steps with its 95 % band, and the zero line;
* ``curves_<metric>.png`` — every run's curve, thin and pale, and each estimator's mean over its
  paired seeds, bold.

``<metric>`` is the metric's name with every character but letters, digits, ``.``, ``_`` and
``-`` replaced by ``_`` (``eval/reward`` → ``eval_reward``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ebpo.utils.plotting import plot_lines, plot_panels

__all__ = ["plot_names", "write_plots"]

_ZERO = "no difference"


def _slug(metric: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", metric).strip("_") or "metric"


def plot_names(metrics: Sequence[str]) -> dict[str, tuple[str, str]]:
    """metric -> (difference PNG, curves PNG) file names, unique even where two names slug alike."""
    names: dict[str, tuple[str, str]] = {}
    used: set[str] = set()
    for metric in metrics:
        slug, k = _slug(metric), 1
        while slug in used:
            k += 1
            slug = f"{_slug(metric)}_{k}"
        used.add(slug)
        names[metric] = (f"difference_{slug}.png", f"curves_{slug}.png")
    return names


def write_plots(folder: Path, content: Mapping[str, Any]) -> list[Path]:
    """Write the two PNGs of every metric of ``content`` (compare.json's) into ``folder``."""
    baseline = content["baseline"]
    names = plot_names(content["metrics"])
    written = []
    suffix = f" (moving mean of {content['smooth']} logged values)" if content["smooth"] > 1 else ""
    for metric in content["metrics"]:
        comparisons = [c for c in content["comparisons"] if c["metric"] == metric]
        panels, bands = {}, {}
        for comparison in comparisons:
            rows = comparison["steps"]
            steps = [row["step"] for row in rows]
            label = f"{comparison['estimator']} − {baseline}"
            title = f"{comparison['estimator']} ({len(comparison['seeds'])} seed pairs)"
            panels[title] = {
                _ZERO: (steps, [0.0] * len(steps)),
                label: (steps, [row["mean_diff"] for row in rows]),
            }
            bands[title] = {label: (_bound(rows, "ci_low"), _bound(rows, "ci_high"))}
        difference, curves = names[metric]
        written.append(
            plot_panels(
                folder / difference,
                panels,
                bands=bands,
                ylabel=f"Δ {metric}",
                title=f"Paired difference to {baseline} on {metric}, mean over seeds with its "
                f"95 % interval{suffix}",
                sharex=True,
                sharey=True,
                reference=_ZERO,
            )
        )
        written.append(_curves(folder / curves, comparisons, baseline, metric, suffix))
    return written


def _bound(rows: Sequence[Mapping[str, Any]], key: str) -> list[float]:
    """A band's edge; with one pair there is no interval: the band collapses onto the mean."""
    return [row["mean_diff"] if row[key] is None else row[key] for row in rows]


def _curves(
    path: Path, comparisons: Sequence[Mapping[str, Any]], baseline: str, metric: str, suffix: str
) -> Path:
    """Each run pale in its estimator's colour (out of the legend), each estimator's mean bold."""
    means: dict[str, tuple[list[int], list[float]]] = {}
    reference = None
    runs: dict[str, tuple[list[int], list[float]]] = {}
    style_of = {}
    for comparison in comparisons:
        steps = comparison["curves"]["step"]
        for name in (baseline, comparison["estimator"]):
            curves = comparison["curves"][name]
            label = f"{name}, mean of {len(curves)} run{'s' if len(curves) > 1 else ''}"
            if label in means:
                continue
            means[label] = (
                steps,
                [sum(v) / len(curves) for v in zip(*curves.values(), strict=True)],
            )
            reference = reference or label  # the baseline's mean: drawn as the reference
            for seed, values in curves.items():
                runs[f"_{name} seed {seed}"] = (steps, values)
                style_of[f"_{name} seed {seed}"] = label
    return plot_lines(
        path,
        {**runs, **means},  # the means last: drawn on top of the runs
        title=f"{metric}: each run (pale) and the mean over the paired seeds (bold){suffix}",
        ylabel=metric,
        faint=list(runs),
        style_of=style_of,
        reference=reference,
    )
