"""ebpo.utils.plotting: the interval plot's grid layout and its argument check."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from ebpo.utils.plotting import plot_intervals, plot_lines, plot_panels  # noqa: E402


def _panels(n: int) -> dict:
    return {
        f"panel {i}": {
            "step 25": [("ebpo", 1.0, -0.5, 2.5), ("ebpo_within", -1.0, float("nan"), float("nan"))]
        }
        for i in range(n)
    }


def _size(path) -> tuple[int, int]:
    from PIL import Image

    with Image.open(path) as image:
        return image.size


def test_plot_intervals_fills_a_grid_ncols_wide(tmp_path):
    one_row = plot_intervals(tmp_path / "row.png", _panels(6))
    grid = plot_intervals(tmp_path / "grid.png", _panels(6), ncols=3)
    (w_row, h_row), (w_grid, h_grid) = _size(one_row), _size(grid)
    assert w_grid < w_row and h_grid > h_row  # two rows of three instead of one row of six
    # a last row with an empty slot still saves (the unused axes are hidden)
    assert _size(plot_intervals(tmp_path / "ragged.png", _panels(5), ncols=3)) == (w_grid, h_grid)


@pytest.mark.parametrize("ncols", [0, -1, 1.5, True, "3"])
def test_plot_intervals_rejects_bad_ncols(tmp_path, ncols):
    with pytest.raises(ValueError, match="ncols must be a positive integer"):
        plot_intervals(tmp_path / "x.png", _panels(2), ncols=ncols)
    assert not (tmp_path / "x.png").exists()


# ---------------------------------------------------------------------- what a reader sees
LONG_TITLE = "Paired difference to GRPO, 95% interval over seeds (validation-chosen learning rates)"


@pytest.fixture
def saved(monkeypatch):
    """Every figure saved during the test, measured as drawn: ``[(figure, renderer)]``."""
    from matplotlib.figure import Figure

    figures = []
    original = Figure.savefig

    def savefig(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.canvas.draw()  # laid out again at the figure's own dpi, for the measurements
        figures.append((self, self.canvas.get_renderer()))

    monkeypatch.setattr(Figure, "savefig", savefig)
    return figures


def _ink_on_the_border(path) -> bool:
    """Whether anything but the white background touches the image's outermost pixels."""
    from PIL import Image

    with Image.open(path) as image:
        rgb = image.convert("RGB")
        width, height = rgb.size
        border = [(x, y) for x in (0, width - 1) for y in range(height)]
        border += [(x, y) for y in (0, height - 1) for x in range(width)]
        return any(rgb.getpixel(p) != (255, 255, 255) for p in border)


def _series(offset: float = 0.0) -> dict:
    steps = list(range(0, 101, 25))
    return {
        "grpo": (steps, [20 + 0.2 * s + offset for s in steps]),
        "ebpo": (steps, [20 + 0.2 * s + offset for s in steps]),  # on top of grpo
    }


def test_titles_labels_and_legends_stay_inside_a_one_panel_figure(tmp_path, saved):
    # one narrow panel under a title far wider than it: the title wraps instead of being cut off
    paths = [
        plot_intervals(
            tmp_path / "i.png",
            {"G = 2": {**_panels(1)["panel 0"], "step 50": [("ebpo", 0.5, 0.0, 1.0)]}},
            title=LONG_TITLE,
            xlabel="held-out Pass@1, method − GRPO (points)",
        ),
        plot_panels(
            tmp_path / "p.png", {"G = 2": _series()}, title=LONG_TITLE, ylabel="Pass@1 (%)"
        ),
        plot_lines(tmp_path / "l.png", _series(), title=LONG_TITLE, ylabel="Pass@1 (%)"),
    ]
    assert not any(_ink_on_the_border(p) for p in paths)
    for figure, renderer in saved:
        frame = figure.bbox
        texts = [figure._suptitle] if figure._suptitle else []
        for ax in figure.axes:
            texts += [ax.title, ax.xaxis.label, ax.yaxis.label, *ax.get_yticklabels()]
        texts += [t for legend in figure.legends for t in legend.get_texts()]
        texts = [t for t in texts if t.get_text()]
        assert len(texts) >= 5
        for text in texts:
            box = text.get_window_extent(renderer)
            assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and box.y1 <= frame.y1, text
        # the legend is the figure's, outside every axes
        assert all(ax.get_legend() is None for ax in figure.axes)
        (legend,) = figure.legends
        box = legend.get_window_extent(renderer)
        assert not any(box.overlaps(ax.get_window_extent(renderer)) for ax in figure.axes)


def test_bands_are_clipped_to_the_limits(tmp_path, monkeypatch):
    from matplotlib.axes import Axes

    filled = []
    original = Axes.fill_between

    def fill_between(self, x, lower, upper, **kwargs):
        filled.append((list(lower), list(upper)))
        return original(self, x, lower, upper, **kwargs)

    monkeypatch.setattr(Axes, "fill_between", fill_between)
    series = _series()
    bands = {"ebpo": ([-5.0, 10.0, 30.0, 40.0, 95.0], [10.0, 30.0, 50.0, 90.0, 130.0])}
    plot_panels(tmp_path / "p.png", {"G = 2": series}, bands={"G = 2": bands}, limits=(0, 100))
    plot_lines(tmp_path / "l.png", series, bands=bands, limits=(0, None))
    assert filled == [
        ([0.0, 10.0, 30.0, 40.0, 95.0], [10.0, 30.0, 50.0, 90.0, 100]),
        ([0.0, 10.0, 30.0, 40.0, 95.0], [10.0, 30.0, 50.0, 90.0, 130.0]),
    ]


def test_compared_panels_share_one_x_scale(tmp_path, saved):
    panels = {
        "G = 2": {"step 25": [("ebpo", 1.0, 0.5, 1.5)]},
        "G = 8": {"step 25": [("ebpo", -9.0, -12.0, -6.0)]},
    }
    plot_intervals(tmp_path / "i.png", panels)
    plot_panels(tmp_path / "p.png", {"a": _series(), "b": _series(30.0)}, sharex=True, sharey=True)
    (intervals, _), (curves, _) = saved
    for figure in (intervals, curves):
        limits = {(ax.get_xlim(), ax.get_ylim()) for ax in figure.axes}
        assert len(limits) == 1
    low, high = intervals.axes[0].get_xlim()
    assert low <= -12.0 and high >= 1.5  # every panel shows every panel's intervals


def test_lines_on_top_of_each_other_are_told_apart(tmp_path, saved):
    """Each series keeps its colour and marker in every panel; the reference is drawn wide with
    hollow rings under the others, and the markers of coinciding lines fall on different steps."""
    steps = list(range(1, 101))
    same = {"ebpo": (steps, [0.5] * 100), "ebpo_within": (steps, [0.5] * 100)}
    plot_panels(tmp_path / "p.png", {"G = 2": _series(), "G = 4": _series()}, reference="grpo")
    plot_lines(tmp_path / "l.png", same)
    (panels, _), (lines, _) = saved
    styles = {}
    for ax in panels.axes:
        for line in ax.get_lines():
            style = (line.get_color(), line.get_marker(), line.get_markerfacecolor())
            assert styles.setdefault(line.get_label(), style) == style
    assert styles["grpo"][1:] == ("o", "none") and styles["ebpo"][2] != "none"
    first, second = lines.axes[0].get_lines()
    assert first.get_marker() != second.get_marker()
    assert first.get_markevery() != second.get_markevery()


def test_plot_intervals_xlim_fixes_every_panel(tmp_path, monkeypatch):
    from ebpo.utils import plotting

    limits = []
    save = plotting._save

    def record(fig, path, plt):
        limits.extend(ax.get_xlim() for ax in fig.axes if ax.get_visible())
        return save(fig, path, plt)

    monkeypatch.setattr(plotting, "_save", record)
    plot_intervals(tmp_path / "free.png", _panels(2))
    assert all(low < -0.5 for low, _ in limits)  # the data's range: the interval reaches -0.5
    limits.clear()
    plot_intervals(tmp_path / "fixed.png", _panels(2), xlim=(0.0, 1.0))
    assert limits and all(limit == (0.0, 1.0) for limit in limits)
