"""ebpo.lab.bench.report: the files write_report promises (summary.json, the CSV tables,
results.md, the plots), from finished cells written by hand to a results folder."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import pytest

from ebpo.lab.bench.cells import load_cells
from ebpo.lab.bench.report import write_report
from ebpo.lab.bench.summary import PAIRED_COLUMNS, aggregate
from tests.lab.bench.synthetic_bench import bench_config, write_cells


def test_write_report_writes_every_file_it_promises(tmp_path):
    config = bench_config(tmp_path)
    write_cells(config)
    summary = aggregate(load_cells(config), config)
    path = write_report(summary, config, plots=False)
    out = Path(config.output_dir)
    assert path == out / "results.md"
    written = {
        "summary.json",
        "paired.csv",
        "table_best_lr.csv",
        "table_equal_lr.csv",
        "lr_sweep.csv",
        "results.md",
    }
    assert {p.name for p in out.iterdir()} == written | {"cells"}  # and no temporary file left
    assert json.loads((out / "summary.json").read_text())["best_lr"]["ebpo|2"]["lr"] == 1e-4
    with open(out / "paired.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == list(PAIRED_COLUMNS)
    assert len(rows) == len(summary["paired"])
    final = next(r for r in rows if (r["comparison"], r["checkpoint"]) == ("best_lr", "final"))
    assert float(final["mean_diff"]) == pytest.approx(statistics.mean([0.125, 0.25, 0.125]))
    with open(out / "lr_sweep.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == 4  # (method, lr) pairs
    text = path.read_text()
    assert "Cells finished: 12 / 12" in text and "Partial results" not in text
    assert "### G = 2, each method at its validation-chosen learning rate" in text


def test_write_report_draws_the_plots_and_links_them(tmp_path):
    pytest.importorskip("matplotlib")
    config = bench_config(tmp_path)
    write_cells(config)
    summary = aggregate(load_cells(config), config)
    text = write_report(summary, config, plots=True).read_text()
    out = Path(config.output_dir)
    for name in (
        "paired",
        "paired_equal_lr",
        "contrasts",
        "heldout_pass1",
        "reward",
        "entropy",
        "grad_norm",
        "shrinkage",
    ):
        assert (out / f"{name}.png").stat().st_size > 0
        assert f"![{name}]({name}.png)" in text


def _titles(monkeypatch, summary, config) -> list[str]:
    """The title of every figure write_plots draws (the plotting functions recorded, not run)."""
    from ebpo.lab.bench import plots

    titles: list[str] = []

    def record(path, *args, title="", **kwargs):
        titles.append(title)
        return path

    monkeypatch.setattr(plots, "plot_panels", record)
    monkeypatch.setattr(plots, "plot_intervals", record)
    monkeypatch.setattr(plots, "plot_interval_lines", record)
    plots.write_plots(summary, config, Path(config.output_dir))
    return titles


def test_every_figure_of_a_quick_bench_says_it_is_a_smoke_test(tmp_path, monkeypatch):
    """``ebpo bench --quick``'s PNGs are looked at on their own: each title carries the smoke-test
    label of results.md, and "differences 0 by construction" when no cell learned."""
    import dataclasses

    config = dataclasses.replace(bench_config(tmp_path), smoke_test=True)
    write_cells(config)
    summary = aggregate(load_cells(config), config)
    titles = _titles(monkeypatch, summary, config)
    assert len(titles) == 8  # paired, paired_equal_lr, contrasts, and the five curves
    assert all(t.startswith("SMOKE TEST (--quick), not evidence — ") for t in titles), titles
    learning = summary["learning"]
    learning["unchanged"] = [f"cell {i}" for i in range(learning["cells"])]  # nothing learned
    for title in _titles(monkeypatch, summary, config)[-8:]:
        assert title.startswith(
            "SMOKE TEST (--quick), not evidence; differences 0 by construction: no cell learned — "
        )


def test_a_full_bench_figure_has_no_label(tmp_path, monkeypatch):
    config = bench_config(tmp_path)
    write_cells(config)
    summary = aggregate(load_cells(config), config)
    titles = _titles(monkeypatch, summary, config)
    assert titles and not any("SMOKE" in t or "by construction" in t for t in titles)
