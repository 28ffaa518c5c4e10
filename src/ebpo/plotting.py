"""Line plots for learning curves and estimator diagnostics (matplotlib, Agg backend)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["plot_lines", "plot_panels"]

Series = Mapping[str, tuple[Sequence[float], Sequence[float]]]
Bands = Mapping[str, tuple[Sequence[float], Sequence[float]]]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _draw(ax, series: Series, bands: Bands | None, logy: bool) -> None:
    for label, (x, y) in series.items():
        (line,) = ax.plot(list(x), list(y), label=label, linewidth=1.5)
        if bands and label in bands:
            lower, upper = bands[label]
            ax.fill_between(list(x), list(lower), list(upper), color=line.get_color(), alpha=0.2, linewidth=0)
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
) -> Path:
    """One axes, one line per ``series`` entry ``label -> (x, y)``; optional shaded ``bands``
    ``label -> (lower, upper)`` (e.g. a 95% CI over seeds). Returns the PNG path."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    _draw(ax, series, bands, logy)
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
    ncols = max(1, min(ncols, len(panels)))
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.2 * nrows), squeeze=False)
    for ax, (panel_title, series) in zip(axes.flat, panels.items(), strict=False):
        _draw(ax, series, (bands or {}).get(panel_title), logy)
        ax.set_title(panel_title, fontsize="medium")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title)
    return _save(fig, path, plt)


def _save(fig, path: str | Path, plt) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
