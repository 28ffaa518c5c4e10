"""ebpo.lab.simulation.report: Markdown tables and the sections of ``results.md``."""

from __future__ import annotations

import math

from ebpo.lab import simulation as sim
from ebpo.lab.simulation import report


def test_markdown_table():
    text = sim.markdown_table(
        [{"a": 1, "b": 0.123456, "c": math.nan}], ["a", "b", "c"], headers=["A", "B", "C"], digits=3
    )
    assert text.splitlines() == ["| A | B | C |", "| --- | --- | --- |", "| 1 | 0.123 | – |"]


def test_saturation_section_tabulates_every_estimator(tmp_path):
    size = {"group_size": 4, "steps": 2, "prompts_per_step": 32}
    text = report.saturation_section(size, 0, tmp_path, plots=False)
    assert text.startswith("## 2. Saturated failure (Theorem 3.2, Corollary 3.5), G = 4\n")
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert table[0].startswith("| scenario | estimator | all-zero groups |")
    assert len(table) == 1 + 1 + len(sim.SCENARIOS) * len(sim.SATURATION_ESTIMATORS)
    assert list(tmp_path.iterdir()) == []  # no plots asked for


def test_baseline_section_shows_shrinkage_of_the_estimators_that_report_it(tmp_path):
    size = {
        "group_sizes": (4,),
        "steps": 2,
        "prompts_per_step": 32,
        "estimators": ("grpo", "jspo", "ebpo"),
    }
    text = report.baseline_section(size, 0, tmp_path, plots=False)
    header = next(line for line in text.splitlines() if line.startswith("| scenario | G | S* |"))
    assert (
        "S jspo" in header
        and "S ebpo" in header
        and "S grpo" not in header
        and "S oracle_eb" not in header
    )


def _captured_lines(monkeypatch) -> list[dict]:
    """Record what the saturation section hands to ``plot_lines`` (no PNG drawn)."""
    calls: list[dict] = []

    def record(path, series, **kwargs):
        calls.append({"series": series, **kwargs})
        return path

    monkeypatch.setattr(report, "plot_lines", record)
    return calls


def test_the_penalty_curve_has_a_point_at_every_mean_at_the_quick_size(tmp_path, monkeypatch):
    """At ``--quick``'s 64 prompts a step, μ = 0.85 once had no all-zero group: a NaN point, and
    every line of saturation_penalty.png broke between μ = 0.8 and 0.9. The curve now draws
    enough prompts that every μ of the grid has all-zero groups."""
    assert any(
        math.isnan(r["raw"]) for r in sim.penalty_curve(group_size=4, prompts_per_step=64, seed=0)
    )  # the old size: a gap
    calls = _captured_lines(monkeypatch)
    size = {"group_size": 4, "steps": 1, "prompts_per_step": 64}
    report.saturation_section(size, 0, tmp_path, plots=True)
    (call,) = calls
    for x, y in call["series"].values():
        assert len(x) == 19 and all(math.isfinite(v) for v in y)
    assert "no point" not in call["title"]


def test_a_mean_without_all_zero_groups_is_left_out_and_named(tmp_path, monkeypatch):
    def curve(**kwargs):
        row = {"raw": -0.1, "centred": -0.1, "normalised": -0.3, "predicted_raw": -0.1}
        nan = dict.fromkeys(row, math.nan)
        return [{"mu": 0.8, **row}, {"mu": 0.85, **nan}, {"mu": 0.9, **row}]

    monkeypatch.setattr(report, "penalty_curve", curve)
    calls = _captured_lines(monkeypatch)
    report.saturation_section(
        {"group_size": 4, "steps": 1, "prompts_per_step": 8}, 0, tmp_path, True
    )
    (call,) = calls
    assert all(x == [0.8, 0.9] for x, _ in call["series"].values())
    assert call["title"].endswith("(no all-zero group sampled at μ = 0.85: no point)")


def test_the_bandit_section_says_when_every_chosen_rate_is_the_top_of_the_grid(tmp_path):
    """``ebpo simulate --quick``'s grid (30, 100, 300) ends where every estimator's best rate is:
    the section says so instead of presenting the edge as each estimator's optimum."""
    size = {
        "estimators": ("grpo", "ebpo"),
        "group_sizes": (4,),
        "learning_rates": (3.0, 300.0),
        "steps": 6,
        "validation": 1,
        "report": 1,
        "shared": False,
    }
    text = report.bandit_section(size, 0, tmp_path, plots=False)
    (note,) = [line for line in text.splitlines() if "edge of the grid" in line]
    assert "chosen at the top of the grid (300): every row — the best rate may lie above it" in note


def test_the_edge_note_names_the_rows_at_either_edge():
    grid = (30.0, 100.0, 300.0)
    assert report._edge_note({"a": 100.0, "b": 100.0}, grid) == []
    assert report._edge_note({"a": 300.0}, (300.0,)) == []  # one rate: no grid to be at the edge of
    (note,) = report._edge_note({"a": 300.0, "b": 100.0, "c": 30.0}, grid)
    assert "top of the grid (300): a — the best rate may lie above it" in note
    assert "bottom of the grid (30): c — the best rate may lie below it" in note
    assert ": b" not in note and ", b" not in note
