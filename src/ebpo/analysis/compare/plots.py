"""The comparison's plots (PNG, via :mod:`ebpo.utils.plotting`), two per compared metric:

* ``difference_<metric>.png`` — one panel per estimator: the paired mean difference (estimator
  minus baseline) over the common steps with its 95 % band, and the zero line;
* ``curves_<metric>.png`` — every run's curve, thin and pale, and each estimator's mean over its
  paired seeds, bold.

``<metric>`` is the metric's name with every character but letters, digits, ``.``, ``_`` and
``-`` replaced by ``_`` (``eval/reward`` → ``eval_reward``); a name of more than
:data:`SLUG_LENGTH` characters is cut there, 8 hex digits of its hash keeping it apart from
others, so that every file name fits a file system's 143-byte limit and more.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from ebpo.utils.plotting import plot_lines, plot_panels

__all__ = ["SLUG_LENGTH", "plot_names", "plot_writers"]

_ZERO = "no difference"
#: the longest metric part of a PNG's name
SLUG_LENGTH = 96


def _slug(metric: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", metric).strip("_") or "metric"
    if len(slug) <= SLUG_LENGTH:
        return slug
    digest = hashlib.sha256(metric.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{slug[: SLUG_LENGTH - 9]}-{digest}"


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


def plot_writers(content: Mapping[str, Any]) -> dict[str, Callable[[Path], Path]]:
    """File name -> function writing that PNG at a given path, two per metric of ``content``
    (compare.json's), for :func:`ebpo.utils.file_sets.write_file_set`."""
    names = plot_names(content["metrics"])
    writers: dict[str, Callable[[Path], Path]] = {}
    for metric in content["metrics"]:
        difference, curves = names[metric]
        writers[difference] = partial(_difference, content=content, metric=metric)
        writers[curves] = partial(_curves, content=content, metric=metric)
    return writers


def _suffix(content: Mapping[str, Any]) -> str:
    smooth = content["smooth"]
    return f" (moving mean of {smooth} logged values)" if smooth > 1 else ""


def _difference(path: Path, *, content: Mapping[str, Any], metric: str) -> Path:
    """One panel per estimator: the paired mean difference with its band, and the zero line."""
    baseline = content["baseline"]
    panels, bands = {}, {}
    for comparison in content["comparisons"]:
        if comparison["metric"] != metric:
            continue
        rows = comparison["steps"]
        steps = [row["step"] for row in rows]
        label = f"{comparison['estimator']} − {baseline}"
        title = f"{comparison['estimator']} ({len(comparison['seeds'])} seed pairs)"
        panels[title] = {
            _ZERO: (steps, [0.0] * len(steps)),
            label: (steps, [row["mean_diff"] for row in rows]),
        }
        bands[title] = {label: (_bound(rows, "ci_low"), _bound(rows, "ci_high"))}
    return plot_panels(
        path,
        panels,
        bands=bands,
        ylabel=f"Δ {metric}",
        title=f"Paired difference to {baseline} on {metric}, mean over seeds with its "
        f"95 % interval{_suffix(content)}",
        sharex=True,
        sharey=True,
        reference=_ZERO,
    )


def _bound(rows: Sequence[Mapping[str, Any]], key: str) -> list[float]:
    """A band's edge; with one pair there is no interval: the band collapses onto the mean."""
    return [row["mean_diff"] if row[key] is None else row[key] for row in rows]


def _curves(path: Path, *, content: Mapping[str, Any], metric: str) -> Path:
    """Each run pale in its estimator's colour (out of the legend), each estimator's mean bold."""
    baseline = content["baseline"]
    comparisons = [c for c in content["comparisons"] if c["metric"] == metric]
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
        title=f"{metric}: each run (pale) and the mean over the paired seeds (bold)"
        f"{_suffix(content)}",
        ylabel=metric,
        faint=list(runs),
        style_of=style_of,
        reference=reference,
    )
