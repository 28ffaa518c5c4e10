"""ebpo.bench: statistics, learning-rate selection on validation, resumability, steps-to-target,
the report, and the quick mode (fake runner; one slow test with real tiny training)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from ebpo import bench
from ebpo.bench import BenchConfig, CellSpec

T_975_DF2 = 4.302652729911275  # scipy.stats.t.ppf(0.975, 2)


# ---------------------------------------------------------------------- a fake, instant runner
def evaluation(overall: float) -> dict:
    return {
        "overall": overall,
        "topics": {"add": overall + 0.1, "mul": overall - 0.1},
        "tiers": {"1": overall + 0.2, "2": overall - 0.2},
    }


class FakeRunner:
    """Deterministic cell results from ``validation(spec)`` / ``heldout(spec)``; records its calls.

    The held-out curve rises linearly from 0 to the final value, every ``eval_every`` steps."""

    def __init__(self, validation=None, heldout=None, fail_on: CellSpec | None = None) -> None:
        self.validation = validation or (lambda s: 0.5)
        self.heldout = heldout or (lambda s: 0.5)
        self.fail_on = fail_on
        self.calls: list[CellSpec] = []

    def __call__(self, spec: CellSpec, config: BenchConfig, directory: Path) -> dict:
        self.calls.append(spec)
        assert directory == bench.cell_dir(config.output_dir, spec)
        if spec == self.fail_on:
            raise KeyboardInterrupt("simulated Ctrl-C")
        final = self.heldout(spec)
        steps = list(range(0, config.steps + 1, config.eval_every or config.steps))
        if steps[-1] != config.steps:
            steps.append(config.steps)
        train_steps = list(range(1, config.steps + 1))
        return {
            "validation": evaluation(self.validation(spec)),
            "heldout": evaluation(final),
            "eval_curve": {"step": steps, "pass1": [final * s / config.steps for s in steps]},
            "curves": {
                "step": train_steps,
                "reward": [0.1 * s for s in train_steps],
                "entropy": [1.0 / s for s in train_steps],
                "grad_norm": [1.0 + spec.seed for _ in train_steps],
                "shrinkage": [0.5 if spec.method.startswith("ebpo") else None for _ in train_steps],
            },
        }


def config(tmp_path: Path, **overrides) -> BenchConfig:
    values = {
        "methods": ("grpo", "ebpo"),
        "group_sizes": (2, 4),
        "seeds": (0, 1, 2),
        "learning_rates": (1e-4, 2e-4, 5e-4),
        "steps": 10,
        "eval_every": 2,
        "output_dir": str(tmp_path / "bench"),
    }
    values.update(overrides)
    return BenchConfig(**values)


# ---------------------------------------------------------------------- statistics
def test_mean_ci_matches_a_hand_computed_t_interval():
    values = [0.2, 0.4, 0.9]
    stats = bench.mean_ci(values)
    sd = math.sqrt(((0.2 - 0.5) ** 2 + (0.4 - 0.5) ** 2 + (0.9 - 0.5) ** 2) / 2)
    assert stats["n"] == 3
    assert stats["mean"] == pytest.approx(0.5)
    assert stats["ci"] == pytest.approx(T_975_DF2 * sd / math.sqrt(3), rel=1e-8)
    # a normal-approximation interval (1.96) would be less than half as wide: the t matters at 3 seeds
    assert stats["ci"] > 2 * 1.96 * sd / math.sqrt(3)


def test_mean_ci_edge_cases():
    one = bench.mean_ci([0.3])
    assert one["mean"] == 0.3 and math.isnan(one["ci"]) and one["n"] == 1
    assert bench.mean_ci([])["n"] == 0 and math.isnan(bench.mean_ci([])["mean"])
    assert bench.mean_ci([0.1, float("nan"), 0.3])["n"] == 2  # NaN ignored
    assert bench.mean_ci([0.4, 0.4])["ci"] == 0.0


def test_t_quantile_table_and_large_df():
    assert bench.t_quantile_975(1) == pytest.approx(12.706204736)
    assert bench.t_quantile_975(2) == pytest.approx(T_975_DF2)
    assert bench.t_quantile_975(40) == pytest.approx(2.0210753903, abs=1e-6)  # scipy value
    assert bench.t_quantile_975(1000) == pytest.approx(1.9623390808, abs=1e-6)
    with pytest.raises(ValueError, match="df"):
        bench.t_quantile_975(0)


def test_table_is_mean_and_ci_over_seeds(tmp_path):
    per_seed = {0: 0.30, 1: 0.50, 2: 0.55}
    runner = FakeRunner(heldout=lambda s: per_seed[s.seed] + (0.1 if s.method == "ebpo" else 0.0))
    cfg = config(tmp_path, learning_rates=(1e-4,), group_sizes=(4,))
    summary = bench.run_bench(cfg, runner, progress=False, plots=False)
    row = next(r for r in summary["table_best_lr"] if r["method"] == "ebpo" and r["G"] == 4)
    values = [per_seed[s] + 0.1 for s in (0, 1, 2)]
    mean = sum(values) / 3
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / 2)
    assert row["avg"]["mean"] == pytest.approx(mean)
    assert row["avg"]["ci"] == pytest.approx(T_975_DF2 * sd / math.sqrt(3))
    assert row["add"]["mean"] == pytest.approx(mean + 0.1)  # per-topic column
    assert row["tier 2"]["mean"] == pytest.approx(mean - 0.2)  # per-tier column
    assert summary["columns"] == ["add", "mul", "tier 1", "tier 2", "avg"]
    assert row["seeds"] == [0, 1, 2]


# ---------------------------------------------------------------------- learning-rate selection
def test_learning_rate_is_chosen_on_validation_never_on_heldout(tmp_path):
    # validation prefers 1e-4, held-out prefers 5e-4: the bench must pick 1e-4 and report held-out there
    validation = {1e-4: 0.8, 2e-4: 0.5, 5e-4: 0.2}
    heldout = {1e-4: 0.3, 2e-4: 0.5, 5e-4: 0.9}
    runner = FakeRunner(validation=lambda s: validation[s.learning_rate], heldout=lambda s: heldout[s.learning_rate])
    cfg = config(tmp_path, equal_lr=5e-4)
    summary = bench.run_bench(cfg, runner, progress=False, plots=False)
    for row in summary["table_best_lr"]:
        assert row["lr"] == 1e-4
        assert row["avg"]["mean"] == pytest.approx(0.3)
    for row in summary["table_equal_lr"]:
        assert row["lr"] == 5e-4 and row["avg"]["mean"] == pytest.approx(0.9)
    cells = bench.load_cells(cfg)
    assert {v["lr"] for v in bench.select_learning_rates(cells).values()} == {1e-4}
    assert {v["lr"] for v in bench.select_learning_rates(cells, split="heldout").values()} == {5e-4}
    chosen = [r for r in summary["lr_sweep"] if r["chosen"]]
    assert {r["lr"] for r in chosen} == {1e-4} and len(chosen) == 4  # 2 methods x 2 G


def test_learning_rate_selection_averages_seeds_and_breaks_ties_low(tmp_path):
    # seed 0 alone would choose 5e-4; the mean over seeds chooses 2e-4
    scores = {(1e-4, 0): 0.1, (1e-4, 1): 0.1, (2e-4, 0): 0.5, (2e-4, 1): 0.6, (5e-4, 0): 0.7, (5e-4, 1): 0.2}
    runner = FakeRunner(validation=lambda s: scores[(s.learning_rate, s.seed)])
    cfg = config(tmp_path, methods=("grpo",), group_sizes=(4,), seeds=(0, 1))
    bench.run_bench(cfg, runner, progress=False, plots=False)
    best = bench.select_learning_rates(bench.load_cells(cfg))
    assert best[("grpo", 4)]["lr"] == 2e-4
    tied = bench.select_learning_rates(bench.load_cells(config(tmp_path, methods=("grpo",), group_sizes=(4,), seeds=(0, 1))), split="validation")
    assert tied[("grpo", 4)]["scores"][2e-4] == pytest.approx(0.55)
    with pytest.raises(ValueError, match="split"):
        bench.select_learning_rates([], split="test")


def test_ties_go_to_the_smaller_learning_rate(tmp_path):
    cfg = config(tmp_path, methods=("grpo",), group_sizes=(4,), seeds=(0,))
    bench.run_bench(cfg, FakeRunner(validation=lambda s: 0.5), progress=False, plots=False)
    assert bench.select_learning_rates(bench.load_cells(cfg))[("grpo", 4)]["lr"] == 1e-4


# ---------------------------------------------------------------------- resumability
def test_finished_cells_are_skipped_on_rerun(tmp_path):
    cfg = config(tmp_path)
    first = FakeRunner()
    summary = bench.run_bench(cfg, first, progress=False, plots=False)
    assert len(first.calls) == len(cfg.cells()) == 2 * 2 * 3 * 3
    assert summary["bench"] == {**summary["bench"], "ran": 36, "skipped": 0}
    second = FakeRunner()
    summary = bench.run_bench(cfg, second, progress=False, plots=False)
    assert second.calls == []
    assert summary["bench"]["ran"] == 0 and summary["bench"]["skipped"] == 36


def test_an_interrupted_cell_reruns(tmp_path):
    cfg = config(tmp_path)
    cells = cfg.cells()
    broken = cells[5]
    with pytest.raises(KeyboardInterrupt):
        bench.run_bench(cfg, FakeRunner(fail_on=broken), progress=False, plots=False)
    assert not (bench.cell_dir(cfg.output_dir, broken) / bench.CELL_FILE).exists()
    assert len(bench.load_cells(cfg)) == 5  # the cells before it are kept
    again = FakeRunner()
    bench.run_bench(cfg, again, progress=False, plots=False)
    assert again.calls == cells[5:]  # the interrupted cell first, nothing finished re-runs


def test_a_change_of_train_job_defaults_makes_cells_stale(tmp_path, monkeypatch):
    from ebpo import training

    cfg = config(tmp_path, methods=("grpo",), group_sizes=(4,), seeds=(0,), learning_rates=(1e-4,))
    bench.run_bench(cfg, FakeRunner(), progress=False, plots=False)
    identity = training.TrainJobConfig.identity
    monkeypatch.setattr(training.TrainJobConfig, "identity", lambda self: {**identity(self), "rl_per_cell": -1})
    runner = FakeRunner()
    bench.run_bench(cfg, runner, progress=False, plots=False)
    assert len(runner.calls) == 1


def test_report_of_an_unfinished_matrix_says_so(tmp_path):
    cfg = config(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        bench.run_bench(cfg, FakeRunner(fail_on=cfg.cells()[7]), progress=False, plots=False)
    summary = bench.aggregate(bench.load_cells(cfg), cfg)
    assert (summary["cells_finished"], summary["cells_total"]) == (7, 36)
    text = bench.write_report(summary, cfg, plots=False).read_text()
    assert "Partial results: 7 of 36 cells" in text


def test_a_cell_made_with_other_settings_reruns(tmp_path):
    cfg = config(tmp_path, methods=("grpo",), group_sizes=(4,), seeds=(0,), learning_rates=(1e-4,))
    bench.run_bench(cfg, FakeRunner(), progress=False, plots=False)
    longer = config(tmp_path, methods=("grpo",), group_sizes=(4,), seeds=(0,), learning_rates=(1e-4,), steps=20)
    assert bench.load_cells(longer) == []  # stale cells are not aggregated
    runner = FakeRunner()
    bench.run_bench(longer, runner, progress=False, plots=False)
    assert len(runner.calls) == 1


def test_shards_split_the_matrix_and_share_the_report(tmp_path):
    cfg = config(tmp_path)
    first, second = FakeRunner(), FakeRunner()
    bench.run_bench(cfg, first, progress=False, plots=False, shard=(0, 2))
    summary = bench.run_bench(cfg, second, progress=False, plots=False, shard=(1, 2))
    assert set(first.calls).isdisjoint(second.calls)
    assert len(first.calls) + len(second.calls) == len(cfg.cells())
    assert summary["cells_finished"] == len(cfg.cells())  # the report covers every shard's cells
    with pytest.raises(ValueError, match="shard"):
        bench.shard_cells(cfg.cells(), (2, 2))


def test_cells_run_seed_by_seed(tmp_path):
    seeds = [spec.seed for spec in config(tmp_path).cells()]
    assert seeds == sorted(seeds)


# ---------------------------------------------------------------------- steps-to-target
def test_steps_to_target_function():
    assert bench.steps_to_target([0, 5, 10], [0.1, 0.4, 0.6], 0.4) == 5
    assert bench.steps_to_target([0, 5, 10], [0.1, 0.4, 0.6], 0.7) is None
    assert bench.steps_to_target([0, 5, 10], [0.5, 0.4, 0.6], 0.45) == 0
    with pytest.raises(ValueError, match="length"):
        bench.steps_to_target([0, 5], [0.1], 0.2)
    with pytest.raises(ValueError, match="target"):
        bench.steps_to_target([0], [0.1], float("nan"))


def test_steps_to_target_uses_grpo_final_pass1(tmp_path):
    # held-out curves rise linearly to the final value; grpo ends at 0.4, ebpo at 0.8 -> ebpo
    # reaches 0.4 halfway (step 5 of 10), grpo only at its last step
    runner = FakeRunner(heldout=lambda s: 0.8 if s.method == "ebpo" else 0.4)
    cfg = config(tmp_path, group_sizes=(4,), learning_rates=(1e-4,), eval_every=1)
    summary = bench.run_bench(cfg, runner, progress=False, plots=False)
    rows = {r["method"]: r for r in summary["steps_to_target_best_lr"]}
    assert rows["grpo"]["target"] == pytest.approx(0.4)
    assert rows["grpo"]["steps_mean_curve"] == 10
    assert rows["ebpo"]["steps_mean_curve"] == 5
    assert rows["ebpo"]["seeds_reached"] == 3


def test_steps_to_target_needs_the_reference(tmp_path):
    cfg = config(tmp_path, methods=("ebpo",), group_sizes=(4,), seeds=(0,), learning_rates=(1e-4,))
    summary = bench.run_bench(cfg, FakeRunner(), progress=False, plots=False)
    assert summary["steps_to_target_best_lr"] == []
    assert "needs finished `grpo` cells" in (Path(cfg.output_dir) / "results.md").read_text()


# ---------------------------------------------------------------------- report and command line
def test_report_files(tmp_path):
    cfg = config(tmp_path)
    bench.run_bench(cfg, FakeRunner(heldout=lambda s: 0.4 + 0.1 * s.seed), progress=False)
    out = Path(cfg.output_dir)
    for name in ("results.md", "summary.json", "table_best_lr.csv", "table_equal_lr.csv", "lr_sweep.csv", "steps_to_target.csv"):
        assert (out / name).is_file(), name
    for name in ("heldout_pass1_best_lr", "heldout_pass1_equal_lr", "reward", "grad_norm", "entropy", "shrinkage"):
        assert (out / f"{name}.png").stat().st_size > 1000, name
    text = (out / "results.md").read_text()
    assert "## G = 4, each method at its best learning rate (validation)" in text
    assert "## G = 2, every method at learning rate 0.0002" in text
    assert "50.0 ± " in text  # mean of 0.4, 0.5, 0.6 in %, with an interval
    header = (out / "table_best_lr.csv").read_text().splitlines()[0]
    assert header.startswith("method,G,lr,seeds,add_mean,add_ci95")
    json.loads((out / "summary.json").read_text())


def test_bad_config_raises_naming_the_argument(tmp_path):
    for overrides, name in (
        ({"methods": ("nope",)}, "methods"),
        ({"group_sizes": (1,)}, "group_sizes"),
        ({"seeds": ()}, "seeds"),
        ({"learning_rates": (0.0,)}, "learning_rates"),
        ({"equal_lr": 3e-4}, "equal_lr"),
        ({"steps": 0}, "steps"),
        ({"eval_every": -1}, "eval_every"),
        ({"train_options": {"no_such_field": 1}}, "train_options"),
        ({"train_options": {"output_dir": "x"}}, "train_options"),
        ({"train_options": {"dataset": "math-500"}}, "dataset"),
    ):
        with pytest.raises(ValueError, match=name):
            bench.run_bench(config(tmp_path, **overrides), FakeRunner(), progress=False, plots=False)


def test_methods_map_to_train_job_options():
    assert bench.METHODS["ebpo_topic"].train_options()["order"] == "topic"
    assert bench.METHODS["ebpo_difficulty"].train_options()["order"] == "difficulty"
    cluster = bench.METHODS["ebpo_cluster"].train_options()
    assert cluster["estimator_options"] == {"per_cluster": True} and cluster["cluster_column"] == "topic"
    assert len(bench.DEFAULT_METHODS) == 10 and all(m in bench.METHODS for m in bench.DEFAULT_METHODS)


def test_quick_mode_command_end_to_end_with_a_fake_runner(tmp_path, monkeypatch, capsys):
    import torch

    from ebpo.cli import main

    runner = FakeRunner()
    monkeypatch.setattr(bench, "train_job_runner", runner)
    threads = torch.get_num_threads()
    out = tmp_path / "quick"
    try:
        assert main(["bench", "--quick", "--output-dir", str(out), "--threads", "1"]) == 0
        assert torch.get_num_threads() == 1  # the real runner's process-wide setting was applied
    finally:
        torch.set_num_threads(threads)
    quick = BenchConfig.quick()
    assert len(runner.calls) == len(quick.cells()) == 4  # 2 methods x 1 G x 2 lrs x 1 seed
    assert {s.method for s in runner.calls} == {"grpo", "ebpo"}
    assert (out / "results.md").is_file() and (out / "heldout_pass1_best_lr.png").is_file()
    assert "ran 4 cells" in capsys.readouterr().out
    assert main(["bench", "--quick", "--output-dir", str(out)]) == 0  # resumed: nothing to run
    assert len(runner.calls) == 4
    assert main(["bench", "--quick", "--output-dir", str(out), "--report-only"]) == 0


def test_command_line_errors(tmp_path, capsys):
    from ebpo.cli import main

    assert main(["bench", "--group-sizes", "2,x", "--output-dir", str(tmp_path)]) == 2
    assert "--group-sizes" in capsys.readouterr().err
    assert main(["bench", "--estimators", "grpo,nope", "--output-dir", str(tmp_path)]) == 2
    assert "methods" in capsys.readouterr().err
    assert main(["bench", "--shard", "3/2", "--output-dir", str(tmp_path)]) == 2
    assert "--shard" in capsys.readouterr().err
    assert main(["bench", "--list"]) == 0
    assert "ebpo_cluster" in capsys.readouterr().out


# ---------------------------------------------------------------------- real training
@pytest.mark.slow
@pytest.mark.trl
def test_quick_mode_with_real_training(tmp_path):
    pytest.importorskip("trl")
    # the quick matrix (2 methods x 2 learning rates, 1 seed) with a short warm start and small
    # evaluations, cached in tmp_path, so that CI stays within a few minutes
    cfg = BenchConfig.quick(
        output_dir=str(tmp_path / "quick"),
        steps=2,
        eval_every=1,
        eval_problems=2,
        eval_samples=8,
        train_options={"warm_start_steps": 50, "train_per_cell": 20, "cache_dir": str(tmp_path / "cache")},
    )
    started = time.time()
    summary = bench.run_bench(cfg, progress=False)
    assert summary["cells_finished"] == 4
    cell = bench.load_cells(cfg)[0]
    assert set(cell["validation"]) >= {"overall", "topics", "tiers"}
    assert cell["eval_curve"]["step"] == [0, 1, 2]
    assert len(cell["curves"]["step"]) == 2 and all(v is not None for v in cell["curves"]["grad_norm"])
    assert (Path(cfg.output_dir) / "heldout_pass1_best_lr.png").is_file()
    assert not (Path(cfg.output_dir) / cell["run_dir"] / "checkpoints").exists()  # cleaned up
    assert time.time() - started < 600
