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
        "heldout_pass1",
        "reward",
        "entropy",
        "grad_norm",
        "shrinkage",
    ):
        assert (out / f"{name}.png").stat().st_size > 0
        assert f"![{name}]({name}.png)" in text
