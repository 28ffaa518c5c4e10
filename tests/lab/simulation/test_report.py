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
