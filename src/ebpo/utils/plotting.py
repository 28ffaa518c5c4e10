"""Line plots for learning curves and estimator diagnostics (matplotlib, Agg backend).

Every figure is laid out by matplotlib's constrained layout, so titles, labels and legends stay
inside the image; titles wider than the figure are wrapped. Legends sit outside the axes (to the
right of a single plot, under a grid of panels: one legend for the whole figure), never over the
data. Each series keeps one colour, marker and line style in every panel of a figure, so lines
that lie on top of each other are still told apart by their markers. ``limits`` clips shaded bands
to the range a quantity can take (a 95% interval of a mean Pass@1 never goes below 0 %).
"""

from __future__ import annotations

import importlib.util
import math
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ebpo.utils.checks import is_integer
from ebpo.utils.files import atomic_path

__all__ = [
    "moving_average",
    "plot_interval_lines",
    "plot_intervals",
    "plot_lines",
    "plot_panels",
    "plots_available",
]

Series = Mapping[str, tuple[Sequence[float], Sequence[float]]]
Bands = Mapping[str, tuple[Sequence[float], Sequence[float]]]
Limits = tuple[float | None, float | None]

#: markers and line styles handed out in turn with the colours, so that a series is recognisable
#: without its colour and where it hides under another line
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
_LINESTYLES = ("-", "--", "-.", ":")
#: markers per line: enough to tell lines apart, few enough not to hide the curve
_MARKERS_PER_LINE = 8
_DPI = 110


def plots_available() -> bool:
    """Whether matplotlib (the plot extra) is installed: a command printed for this environment
    adds ``--no-plots`` without it."""
    return importlib.util.find_spec("matplotlib") is not None


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


def _styles(plt, labels: Sequence[str], reference: str | None = None) -> dict[str, dict[str, Any]]:
    """One style per label, the same in every panel: colour, marker and line style in turn; the
    ``reference`` series (e.g. GRPO in every panel of a comparison) is drawn grey and solid."""
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles: dict[str, dict[str, Any]] = {}
    k = 0  # the k-th series other than the reference
    for label in dict.fromkeys(labels):
        if label == reference:
            # wide, pale and with hollow rings, under the others: a method whose curve equals
            # the reference's shows as its own line inside the reference's band of rings
            styles[label] = {
                "color": "0.45",
                "marker": "o",
                "markerfacecolor": "none",
                "linestyle": "-",
                "linewidth": 3.0,
                "markersize": 8.0,
                "alpha": 0.7,
                "zorder": 1.5,
            }
            continue
        styles[label] = {
            "color": colours[k % len(colours)],
            "marker": _MARKERS[k % len(_MARKERS)],
            "linestyle": _LINESTYLES[(k // len(colours)) % len(_LINESTYLES)],
        }
        k += 1
    return styles


def _clip(values: Sequence[float], limits: Limits | None) -> list[float]:
    if limits is None:
        return list(values)
    low, high = limits
    out = []
    for value in values:
        if low is not None and value < low:
            value = low
        if high is not None and value > high:
            value = high
        out.append(value)
    return out


def _draw(
    ax,
    series: Series,
    bands: Bands | None,
    styles: Mapping[str, Mapping[str, Any]],
    *,
    logy: bool,
    faint: Sequence[str] = (),
    limits: Limits | None = None,
) -> None:
    for k, (label, (x, y)) in enumerate(series.items()):
        xs, ys = list(x), list(y)
        style = dict(styles[label])
        if label in faint:  # raw values under their smoothed line: thin, pale, no markers
            style.update(marker=None, linestyle="-", linewidth=0.8, alpha=0.35)
        else:
            every = _markevery(len(xs))
            # each line's markers start elsewhere, so lines that coincide still show every marker
            n = len(series)
            start = (k * every) // n if n <= every else k % every
            style = {"linewidth": 1.5, "markersize": 4.5, **style, "markevery": (start, every)}
        ax.plot(xs, ys, label=label, **style)
        if bands and label in bands:
            lower, upper = (_clip(v, limits) for v in bands[label])
            ax.fill_between(xs, lower, upper, color=style["color"], alpha=0.15, linewidth=0)
    if logy:
        ax.set_yscale("log")
    if all(is_integer(v) for x, _ in series.values() for v in x):
        from matplotlib.ticker import MaxNLocator  # optional heavy dependency (plot extra)

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps: no tick at 1.5
    ax.grid(True, alpha=0.3)


def _markevery(n_points: int) -> int:
    """A marker on every point of a short curve (evaluations), on a few of a long one (steps)."""
    return 1 if n_points <= 2 * _MARKERS_PER_LINE else math.ceil(n_points / _MARKERS_PER_LINE)


def _wrap(text: str, width_inches: float, fontsize: float) -> str:
    """``text`` broken into lines that fit ``width_inches`` at ``fontsize`` points (an average
    character is about half as wide as it is high)."""
    if not text:
        return text
    characters = max(20, int(width_inches * 72 / (0.55 * fontsize)))
    return "\n".join(textwrap.wrap(text, characters))


def _figure_legend(fig, axes, *, where: str) -> None:
    """One legend for the figure, outside the axes (``where``: "right" or "bottom"), with each
    label once."""
    handles: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    if len(handles) < 2:
        return
    if where == "right":
        fig.legend(handles.values(), handles.keys(), loc="outside right upper", fontsize="small")
    else:
        width = fig.get_size_inches()[0]
        longest = max(len(label) for label in handles)
        ncols = max(1, min(len(handles), int(width * 72 / (6.5 * (longest + 5)))))
        fig.legend(
            handles.values(),
            handles.keys(),
            loc="outside lower center",
            ncols=ncols,
            fontsize="small",
        )


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
    limits: Limits | None = None,
    style_of: Mapping[str, str] | None = None,
    reference: str | None = None,
) -> Path:
    """One axes, one line per ``series`` entry ``label -> (x, y)``; optional shaded ``bands``
    ``label -> (lower, upper)`` (e.g. a 95% CI over seeds), clipped to ``limits`` ``(low, high)``
    (either may be None); labels in ``faint`` are drawn thin and pale (raw values under their
    smoothed line); ``style_of`` ``label -> other label`` draws a series in another's colour (the
    runs of a mean in the mean's colour); ``reference`` names a series drawn wide, grey and in
    hollow rings under the others (a baseline: a curve equal to it shows inside its rings).
    Labels starting with ``_`` stay out of the legend (matplotlib's rule). The legend is to the
    right of the axes. Returns the PNG path."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.2, 4.0), layout="constrained")
    borrowed = dict(style_of or {})
    styles = _styles(plt, [label for label in series if label not in borrowed], reference)
    styles.update({label: styles[other] for label, other in borrowed.items()})
    _draw(ax, series, bands, styles, logy=logy, faint=faint, limits=limits)
    ax.set_title(_wrap(title, 5.0, 12))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    _figure_legend(fig, [ax], where="right")
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
    limits: Limits | None = None,
    sharex: bool = False,
    sharey: bool = False,
    reference: str | None = None,
    panel_size: tuple[float, float] = (4.2, 3.2),
) -> Path:
    """A grid of subplots, one per ``panels`` entry ``panel_title -> series``, with one legend
    under the grid. ``sharex`` / ``sharey`` put every panel on the same scale (for panels that are
    compared); ``reference`` names a series drawn grey in every panel (small multiples: each panel
    one method against the reference); ``limits`` clips the bands as in :func:`plot_lines`."""
    if not panels:
        raise ValueError("panels is empty: expected at least one panel to plot")
    plt = _pyplot()
    fig, axes = _grid(plt, len(panels), ncols, panel_size=panel_size, sharex=sharex, sharey=sharey)
    labels = [label for series in panels.values() for label in series]
    styles = _styles(plt, labels, reference)
    for ax, (panel_title, series) in zip(axes, panels.items(), strict=True):
        _draw(ax, series, (bands or {}).get(panel_title), styles, logy=logy, limits=limits)
        ax.set_title(panel_title, fontsize="medium")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
    _label_outer(axes, ncols, sharex=sharex, sharey=sharey)
    _suptitle(fig, title)
    _figure_legend(fig, axes, where="bottom")
    return _save(fig, path, plt)


def _suptitle(fig, title: str) -> None:
    if title:
        fig.suptitle(_wrap(title, fig.get_size_inches()[0], 12))


#: inches added to a grid's height for its title and the legend under it
_DECORATIONS_HEIGHT = 1.2


def _grid(plt, n_panels: int, ncols: int, *, panel_size: tuple[float, float], **subplots_kw):
    """A figure with ``n_panels`` axes in rows of ``ncols`` (clamped to 1..n_panels), with room
    for a title and a legend; the unused slots of the last row are hidden. Returns the figure and
    the ``n_panels`` axes in order."""
    ncols = max(1, min(ncols, n_panels))
    nrows = -(-n_panels // ncols)
    width, height = panel_size
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(width * ncols, height * nrows + _DECORATIONS_HEIGHT),
        squeeze=False,
        layout="constrained",
        **subplots_kw,
    )
    flat = list(axes.flat)
    for ax in flat[n_panels:]:
        ax.set_visible(False)
    return fig, flat[:n_panels]


def _label_outer(axes: Sequence[Any], ncols: int, *, sharex: bool, sharey: bool) -> None:
    """Label a shared scale once: x tick labels and label only on the lowest panel of each column
    (the one above an empty slot of the last row included), y only on the first column."""
    ncols = max(1, min(ncols, len(axes)))
    for i, ax in enumerate(axes):
        lowest = i + ncols >= len(axes)
        if sharex:
            ax.tick_params(axis="x", labelbottom=lowest)
            if not lowest:
                ax.set_xlabel("")
        if sharey and i % ncols:
            ax.tick_params(axis="y", labelleft=False)
            ax.set_ylabel("")


def _save(fig, path: str | Path, plt) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_path(path) as tmp:  # a full disk leaves the previous plot, not half of one
            fig.savefig(tmp, dpi=_DPI, format=path.suffix.lstrip(".") or "png")
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
    one row) and share one x scale, so that they can be compared; ``xlim`` fixes it (e.g.
    ``(0, 1)`` for shares); the legend is under the grid."""
    if not panels:
        raise ValueError("panels is empty: expected at least one panel to plot")
    if ncols is not None and (not is_integer(ncols) or ncols < 1):
        raise ValueError(f"ncols must be a positive integer or None, got {ncols!r}")
    plt = _pyplot()
    rows_per_panel = max(len({r[0] for s in p.values() for r in s}) for p in panels.values())
    panel_height = 0.9 + 0.42 * max(rows_per_panel, 2)
    fig, axes = _grid(
        plt,
        len(panels),
        ncols or len(panels),
        panel_size=(4.4, panel_height),
        sharex=True,
        sharey=True,
    )
    names = [name for series in panels.values() for name in series]
    styles = _styles(plt, names)
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
            style = styles[name]
            ax.errorbar(
                xs,
                ys,
                xerr=[lows, highs],
                fmt=style["marker"],
                color=style["color"],
                markersize=4,
                capsize=3,
                label=name,
            )
        if reference is not None:
            ax.axvline(reference, color="black", linewidth=0.8, alpha=0.6)
        if xlim is not None:
            ax.set_xlim(*xlim)
        ax.set_yticks(range(len(labels)), labels)
        ax.set_title(panel_title, fontsize="medium")
        ax.set_xlabel(xlabel)
        ax.grid(True, axis="x", alpha=0.3)
    axes[0].invert_yaxis()  # shared: once for all panels
    _label_outer(axes, ncols or len(panels), sharex=True, sharey=True)
    _suptitle(fig, title)
    _figure_legend(fig, axes, where="bottom")
    return _save(fig, path, plt)


def plot_interval_lines(
    path: str | Path,
    panels: Mapping[str, Mapping[str, Sequence[tuple[float, float, float, float]]]],
    *,
    xlabel: str = "",
    ylabel: str = "",
    title: str = "",
    reference: float | None = 0.0,
) -> Path:
    """Estimates with interval bars over a few x values, joined by a line per series, one panel
    per ``panels`` entry: ``panel -> series -> [(x, estimate, low, high), ...]``. The x values are
    categories (e.g. G = 2, 4, 8: evenly spaced, labelled by value); within one the series sit side
    by side, so that their bars do not hide each other. A horizontal line marks ``reference``
    (e.g. no difference); NaN intervals draw the point only. Panels share both scales, in one row;
    the legend is under them."""
    if not panels:
        raise ValueError("panels is empty: expected at least one panel to plot")
    plt = _pyplot()
    fig, axes = _grid(
        plt, len(panels), len(panels), panel_size=(4.2, 3.4), sharex=True, sharey=True
    )
    xs = sorted({x for series in panels.values() for points in series.values() for x, *_ in points})
    position = {x: i for i, x in enumerate(xs)}
    names = list(dict.fromkeys(name for series in panels.values() for name in series))
    styles = _styles(plt, names)
    width = 0.3 / max(1, len(names))
    for ax, (panel_title, series) in zip(axes, panels.items(), strict=True):
        for name, points in series.items():
            offset = -0.15 + width * (names.index(name) + 0.5)
            at = [position[x] + offset for x, *_ in points]
            estimates = [estimate for _, estimate, _, _ in points]
            below = [e - low if math.isfinite(low) else 0.0 for _, e, low, _ in points]
            above = [high - e if math.isfinite(high) else 0.0 for _, e, _, high in points]
            style = styles[name]
            ax.errorbar(at, estimates, yerr=[below, above], fmt=style["marker"], color=style["color"],
                        linestyle=style["linestyle"], markersize=5, capsize=3, label=name)  # fmt: skip
        if reference is not None:
            ax.axhline(reference, color="black", linewidth=0.8, alpha=0.6)
        ax.set_xticks(range(len(xs)), [f"{x:g}" for x in xs])
        ax.set_xlim(-0.5, len(xs) - 0.5)
        ax.set_title(panel_title, fontsize="medium")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, axis="y", alpha=0.3)
    _label_outer(axes, len(panels), sharex=True, sharey=True)
    _suptitle(fig, title)
    _figure_legend(fig, axes, where="bottom")
    return _save(fig, path, plt)
