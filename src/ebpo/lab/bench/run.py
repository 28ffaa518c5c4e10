"""``ebpo bench``: a paired comparison of advantage estimators with real token-level RL on the
built-in task.

Every *cell* of the matrix is one ``ebpo train`` job (:mod:`ebpo.lab.train.job`) for one (method, G,
learning rate, seed). A *method* is an estimator name trained with a TRL preset and a
data order (:data:`ebpo.lab.bench.methods.METHODS`), so "EBPO with topic order" and "EBPO with
per-topic priors" are rows like GRPO.

Paired design. For a given seed every cell starts from the **same warm start** (cached, keyed by
the seed) and trains on the **same stream of prompts** (:func:`ebpo.lab.cpu_task.task.problem_stream`; a
curriculum reorders the same prompts), and every evaluation samples with the same seed. Method
differences are therefore read seed by seed against GRPO
(:data:`~ebpo.lab.bench.methods.REFERENCE_METHOD`), and reported
as a mean paired difference with a Student-t interval (:mod:`ebpo.analysis.paired`, shared with ``ebpo compare``).

Fair learning rates. Estimators scale advantages differently (group std, batch std, none), so each
method runs at every rate of a small sweep; the rate per (method, G) is chosen on the
**validation** split (disjoint from the held-out one), and the held-out numbers are read at that
rate. The equal-rate comparison reads every method at each rate of the sweep.

Layout of the results folder::

    cells/<method>/G<g>/lr<lr>/seed<s>/cell.json   one finished cell (skipped on a rerun)
    cells/<method>/G<g>/lr<lr>/seed<s>/run/        the train job's run directory
    paired.csv                                     method vs GRPO, paired, with 95% intervals
    paired.png, paired_equal_lr.png                the same as plots (chosen rates / equal rates)
    summary.json, results.md, table_best_lr.csv, table_equal_lr.csv, lr_sweep.csv,
    heldout_pass1.png, reward.png, ...             see ebpo.lab.bench.report

Cells run seed by seed; ``--shard K/N`` runs every N-th cell so N processes share one folder
(warm starts are computed once: a lock file makes the other shards wait for the cache).

This module runs the matrix (:func:`run_bench`); the rows are :mod:`ebpo.lab.bench.methods`, the
matrix :mod:`ebpo.lab.bench.config`, one cell :mod:`ebpo.lab.bench.cells`, the conclusions
:mod:`ebpo.lab.bench.summary` and the files :mod:`ebpo.lab.bench.report`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from ebpo.lab.bench.cells import (
    CELL_FILE,
    CellRunner,
    cell_job_config,
    load_cells,
    run_cell,
    train_job_runner,
)
from ebpo.lab.bench.config import BenchConfig, CellSpec
from ebpo.lab.bench.report import write_report
from ebpo.lab.bench.summary import aggregate
from ebpo.lab.train import job
from ebpo.utils.checks import is_integer

__all__ = ["run_bench", "shard_cells"]


def _warm_start_note(spec: CellSpec, config: BenchConfig, runner: CellRunner) -> str:
    """Tell the user why the first cell of a seed takes minutes: it trains the seed's warm start
    (or waits for another shard to), which every later cell of the seed loads from the cache."""
    directory = Path(config.output_dir) / spec.relative_dir()
    if runner is not train_job_runner or (directory / CELL_FILE).is_file():
        return ""
    cell_job = cell_job_config(spec, config, directory)
    if not job.warm_start_pending(cell_job):
        return ""
    return f" · first the warm start of seed {spec.seed} ({cell_job.warm_steps} supervised steps, once per seed)"


def shard_cells(specs: Sequence[CellSpec], shard: tuple[int, int] | None) -> list[CellSpec]:
    """Cells of shard ``(k, n)`` (0-based ``k`` of ``n``): every n-th cell from the k-th, so that n
    processes with the same output dir run disjoint cells (each shard still goes seed by seed)."""
    if shard is None:
        return list(specs)
    index, count = shard
    if not (is_integer(count) and is_integer(index) and 0 <= index < count):
        raise ValueError(f"shard must be (k, n) with 0 <= k < n, got {shard!r}")
    return [spec for i, spec in enumerate(specs) if i % count == index]


def run_bench(
    config: BenchConfig,
    runner: CellRunner | None = None,
    *,
    progress: bool = True,
    plots: bool = True,
    shard: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """Run every unfinished cell of the matrix (of ``shard``, if given), then aggregate every
    finished cell and write the report (:mod:`ebpo.lab.bench.report`).

    Returns the summary with ``bench`` = ``{"ran", "skipped", "wall_time_s"}``.
    KeyboardInterrupt propagates after the current cell (finished cells stay).
    """
    config.validate()
    if runner is None:
        # process-wide, so only for the real runner (an injected runner keeps the caller's setting)
        torch.set_num_threads(config.threads)
        runner = train_job_runner
    Path(config.output_dir).mkdir(parents=True, exist_ok=True)
    started = time.time()
    ran = skipped = 0
    specs = shard_cells(config.cells(), shard)
    with tqdm(
        specs, desc="bench cells", unit="cell", disable=not progress, dynamic_ncols=True
    ) as bar:
        for spec in bar:
            bar.set_postfix_str(spec.label() + _warm_start_note(spec, config, runner), refresh=True)
            _, did_run = run_cell(spec, config, runner)
            ran, skipped = ran + did_run, skipped + (not did_run)
    summary = aggregate(load_cells(config), config)
    summary["bench"] = {"ran": ran, "skipped": skipped, "wall_time_s": time.time() - started}
    write_report(summary, config, plots=plots)
    return summary
