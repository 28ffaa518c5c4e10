"""ebpo.analysis.replay.plots: every estimator is visible (a panel of its own against GRPO, so
that estimators with equal values do not hide each other), no shrinkage for estimators without
one, whole steps on the x axis; the PNGs are drawn."""

from __future__ import annotations

from pathlib import Path

import pytest

from ebpo.analysis.replay import plots
from ebpo.analysis.replay.engine import Replay, replay_steps
from ebpo.analysis.replay.sources import Source
from ebpo.utils import plotting

pytest.importorskip("matplotlib")

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "replay" / "v1"
ESTIMATORS = ["ebpo", "ebpo_within", "ebpo_none", "reinforce_pp"]


@pytest.fixture(scope="module")
def records():
    return replay_steps(Source([str(FIXTURES)], "verl").steps(), Replay(ESTIMATORS))


@pytest.fixture
def drawn(monkeypatch):
    """The figures the writers draw: per file, its panels' titles -> the labels of their lines,
    and the x tick values of every panel, read from matplotlib before the figure is saved."""
    figures: dict[str, dict] = {}
    real_save = plotting._save

    def save(fig, path, plt):
        figures[Path(path).name] = {
            "title": fig._suptitle.get_text() if fig._suptitle else "",
            "panels": {
                ax.get_title(): [line.get_label() for line in ax.get_lines()]
                for ax in fig.axes
                if ax.get_visible()
            },
            "xticks": [list(ax.get_xticks()) for ax in fig.axes if ax.get_visible()],
        }
        return real_save(fig, path, plt)

    monkeypatch.setattr(plotting, "_save", save)
    return figures


def test_every_estimator_has_a_panel_of_its_own_against_grpo(records, drawn, tmp_path):
    writers = plots.plot_writers(records)
    assert list(writers) == list(plots.PLOTS)
    for name, write in writers.items():
        write(tmp_path / name)
        assert (tmp_path / name).read_bytes().startswith(b"\x89PNG")
    zero = drawn["zero_signal.png"]["panels"]
    for name in ESTIMATORS:
        assert zero[f"{name} against grpo"] == ["grpo", name]
        assert drawn["all_fail_advantage.png"]["panels"][f"{name} against grpo"] == ["grpo", name]
    assert [labels for title, labels in zero.items() if title.startswith("the input")] == [
        ["all-fail groups"],
        ["all-pass groups"],
    ]


def test_no_shrinkage_is_drawn_for_estimators_without_one(records, drawn, tmp_path):
    plots.plot_writers(records)["shrinkage.png"](tmp_path / "s.png")
    figure = drawn["s.png"]
    assert figure["panels"] == {n: [n] for n in ("ebpo", "ebpo_within", "ebpo_none")}
    assert figure["title"].endswith("without shrinkage, not drawn: grpo, reinforce_pp")
    assert all(r["estimators"]["reinforce_pp"]["shrinkage_mean"] == 0 for r in records)


def test_a_replay_of_grpo_alone_has_no_shrinkage_plot(records):
    only_grpo = [{**r, "estimators": {"grpo": r["estimators"]["grpo"]}} for r in records]
    assert "shrinkage.png" not in plots.plot_writers(only_grpo)


@pytest.mark.parametrize("steps", [2, 3, 7])
def test_steps_are_whole_numbers_on_the_x_axis(records, drawn, tmp_path, steps):
    """A short run once had ticks at 1.5, 2.5: whole steps get integer ticks."""
    few = [{**records[i % len(records)], "step": i + 1} for i in range(steps)]
    plots.plot_writers(few)["zero_signal.png"](tmp_path / "z.png")
    ticks = [t for panel in drawn["z.png"]["xticks"] for t in panel]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks
