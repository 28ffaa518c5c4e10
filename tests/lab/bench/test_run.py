"""ebpo.lab.bench.run and ebpo.lab.bench.report: the paired comparison (differences to GRPO seed by
seed, against a hand computation), learning rates chosen on validation, resumability, shards, the
report files, the command line (fake runner), and one quick bench with real training."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from ebpo.lab.bench import cells as bench_cells
from ebpo.lab.bench import methods as bench_methods
from ebpo.lab.bench import report as bench_report
from ebpo.lab.bench import run as bench
from ebpo.lab.bench import summary as bench_summary
from ebpo.lab.bench.config import BenchConfig, CellSpec

T_975_DF2 = 4.302652729911275  # scipy.stats.t.ppf(0.975, 2)


# ---------------------------------------------------------------------- a fake, instant runner
def evaluation(overall: float) -> dict:
    return {
        "overall": overall,
        "topics": {"add": overall + 0.1, "mul": overall - 0.1},
        "tiers": {"1": overall + 0.2, "2": overall - 0.2},
    }


class FakeRunner:
    """Deterministic cells: ``start(spec)`` is the warm start's Pass@1 (step 0), ``heldout(spec)``
    the final one; the curve rises linearly between them, one point every ``eval_every`` steps."""

    def __init__(
        self, validation=None, heldout=None, start=None, fail_on: CellSpec | None = None
    ) -> None:
        self.validation = validation or (lambda s: 0.5)
        self.heldout = heldout or (lambda s: 0.5)
        self.start = start or (lambda s: 0.2)
        self.fail_on = fail_on
        self.calls: list[CellSpec] = []

    def __call__(self, spec: CellSpec, config: BenchConfig, directory: Path) -> dict:
        self.calls.append(spec)
        assert directory == Path(config.output_dir) / spec.relative_dir()
        if spec == self.fail_on:
            raise KeyboardInterrupt("simulated Ctrl-C")
        start, final = self.start(spec), self.heldout(spec)
        steps = list(range(0, config.steps + 1, config.eval_every))
        if steps[-1] != config.steps:
            steps.append(config.steps)
        train_steps = list(range(1, config.steps + 1))
        return {
            "validation": evaluation(self.validation(spec)),
            "heldout": evaluation(final),
            "heldout_before": evaluation(start),
            "eval_curve": {
                "step": steps,
                "pass1": [start + (final - start) * s / config.steps for s in steps],
            },
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
        "checkpoints": (2, 4),
        "output_dir": str(tmp_path / "bench"),
    }
    values.update(overrides)
    return BenchConfig(**values)


def run(cfg: BenchConfig, runner: FakeRunner, **kwargs) -> dict:
    return bench.run_bench(cfg, runner, progress=False, plots=kwargs.pop("plots", False), **kwargs)


# ---------------------------------------------------------------------- paired differences
def test_paired_differences_match_a_hand_computation(tmp_path):
    # per seed: GRPO final 0.30 / 0.50 / 0.70; EBPO final 0.36 / 0.53 / 0.79 (differences .06 .03 .09)
    grpo, ebpo = {0: 0.30, 1: 0.50, 2: 0.70}, {0: 0.36, 1: 0.53, 2: 0.79}
    runner = FakeRunner(
        heldout=lambda s: (ebpo if s.method == "ebpo" else grpo)[s.seed],
        start=lambda s: 0.1 * s.seed,
    )
    cfg = config(tmp_path, learning_rates=(1e-4,), group_sizes=(4,))
    rows = run(cfg, runner)["paired"]
    final = next(r for r in rows if r["comparison"] == "best_lr" and r["checkpoint"] == "final")
    d = [0.06, 0.03, 0.09]
    sd = math.sqrt(sum((x - 0.06) ** 2 for x in d) / 2)
    assert final["method"] == "ebpo" and final["G"] == 4 and final["seeds"] == 3
    assert final["mean_diff"] == pytest.approx(0.06)
    assert final["ci_low"] == pytest.approx(0.06 - T_975_DF2 * sd / math.sqrt(3))
    assert final["ci_high"] == pytest.approx(0.06 + T_975_DF2 * sd / math.sqrt(3))
    # at step 2 of 10 the linear curves have covered a fifth of (final - start): differences d / 5
    early = next(r for r in rows if r["comparison"] == "best_lr" and r["checkpoint"] == "2")
    assert early["mean_diff"] == pytest.approx(0.06 / 5)
    # the reference itself is never compared with itself
    assert {r["method"] for r in rows} == {"ebpo"}


def test_steps_to_target_is_paired_and_censored(tmp_path):
    # seed s starts at 0.1 s; target = start + 0.10. GRPO gains 0.2 over 10 steps -> reaches it at
    # step 5; EBPO gains 0.4 -> step 2.5; a method that gains 0.05 never reaches it (censored at 10).
    gains = {"grpo": 0.2, "ebpo": 0.4, "ebpo_topic": 0.05}
    runner = FakeRunner(
        start=lambda s: 0.1 * s.seed, heldout=lambda s: 0.1 * s.seed + gains[s.method]
    )
    cfg = config(
        tmp_path,
        methods=("grpo", "ebpo", "ebpo_topic"),
        learning_rates=(1e-4,),
        group_sizes=(2,),
        eval_every=1,
        checkpoints=(5,),
    )
    rows = {
        (r["method"], r["checkpoint"]): r
        for r in run(cfg, runner)["paired"]
        if r["comparison"] == "best_lr"
    }
    fast = rows[("ebpo", "steps_to_target")]
    assert (
        fast["mean_diff"] == pytest.approx(2.5 - 5)
        and fast["reached"] == 3
        and fast["reference_reached"] == 3
    )
    slow = rows[("ebpo_topic", "steps_to_target")]
    assert slow["mean_diff"] == pytest.approx(10 - 5) and slow["reached"] == 0


def test_paired_uses_only_seeds_both_methods_have(tmp_path):
    cfg = config(tmp_path, learning_rates=(1e-4,), group_sizes=(2,))
    cells = cfg.cells()
    missing = next(c for c in cells if c.method == "ebpo" and c.seed == 2)
    with pytest.raises(KeyboardInterrupt):
        run(cfg, FakeRunner(fail_on=missing))
    rows = bench_summary.paired_rows(bench_cells.load_cells(cfg), cfg)
    assert rows and all(r["seeds"] == 2 for r in rows)


def test_equal_lr_pairs_each_rate_and_best_lr_uses_validation(tmp_path):
    # validation prefers 1e-4 for ebpo and 5e-4 for grpo; held-out would prefer the opposite
    validation = {("ebpo", 1e-4): 0.9, ("grpo", 5e-4): 0.9}
    heldout = {("ebpo", 5e-4): 0.9, ("grpo", 1e-4): 0.9}
    runner = FakeRunner(
        validation=lambda s: validation.get((s.method, s.learning_rate), 0.1),
        heldout=lambda s: heldout.get((s.method, s.learning_rate), 0.4),
    )
    cfg = config(tmp_path, group_sizes=(2,))
    summary = run(cfg, runner)
    best = next(
        r for r in summary["paired"] if r["comparison"] == "best_lr" and r["checkpoint"] == "final"
    )
    assert (best["lr"], best["reference_lr"]) == (1e-4, 5e-4)
    assert best["mean_diff"] == pytest.approx(0.4 - 0.4)
    equal = {
        r["lr"]: r
        for r in summary["paired"]
        if r["comparison"] == "equal_lr" and r["checkpoint"] == "final"
    }
    assert set(equal) == {1e-4, 2e-4, 5e-4} and all(
        r["reference_lr"] == r["lr"] for r in equal.values()
    )
    assert equal[1e-4]["mean_diff"] == pytest.approx(0.4 - 0.9) and equal[5e-4][
        "mean_diff"
    ] == pytest.approx(0.9 - 0.4)
    cells = bench_cells.load_cells(cfg)
    assert bench_summary.select_learning_rates(cells)[("ebpo", 2)]["lr"] == 1e-4
    assert bench_summary.select_learning_rates(cells, split="heldout")[("ebpo", 2)]["lr"] == 5e-4


def test_learning_rate_ties_go_to_the_smaller_rate(tmp_path):
    cfg = config(tmp_path, methods=("grpo",), group_sizes=(4,), seeds=(0,))
    run(cfg, FakeRunner(validation=lambda s: 0.5))
    assert (
        bench_summary.select_learning_rates(bench_cells.load_cells(cfg))[("grpo", 4)]["lr"] == 1e-4
    )
    with pytest.raises(ValueError, match="split"):
        bench_summary.select_learning_rates([], split="test")


def test_level_table_is_mean_and_ci_over_seeds(tmp_path):
    per_seed = {0: 0.30, 1: 0.50, 2: 0.55}
    cfg = config(tmp_path, learning_rates=(1e-4,), group_sizes=(4,))
    summary = run(
        cfg, FakeRunner(heldout=lambda s: per_seed[s.seed] + (0.1 if s.method == "ebpo" else 0.0))
    )
    row = next(r for r in summary["table_best_lr"] if r["method"] == "ebpo")
    values = [per_seed[s] + 0.1 for s in (0, 1, 2)]
    mean = sum(values) / 3
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / 2)
    assert row["avg"]["mean"] == pytest.approx(mean) and row["avg"]["ci"] == pytest.approx(
        T_975_DF2 * sd / math.sqrt(3)
    )
    assert row["add"]["mean"] == pytest.approx(mean + 0.1) and row["tier 2"][
        "mean"
    ] == pytest.approx(mean - 0.2)
    assert summary["columns"] == ["add", "mul", "tier 1", "tier 2", "avg"]


# ---------------------------------------------------------------------- resumability and shards
def test_finished_cells_are_skipped_and_an_interrupted_cell_reruns(tmp_path):
    cfg = config(tmp_path)
    cells = cfg.cells()
    with pytest.raises(KeyboardInterrupt):
        run(cfg, FakeRunner(fail_on=cells[5]))
    assert not (Path(cfg.output_dir) / cells[5].relative_dir() / bench_cells.CELL_FILE).exists()
    assert len(bench_cells.load_cells(cfg)) == 5
    again = FakeRunner()
    summary = run(cfg, again)
    assert again.calls == cells[5:] and summary["bench"]["ran"] == len(cells) - 5
    third = FakeRunner()
    assert run(cfg, third)["bench"]["skipped"] == len(cells) and third.calls == []


def test_a_change_of_settings_or_train_defaults_makes_cells_stale(tmp_path, monkeypatch):
    from ebpo.lab.train.job import TrainJobConfig

    cfg = config(tmp_path, methods=("grpo",), group_sizes=(4,), seeds=(0,), learning_rates=(1e-4,))
    run(cfg, FakeRunner())
    longer = config(
        tmp_path, methods=("grpo",), group_sizes=(4,), seeds=(0,), learning_rates=(1e-4,), steps=20
    )
    assert bench_cells.load_cells(longer) == []
    identity = TrainJobConfig.identity
    monkeypatch.setattr(
        TrainJobConfig, "identity", lambda self: {**identity(self), "warm_start_lr": -1}
    )
    runner = FakeRunner()
    run(cfg, runner)
    assert len(runner.calls) == 1


def test_shards_split_the_matrix_and_share_the_report(tmp_path):
    cfg = config(tmp_path)
    first, second = FakeRunner(), FakeRunner()
    run(cfg, first, shard=(0, 2))
    summary = run(cfg, second, shard=(1, 2))
    assert set(first.calls).isdisjoint(second.calls) and len(first.calls) + len(
        second.calls
    ) == len(cfg.cells())
    assert summary["cells_finished"] == len(cfg.cells())
    with pytest.raises(ValueError, match="shard"):
        bench.shard_cells(cfg.cells(), (2, 2))
    assert [s.seed for s in cfg.cells()] == sorted(s.seed for s in cfg.cells())  # seed by seed


# ---------------------------------------------------------------------- report and command line
def test_report_files(tmp_path):
    cfg = config(tmp_path)
    run(
        cfg,
        FakeRunner(heldout=lambda s: 0.4 + 0.1 * s.seed + (0.05 if s.method == "ebpo" else 0)),
        plots=True,
    )
    out = Path(cfg.output_dir)
    for name in (
        "results.md",
        "summary.json",
        "paired.csv",
        "table_best_lr.csv",
        "table_equal_lr.csv",
        "lr_sweep.csv",
    ):
        assert (out / name).is_file(), name
    for name in ("paired", "heldout_pass1", "reward", "grad_norm", "entropy", "shrinkage"):
        assert (out / f"{name}.png").stat().st_size > 1000, name
    with open(out / "paired.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == list(bench_summary.PAIRED_COLUMNS)
    assert {r["checkpoint"] for r in rows} == {"2", "4", "final", "steps_to_target"}
    final = next(
        r
        for r in rows
        if r["comparison"] == "best_lr" and r["checkpoint"] == "final" and r["G"] == "4"
    )
    assert float(final["mean_diff"]) == pytest.approx(0.05) and final["seeds"] == "3"
    text = (out / "results.md").read_text()
    assert "### G = 4, each method at its validation-chosen learning rate" in text
    assert "+5.0 [+5.0, +5.0]" in text  # a constant difference has a zero-width interval
    json.loads((out / "summary.json").read_text())


def test_report_of_an_unfinished_matrix_says_so(tmp_path):
    cfg = config(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        run(cfg, FakeRunner(fail_on=cfg.cells()[7]))
    summary = bench_summary.aggregate(bench_cells.load_cells(cfg), cfg)
    assert (summary["cells_finished"], summary["cells_total"]) == (7, 36)
    assert (
        "Partial results: 7 of 36 cells"
        in bench_report.write_report(summary, cfg, plots=False).read_text()
    )


@pytest.mark.parametrize(
    ("overrides", "name"),
    [
        ({"methods": ("nope",)}, "methods"),
        ({"group_sizes": (1,)}, "group_sizes"),
        ({"seeds": ()}, "seeds"),
        ({"learning_rates": (0.0,)}, "learning_rates"),
        ({"steps": 0}, "steps"),
        ({"eval_every": 0}, "eval_every"),
        ({"checkpoints": (3,)}, "checkpoints"),
        ({"checkpoints": (10,)}, "checkpoints"),
        ({"target_gain": 0.0}, "target_gain"),
        ({"train_options": {"no_such_field": 1}}, "train_options"),
        ({"train_options": {"output_dir": "x"}}, "train_options"),
        ({"train_options": {"dataset": "math-500"}}, "dataset"),
        ({"train_options": {"tiers": (0,)}}, "tiers"),
    ],
)
def test_bad_config_raises_naming_the_argument(tmp_path, overrides, name):
    with pytest.raises(ValueError, match=name):
        run(config(tmp_path, **overrides), FakeRunner())
    assert not Path(config(tmp_path).output_dir).exists()


def test_default_matrix_is_valid_and_reads_steps_25_50_and_the_end():
    default = BenchConfig()
    default.validate()
    assert len(default.cells()) == len(bench_methods.DEFAULT_METHODS) * 3 * 3 * 5 == 360
    # the defaults are the documented bench (docs/results.md): checkpoints 25 and 50 before the final step
    assert (
        default.checkpoints == (25, 50)
        and default.steps == 100
        and default.steps % default.eval_every == 0
    )


def test_the_bar_says_which_cell_first_trains_the_warm_start_of_its_seed(tmp_path, monkeypatch):
    cfg = BenchConfig.quick(
        output_dir=str(tmp_path / "bench"),
        train_options={"warm_start_steps": 40, "cache_dir": str(tmp_path / "cache")},
    )
    spec = cfg.cells()[0]
    note = bench._warm_start_note(spec, cfg, bench.train_job_runner)
    assert f"warm start of seed {spec.seed} (40 supervised steps" in note
    assert (
        bench._warm_start_note(spec, cfg, FakeRunner()) == ""
    )  # an injected runner has no warm start
    monkeypatch.setattr("ebpo.lab.train.job.warm_start_pending", lambda job: job.seed != spec.seed)
    assert bench._warm_start_note(spec, cfg, bench.train_job_runner) == ""


def test_methods_map_to_train_job_options():
    assert bench_methods.METHODS["ebpo_topic"].train_options()["order"] == "topic"
    assert bench_methods.METHODS["ebpo_difficulty"].train_options()["order"] == "difficulty"
    cluster = bench_methods.METHODS["ebpo_cluster"].train_options()
    assert (
        cluster["estimator_options"] == {"per_cluster": True}
        and cluster["cluster_column"] == "topic"
    )
    assert bench_methods.METHODS["ebpo_within"].train_options()["estimator_options"] == {
        "within_variance": "within",
        "tau2_mode": "corrected",
    }
    assert bench_methods.REFERENCE_METHOD in bench_methods.DEFAULT_METHODS and all(
        m in bench_methods.METHODS for m in bench_methods.DEFAULT_METHODS
    )


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
    assert (
        len(runner.calls) == len(BenchConfig.quick().cells()) == 4
    )  # 2 methods x 1 G x 1 lr x 2 seeds
    assert (
        (out / "results.md").is_file()
        and (out / "paired.png").is_file()
        and (out / "paired.csv").is_file()
    )
    assert (out / "paired_equal_lr.png").is_file() and "paired_equal_lr.png" in (
        out / "results.md"
    ).read_text()
    console = capsys.readouterr().out
    assert "ran 4 cells" in console
    # a smoke test says so, in the report and again as the console's last line
    smoke = "Smoke test (--quick), not evidence: 2 seeds × 6 RL steps of 8 prompts from a 40-step"
    assert f"**{smoke}" in (out / "results.md").read_text()
    assert console.splitlines()[-1].startswith(f"note: {smoke}")
    assert main(["bench", "--quick", "--output-dir", str(out)]) == 0  # resumed: nothing to run
    assert len(runner.calls) == 4
    assert main(["bench", "--quick", "--output-dir", str(out), "--report-only"]) == 0


def test_results_without_learning_say_so_in_the_report_and_the_console(tmp_path, capsys):
    from ebpo.cli import main

    cfg = config(tmp_path, group_sizes=(2,), learning_rates=(1e-4,))
    flat = FakeRunner(heldout=lambda s: 0.2)  # = the warm start at every evaluation
    summary = run(cfg, flat)
    assert summary["learning"]["unchanged"] == [c.label() for c in cfg.cells()]
    text = (Path(cfg.output_dir) / "results.md").read_text()
    assert "**No learning: in all 6 cells held-out Pass@1 is the same at every evaluation" in text
    assert "Smoke test" not in text  # not a --quick run
    # --report-only prints it at the end too
    argv = ["bench", "--report-only", "--output-dir", cfg.output_dir, "--estimators", "grpo,ebpo",
            "--group-sizes", "2", "--seeds", "3", "--lrs", "1e-4", "--steps", "10",
            "--eval-every", "2", "--checkpoints", "2,4"]  # fmt: skip
    assert main(argv) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("note: No learning: in all 6 cells")

    # one method learns, the other does not; a cell without learning signal is named
    partial = config(tmp_path / "partial", group_sizes=(2,), learning_rates=(1e-4,))
    runner = FakeRunner(heldout=lambda s: 0.2 if s.method == "ebpo" else 0.5)

    def with_notice(spec, cfg, directory):
        result = runner(spec, cfg, directory)
        return {**result, "no_signal": "no learning signal" if spec.seed == 1 else None}

    run(partial, with_notice)
    lines = bench_report.caveats(bench_summary.aggregate(bench_cells.load_cells(partial), partial))
    assert lines == [
        "3 of 6 cells learned nothing measurable (held-out Pass@1 the same at every evaluation: "
        "ebpo G=2 lr=0.0001 seed=0; ebpo G=2 lr=0.0001 seed=1; ebpo G=2 lr=0.0001 seed=2); their "
        "differences say nothing about the methods.",
        "2 of 6 cells went 5 or more RL steps in a row without any learning signal (every group's "
        "rewards equal, e.g. all 0: grpo G=2 lr=0.0001 seed=1; ebpo G=2 lr=0.0001 seed=1).",
    ]


def test_the_report_counts_its_intervals_and_those_that_exclude_0(tmp_path):
    cfg = config(tmp_path, group_sizes=(2,))
    run(
        cfg,
        FakeRunner(heldout=lambda s: 0.5 + (0.02 + 0.001 * s.seed if s.method == "ebpo" else 0)),
    )
    rows = [r for r in bench_summary.aggregate(bench_cells.load_cells(cfg), cfg)["paired"]
            if r["checkpoint"] != "steps_to_target"]  # fmt: skip
    excluding = sum(r["ci_low"] > 0 or r["ci_high"] < 0 for r in rows)
    assert excluding > 0 and len(rows) == 12  # (1 chosen + 3 equal rates) x (2 checkpoints + final)
    text = (Path(cfg.output_dir) / "results.md").read_text()
    assert (
        f"The tables hold 12 Pass@1 intervals; if no method differed from its baseline, about 0.6 "
        f"of them would exclude 0 by chance at 95 %, and {excluding} do."
    ) in text


def test_command_line_errors(tmp_path, capsys):
    from ebpo.cli import main

    for argv, message in (
        (["--group-sizes", "2,x"], "--group-sizes"),
        (["--estimators", "grpo,nope"], "methods"),
        (["--shard", "3/2"], "--shard"),
        (["--checkpoints", "7"], "checkpoints"),
    ):
        assert main(["bench", *argv, "--output-dir", str(tmp_path / "b")]) == 2
        assert message in capsys.readouterr().err
    # issue #11: --report-only on a folder without cells creates nothing
    assert main(["bench", "--report-only", "--output-dir", str(tmp_path / "nonexistent")]) == 2
    assert (
        "holds no bench cells" in capsys.readouterr().err
        and not (tmp_path / "nonexistent").exists()
    )
    (tmp_path / "file").write_text("x")
    assert main(["bench", "--output-dir", str(tmp_path / "file")]) == 2
    assert "is a file" in capsys.readouterr().err
    assert main(["bench", "--list"]) == 0
    assert "ebpo_cluster" in capsys.readouterr().out


# ---------------------------------------------------------------------- real training
@pytest.mark.slow
@pytest.mark.trl
def test_quick_bench_with_real_training(tmp_path):
    """The quick matrix end to end on TRL: paired cells share the warm start (one cached model per
    seed), checkpoints are cleaned up, the report is written."""
    pytest.importorskip("trl")
    cfg = BenchConfig.quick(output_dir=str(tmp_path / "quick"), steps=2, eval_every=1, checkpoints=(1,),
                            train_options={"warm_start_steps": 20, "cache_dir": str(tmp_path / "cache")})  # fmt: skip
    summary = bench.run_bench(cfg, progress=False)
    assert summary["cells_finished"] == 4
    cells = bench_cells.load_cells(cfg)
    by_seed: dict[int, set] = {}
    for cell in cells:
        assert set(cell["validation"]) >= {"overall", "topics", "tiers"}
        assert cell["eval_curve"]["step"] == [0, 1, 2]
        assert len(cell["curves"]["step"]) == 2 and all(
            v is not None for v in cell["curves"]["grad_norm"]
        )
        assert not (Path(cfg.output_dir) / cell["run_dir"] / "checkpoints").exists()
        by_seed.setdefault(cell["spec"]["seed"], set()).add(
            json.dumps(cell["heldout_before"], sort_keys=True)
        )
    assert all(
        len(before) == 1 for before in by_seed.values()
    )  # both methods of a seed start from the same model
    assert (
        len(list((tmp_path / "cache" / "warm-start").iterdir())) == 2 + 2
    )  # a model per seed (+ lock files)
    assert {r["checkpoint"] for r in summary["paired"]} == {"1", "final", "steps_to_target"}
