"""ebpo.lab.bench.contrasts and the contrasts of the bench's summary, report and plots: the paired
differences of declared (method, baseline) pairs against a slow hand computation on a small
synthetic table (three methods, two G, four seeds), the parsing of ``--contrasts``, the
validation, the registry-driven methods, and the command line."""

from __future__ import annotations

import dataclasses
import math
import statistics
from pathlib import Path

import pytest

from ebpo.cli import main
from ebpo.estimators import available_estimators
from ebpo.lab.bench import methods as bench_methods
from ebpo.lab.bench import plots
from ebpo.lab.bench.cells import CELL_FILE, load_cells
from ebpo.lab.bench.config import BenchConfig, CellSpec
from ebpo.lab.bench.contrasts import (
    CONTRAST_PRESETS,
    Contrast,
    contrast_methods,
    default_contrasts,
    parse_contrasts,
)
from ebpo.lab.bench.methods import METHODS, available_methods
from ebpo.lab.bench.report import write_report
from ebpo.lab.bench.summary import aggregate
from ebpo.utils.files import write_json
from tests.lab.bench.synthetic_bench import levels

#: t_{0.975, 3} (scipy.stats.t.ppf(0.975, 3)): four seeds
T_975_DF3 = 3.182446305284263
SEEDS = (0, 1, 2, 3)
LR = 1e-4
#: (method, G) -> (Pass@1 at step 2 per seed, final Pass@1 per seed); dr_grpo stands in for a
#: middle method (GRPO-BN in the shrinkage preset) so the test runs without it
TABLE = {
    ("grpo", 2): ([0.25, 0.375, 0.25, 0.5], [0.375, 0.5, 0.25, 0.625]),
    ("dr_grpo", 2): ([0.375, 0.375, 0.5, 0.5], [0.5, 0.625, 0.5, 0.625]),
    ("ebpo", 2): ([0.5, 0.375, 0.625, 0.5], [0.75, 0.625, 0.5, 0.875]),
    ("grpo", 4): ([0.25, 0.25, 0.375, 0.375], [0.5, 0.375, 0.5, 0.5]),
    ("dr_grpo", 4): ([0.25, 0.5, 0.375, 0.25], [0.5, 0.5, 0.625, 0.375]),
    ("ebpo", 4): ([0.375, 0.5, 0.375, 0.5], [0.625, 0.5, 0.75, 0.5]),
}
CONTRASTS = (
    Contrast("ebpo", "dr_grpo", "shrinkage"),
    Contrast("dr_grpo", "grpo", "normalisation"),
)


def table_config(tmp_path: Path, **overrides) -> BenchConfig:
    values = {
        "methods": ("grpo", "dr_grpo", "ebpo"),
        "contrasts": CONTRASTS,
        "group_sizes": (2, 4),
        "seeds": SEEDS,
        "learning_rates": (LR,),
        "steps": 4,
        "eval_every": 2,
        "checkpoints": (2,),
        "target_gain": 0.25,
        "output_dir": str(tmp_path / "bench"),
    }
    return BenchConfig(**{**values, **overrides})


def write_table(config: BenchConfig) -> None:
    """One finished cell.json per (method, G, seed) of :data:`TABLE`, warm start 0.25."""
    for (method, g), (mid, final) in TABLE.items():
        for seed in SEEDS:
            spec = CellSpec(method, g, LR, seed)
            write_json(
                Path(config.output_dir) / spec.relative_dir() / CELL_FILE,
                {
                    "spec": dataclasses.asdict(spec),
                    "fingerprint": config.fingerprint(),
                    "status": "completed",
                    "wall_time_s": 1.0,
                    "validation": levels(final[seed]),
                    "heldout": levels(final[seed]),
                    "heldout_before": levels(0.25),
                    "eval_curve": {"step": [0, 2, 4], "pass1": [0.25, mid[seed], final[seed]]},
                    "curves": {"step": [1], "reward": [0.5]},
                },
            )


def hand_interval(method: str, baseline: str, g: int, at: int) -> tuple[float, float, float]:
    """The slow reference: seed by seed, method − baseline; mean ± t_{0.975,3} · sd / 2."""
    differences = [TABLE[(method, g)][at][seed] - TABLE[(baseline, g)][at][seed] for seed in SEEDS]
    mean = statistics.mean(differences)
    half = T_975_DF3 * statistics.stdev(differences) / math.sqrt(len(differences))
    return mean, mean - half, mean + half


def test_each_declared_contrast_equals_a_hand_computation(tmp_path):
    config = table_config(tmp_path)
    write_table(config)
    rows = aggregate(load_cells(config), config)["paired"]
    pass1 = [r for r in rows if r["checkpoint"] in ("2", "final")]
    # one row per (comparison: best_lr and the one equal rate) × contrast × G × checkpoint, nothing else
    assert len(pass1) == 2 * 2 * 2 * 2
    assert {(r["method"], r["baseline"]) for r in rows} == {
        ("ebpo", "dr_grpo"),
        ("dr_grpo", "grpo"),
    }
    for r in pass1:
        at = 0 if r["checkpoint"] == "2" else 1
        expected = hand_interval(r["method"], r["baseline"], r["G"], at)
        assert (r["mean_diff"], r["ci_low"], r["ci_high"]) == pytest.approx(
            expected, abs=1e-9
        )  # the t table has 9 decimals
        assert r["seeds"] == 4 and (r["lr"], r["reference_lr"]) == (LR, LR)
        label = "shrinkage" if r["method"] == "ebpo" else "normalisation"
        assert r["contrast"] == f"{r['method']} − {r['baseline']} ({label})"


def test_the_two_contrasts_add_up_to_the_difference_to_grpo(tmp_path):
    config = table_config(tmp_path, contrasts=(*CONTRASTS, Contrast("ebpo", "grpo")))
    write_table(config)
    rows = aggregate(load_cells(config), config)["paired"]
    final = {
        (r["method"], r["baseline"], r["G"]): r["mean_diff"]
        for r in rows
        if (r["comparison"], r["checkpoint"]) == ("best_lr", "final")
    }
    for g in (2, 4):
        assert final[("ebpo", "dr_grpo", g)] + final[("dr_grpo", "grpo", g)] == pytest.approx(
            final[("ebpo", "grpo", g)], abs=1e-12
        )


def test_without_declared_contrasts_every_method_is_read_against_grpo(tmp_path):
    config = table_config(tmp_path, contrasts=None)
    write_table(config)
    rows = aggregate(load_cells(config), config)["paired"]
    assert {(r["method"], r["baseline"]) for r in rows} == {("dr_grpo", "grpo"), ("ebpo", "grpo")}
    assert config.comparisons() == default_contrasts(config.methods)
    assert default_contrasts(("ebpo", "rloo")) == ()  # no GRPO, nothing to read against


def test_the_report_names_the_contrasts_and_draws_them_over_g(tmp_path, monkeypatch):
    config = table_config(tmp_path)
    write_table(config)
    summary = aggregate(load_cells(config), config)
    drawn: dict = {}

    def record(path, panels, **kwargs):
        drawn.update(panels=panels, **kwargs)
        return path

    monkeypatch.setattr(plots, "plot_interval_lines", record)
    plots._contrast_plot(summary, config, Path(config.output_dir), "")
    assert list(drawn["panels"]) == ["step 2", "step 4 (final)"]
    shrinkage = drawn["panels"]["step 4 (final)"]["ebpo − dr_grpo (shrinkage)"]
    assert [x for x, *_ in shrinkage] == [2, 4]
    for g, mean, low, high in shrinkage:
        assert (mean, low, high) == pytest.approx(
            tuple(100 * v for v in hand_interval("ebpo", "dr_grpo", g, 1))
        )
    monkeypatch.undo()
    text = write_report(summary, config, plots=False).read_text()
    assert "## Paired differences (method − baseline)" in text
    assert "| method − baseline | lr / baseline lr | seeds |" in text
    assert "| ebpo − dr_grpo (shrinkage) | 0.0001 / 0.0001 | 4 |" in text


def test_contrasts_png_is_written_and_linked(tmp_path):
    pytest.importorskip("matplotlib")
    config = table_config(tmp_path)
    write_table(config)
    text = write_report(aggregate(load_cells(config), config), config).read_text()
    assert (Path(config.output_dir) / "contrasts.png").stat().st_size > 0
    assert "![contrasts](contrasts.png)" in text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ebpo", "METHOD-BASELINE"),
        ("ebpo-grpo-x", "METHOD-BASELINE"),
        ("ebpo-ebpo", "two different methods"),
        ("ebpo-grpo,ebpo-grpo", "duplicates"),
        (" , ", "names no contrast"),
        ("-grpo", "method must be a method name"),
    ],
)
def test_parse_contrasts_refuses_what_is_not_a_list_of_pairs(text, message):
    with pytest.raises(ValueError, match=message):
        parse_contrasts(text)


def test_parse_contrasts_reads_pairs_and_presets():
    assert parse_contrasts(" ebpo-grpo_bn , grpo_bn-grpo ") == (
        None,
        (Contrast("ebpo", "grpo_bn"), Contrast("grpo_bn", "grpo")),
    )
    methods, contrasts = parse_contrasts("shrinkage")
    assert methods == ("grpo", "grpo_bn", "ebpo", "spo")
    assert [(c.method, c.baseline, c.label) for c in contrasts] == [
        ("ebpo", "grpo_bn", "shrinkage"),
        ("grpo_bn", "grpo", "normalisation"),
        ("spo", "grpo_bn", "tracker baseline"),
    ]
    assert set(contrast_methods(contrasts)) == set(CONTRAST_PRESETS["shrinkage"].methods)
    assert contrast_methods(CONTRASTS) == ("dr_grpo", "ebpo", "grpo")


def test_config_refuses_contrasts_outside_the_matrix_and_accepts_plain_pairs(tmp_path):
    with pytest.raises(ValueError, match=r"outside the matrix"):
        table_config(tmp_path, contrasts=(("rloo", "grpo"),)).validate()
    with pytest.raises(ValueError, match="duplicates"):
        table_config(tmp_path, contrasts=(("ebpo", "grpo"), ("ebpo", "grpo", "again"))).validate()
    with pytest.raises(ValueError, match="non-empty"):
        table_config(tmp_path, contrasts=()).validate()
    config = table_config(tmp_path, contrasts=(("ebpo", "grpo"), ("dr_grpo", "grpo", "std")))
    config.validate()
    assert config.comparisons() == (Contrast("ebpo", "grpo"), Contrast("dr_grpo", "grpo", "std"))
    # contrasts choose no cell: the same finished cells serve any of them
    assert config.fingerprint() == table_config(tmp_path, contrasts=None).fingerprint()


def test_methods_come_from_the_registry():
    names = available_methods()
    assert list(METHODS) == names[: len(METHODS)]
    assert set(available_estimators()) <= set(names)
    extra = next(name for name in available_estimators() if name not in METHODS)
    row = bench_methods.method(extra)
    assert (row.name, row.estimator, row.preset, row.order) == (extra, extra, extra, "shuffle")
    assert bench_methods.method("ebpo_topic") is METHODS["ebpo_topic"]
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        bench_methods.method("nope")


def test_command_line_contrasts(tmp_path, capsys):
    out = tmp_path / "b"
    for argv, message in (
        (["--contrasts", "ebpo-nope"], "got ['nope', 'ebpo']"),
        (["--contrasts", "ebpo+grpo"], "METHOD-BASELINE"),
        (["--contrasts", "ebpo-grpo", "--estimators", "ebpo,rloo"], "outside the matrix"),
    ):
        assert main(["bench", *argv, "--output-dir", str(out)]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1
        assert not out.exists()
    # without --estimators the matrix is the contrasts' methods; --report-only reads them
    config = table_config(tmp_path)
    write_table(config)
    argv = ["bench", "--report-only", "--output-dir", config.output_dir, "--group-sizes", "2,4",
            "--seeds", "4", "--lrs", "1e-4", "--steps", "4", "--eval-every", "2",
            "--checkpoints", "2", "--contrasts", "ebpo-dr_grpo,dr_grpo-grpo"]  # fmt: skip
    assert main(argv) == 0
    assert "24/24 cells finished" in capsys.readouterr().out
    text = (Path(config.output_dir) / "results.md").read_text()
    assert "methods dr_grpo, ebpo, grpo" in text and "| ebpo − dr_grpo |" in text
    assert main(["bench", "--list"]) == 0
    listed = capsys.readouterr().out
    assert "shrinkage" in listed and all(name in listed for name in available_methods())
