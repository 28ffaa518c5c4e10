"""Line plots for learning curves and estimator diagnostics (matplotlib, Agg backend)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from ebpo.utils.checks import is_integer
from ebpo.utils.files import atomic_path

__all__ = ["moving_average", "plot_intervals", "plot_lines", "plot_panels"]

Series = Mapping[str, tuple[Sequence[float], Sequence[float]]]
Bands = Mapping[str, tuple[Sequence[float], Sequence[float]]]


def _pyplot():
    import matplotlib  # optional heavy dependency (plot extra)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def moving_average(values: Sequence[float], window: int) -> list[float]:
    """Trailing mean over the last ``window`` values (fewer at the start); ``window <= 1`` copies."""
    if window <= 1:
        return list(values)
    out, total = [], 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def _draw(ax, series: Series, bands: Bands | None, logy: bool, faint: Sequence[str] = ()) -> None:
    for label, (x, y) in series.items():
        style = {"linewidth": 0.8, "alpha": 0.35} if label in faint else {"linewidth": 1.5}
        (line,) = ax.plot(list(x), list(y), label=label, **style)
        if bands and label in bands:
            lower, upper = bands[label]
            ax.fill_between(
                list(x), list(lower), list(upper), color=line.get_color(), alpha=0.2, linewidth=0
            )
    if logy:
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize="small", loc="best", framealpha=0.6)


def plot_lines(
    path: str | Path,
    series: Series,
    *,
    title: str = "",
    xlabel: str = "step",
    ylabel: str = "",
    bands: Bands | None = None,
    logy: bool = False,
    faint: Sequence[str] = (),
) -> Path:
    """One axes, one line per ``series`` entry ``label -> (x, y)``; optional shaded ``bands``
    ``label -> (lower, upper)`` (e.g. a 95% CI over seeds); labels in ``faint`` are drawn thin and
    pale (raw values under their smoothed line). Returns the PNG path."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    _draw(ax, series, bands, logy, faint)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    return _save(fig, path, plt)


def plot_panels(
    path: str | Path,
    panels: Mapping[str, Series],
    *,
    bands: Mapping[str, Bands] | None = None,
    xlabel: str = "step",
    ylabel: str = "",
    ncols: int = 3,
    title: str = "",
    logy: bool = False,
) -> Path:
    """A grid of subplots, one per ``panels`` entry ``panel_title -> series``."""
    if not panels:
        raise ValueError("panels is empty: expected at least one panel to plot")
    plt = _pyplot()
    fig, axes = _grid(plt, len(panels), ncols, panel_size=(4.2, 3.2))
    for ax, (panel_title, series) in zip(axes, panels.items(), strict=True):
        _draw(ax, series, (bands or {}).get(panel_title), logy)
        ax.set_title(panel_title, fontsize="medium")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
    if title:
        fig.suptitle(title)
    return _save(fig, path, plt)


def _grid(plt, n_panels: int, ncols: int, *, panel_size: tuple[float, float], **subplots_kw):
    """A figure with ``n_panels`` axes in rows of ``ncols`` (clamped to 1..n_panels); the unused
    slots of the last row are hidden. Returns the figure and the ``n_panels`` axes in order."""
    ncols = max(1, min(ncols, n_panels))
    nrows = -(-n_panels // ncols)
    width, height = panel_size
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False, **subplots_kw
    )
    flat = list(axes.flat)
    for ax in flat[n_panels:]:
        ax.set_visible(False)
    return fig, flat[:n_panels]


def _save(fig, path: str | Path, plt) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    try:
        with atomic_path(path) as tmp:  # a full disk leaves the previous plot, not half of one
            fig.savefig(tmp, dpi=110, format=path.suffix.lstrip(".") or "png")
    finally:
        plt.close(fig)
    return path


def plot_intervals(
    path: str | Path,
    panels: Mapping[str, Mapping[str, Sequence[tuple[str, float, float, float]]]],
    *,
    xlabel: str = "",
    title: str = "",
    reference: float | None = 0.0,
    ncols: int | None = None,
    xlim: tuple[float, float] | None = None,
) -> Path:
    """Point estimates with interval bars, one panel per ``panels`` entry: ``panel -> series ->
    [(row label, estimate, low, high), ...]``. Rows are stacked vertically (the same rows in every
    series; series side by side within a row); a vertical line marks ``reference`` (e.g. no
    difference). NaN intervals draw the point only. Panels fill a grid ``ncols`` wide (default:
    one row); ``xlim`` fixes every panel's x range (e.g. ``(0, 1)`` for shares)."""
    if not panels:
        raise ValueError("panels is empty: expected at least one panel to plot")
    if ncols is not None and (not is_integer(ncols) or ncols < 1):
        raise ValueError(f"ncols must be a positive integer or None, got {ncols!r}")
    plt = _pyplot()
    rows_per_panel = max(len({r[0] for s in p.values() for r in s}) for p in panels.values())
    panel_height = 0.9 + 0.42 * max(rows_per_panel, 2)
    fig, axes = _grid(
        plt, len(panels), ncols or len(panels), panel_size=(4.4, panel_height), sharey=True
    )
    for ax, (panel_title, series) in zip(axes, panels.items(), strict=True):
        labels: list[str] = []
        for entries in series.values():
            for label, *_ in entries:
                if label not in labels:
                    labels.append(label)
        positions = {label: i for i, label in enumerate(labels)}
        width = 0.7 / max(1, len(series))
        for k, (name, entries) in enumerate(series.items()):
            offset = -0.35 + width * (k + 0.5)
            ys = [positions[label] + offset for label, *_ in entries]
            xs = [estimate for _, estimate, _, _ in entries]
            lows = [
                0.0 if not math.isfinite(low) else estimate - low for _, estimate, low, _ in entries
            ]
            highs = [
                0.0 if not math.isfinite(high) else high - estimate
                for _, estimate, _, high in entries
            ]
            errors = [lows, highs]
            ax.errorbar(xs, ys, xerr=errors, fmt="o", markersize=4, capsize=3, label=name)
        if reference is not None:
            ax.axvline(reference, color="black", linewidth=0.8, alpha=0.6)
        if xlim is not None:
            ax.set_xlim(*xlim)
        ax.set_yticks(range(len(labels)), labels)
        ax.invert_yaxis()
        ax.set_title(panel_title, fontsize="medium")
        ax.set_xlabel(xlabel)
        ax.grid(True, axis="x", alpha=0.3)
        if len(series) > 1:
            ax.legend(fontsize="small", loc="best", framealpha=0.6)
    if title:
        fig.suptitle(title)
    return _save(fig, path, plt)
