"""ebpo.lab.bench.summary on finished cells written by hand to a results folder: the learning
rates chosen on validation, the paired differences to GRPO and their Student-t intervals against a
hand computation, the level tables and the curves."""

from __future__ import annotations

import math
import statistics

import pytest

from ebpo.lab.bench.cells import load_cells
from ebpo.lab.bench.summary import aggregate
from tests.lab.bench.synthetic_bench import CELLS, START, T_975_DF2, bench_config, write_cells


def interval(differences: list[float]) -> tuple[float, float, float]:
    """The hand computation: mean ± t_{0.975, n-1} · sd / sqrt(n)."""
    mean = statistics.mean(differences)
    half = T_975_DF2 * statistics.stdev(differences) / math.sqrt(len(differences))
    return mean, mean - half, mean + half


def row(summary: dict, comparison: str, checkpoint: str, lr: float) -> dict:
    (found,) = [
        r
        for r in summary["paired"]
        if (r["comparison"], r["method"], r["G"], r["checkpoint"], r["lr"])
        == (comparison, "ebpo", 2, checkpoint, lr)
    ]
    return found


def assert_interval(found: dict, expected: tuple[float, float, float]) -> None:
    got = (found["mean_diff"], found["ci_low"], found["ci_high"])
    assert got == pytest.approx(expected, abs=1e-7)


def test_learning_rates_are_chosen_on_validation(tmp_path):
    config = bench_config(tmp_path)
    write_cells(config)
    summary = aggregate(load_cells(config), config)
    assert summary["best_lr"]["ebpo|2"]["lr"] == 1e-4
    assert summary["best_lr"]["grpo|2"]["lr"] == 3e-4
    assert summary["best_lr"]["ebpo|2"]["scores"] == {1e-4: 0.625, 3e-4: 0.375}
    assert summary["cells_finished"] == summary["cells_total"] == 12
    assert [r["chosen"] for r in summary["lr_sweep"] if r["method"] == "ebpo"] == [True, False]


def test_paired_differences_at_the_chosen_rates_equal_a_hand_computation(tmp_path):
    config = bench_config(tmp_path)
    write_cells(config)
    summary = aggregate(load_cells(config), config)
    ebpo, grpo = CELLS[("ebpo", 1e-4)], CELLS[("grpo", 3e-4)]
    final = row(summary, "best_lr", "final", 1e-4)
    assert (final["reference_lr"], final["seeds"]) == (3e-4, 3)
    assert_interval(final, interval([a - b for a, b in zip(ebpo[2], grpo[2], strict=True)]))
    assert_interval(
        row(summary, "best_lr", "2", 1e-4),
        interval([a - b for a, b in zip(ebpo[1], grpo[1], strict=True)]),
    )
    # steps to 0.5 (interpolated between evaluations; GRPO's seed 2 never reaches it: its last step)
    ebpo_steps = [
        2 + (0.5 - 0.375) / (0.625 - 0.375) * 2,
        0 + (0.5 - 0.25) / (0.5 - 0.25) * 2,
        (0.5 - 0.25) / (0.625 - 0.25) * 2,
    ]
    grpo_steps = [2 + (0.5 - 0.25) / (0.5 - 0.25) * 2, 2 + (0.5 - 0.375) / (0.5 - 0.375) * 2, 4.0]
    steps = row(summary, "best_lr", "steps_to_target", 1e-4)
    assert_interval(steps, interval([a - b for a, b in zip(ebpo_steps, grpo_steps, strict=True)]))
    assert (steps["reached"], steps["reference_reached"]) == (3, 2)


def test_equal_rate_comparison_pairs_both_methods_at_each_rate(tmp_path):
    config = bench_config(tmp_path)
    write_cells(config)
    summary = aggregate(load_cells(config), config)
    for lr in (1e-4, 3e-4):
        found = row(summary, "equal_lr", "final", lr)
        assert found["reference_lr"] == lr
        expected = [
            a - b for a, b in zip(CELLS[("ebpo", lr)][2], CELLS[("grpo", lr)][2], strict=True)
        ]
        assert_interval(found, interval(expected))


def test_a_seed_without_its_partner_is_left_out_of_the_pairs(tmp_path):
    config = bench_config(tmp_path)
    write_cells(config, skip=("grpo", 3e-4, 1))
    summary = aggregate(load_cells(config), config)
    assert summary["cells_finished"] == 11
    final = row(summary, "best_lr", "final", 1e-4)
    assert final["seeds"] == 2
    assert final["mean_diff"] == pytest.approx(((0.625 - 0.5) + (0.5 - 0.375)) / 2)


def test_level_table_and_curves_are_seed_means_with_intervals(tmp_path):
    config = bench_config(tmp_path)
    write_cells(config)
    summary = aggregate(load_cells(config), config)
    assert summary["columns"] == ["add", "tier 1", "avg"]
    (ebpo,) = [r for r in summary["table_best_lr"] if r["method"] == "ebpo"]
    finals = CELLS[("ebpo", 1e-4)][2]
    assert ebpo["lr"] == 1e-4 and ebpo["seeds"] == [0, 1, 2]
    assert ebpo["avg"]["mean"] == pytest.approx(statistics.mean(finals))
    assert ebpo["avg"]["ci"] == pytest.approx(T_975_DF2 * statistics.stdev(finals) / math.sqrt(3))
    pass1 = summary["curves"]["ebpo|2"]["pass1"]
    assert pass1["step"] == [0, 2, 4]
    assert pass1["mean"] == pytest.approx(
        [START, statistics.mean(CELLS[("ebpo", 1e-4)][1]), statistics.mean(finals)]
    )
    assert summary["curves"]["ebpo|2"]["grad_norm"]["mean"] == pytest.approx(
        [2.0] * 4
    )  # seeds 0..2 log 1, 2, 3
    assert summary["curves"]["ebpo|2"]["shrinkage"]["mean"] == pytest.approx([0.5] * 4)
    assert summary["curves"]["grpo|2"]["shrinkage"]["step"] == []  # GRPO logs no shrinkage
    assert summary["cell_wall_time_s"]["total"] == pytest.approx(12 * 10.0 + 4 * (0 + 1 + 2))
