"""ebpo.utils.plotting: the interval plot's grid layout and its argument check."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from ebpo.utils.plotting import plot_intervals  # noqa: E402


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
    assert limits == [(0.0, 1.0), (0.0, 1.0)]
