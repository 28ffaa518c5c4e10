"""One cell of ``ebpo bench`` (:mod:`ebpo.lab.bench.run`): :func:`run_cell` runs it unless it is
already finished and writes its ``cell.json``; :func:`load_cells` reads the finished ones back;
:func:`train_job_runner` is the real cell, an ``ebpo train`` job reduced to its evaluations and
training curves.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ebpo.integrations.trl.signal import logger as signal_logger
from ebpo.lab.bench.config import BenchConfig, CellSpec
from ebpo.lab.bench.methods import method
from ebpo.lab.runs.directory import MANIFEST, read_metrics
from ebpo.lab.train.job import TrainJobConfig, run_train_job
from ebpo.utils.files import read_json, write_json
from ebpo.utils.runtime import quiet_logger

__all__ = [
    "CELL_FILE",
    "CURVE_KEYS",
    "CellRunner",
    "cell_job_config",
    "load_cells",
    "run_cell",
    "train_job_runner",
]

CELL_FILE = "cell.json"


#: ``runner(spec, config, directory) -> result`` holding ``validation`` / ``heldout`` /
#: ``heldout_before`` (each ``{"overall", "topics", "tiers", "cells"}``), ``eval_curve``
#: (``{"step": [...], "pass1": [...]}``, held-out Pass@1 over steps, step 0 = the warm start) and
#: ``curves`` (``{"step": [...], <metric>: [...]}``, None where a step lacks the metric); optionally
#: ``no_signal``, the train job's notice of steps without any learning signal (or None).
CellRunner = Callable[[CellSpec, BenchConfig, Path], dict[str, Any]]


def run_cell(
    spec: CellSpec, config: BenchConfig, runner: CellRunner
) -> tuple[dict[str, Any], bool]:
    """Run one cell unless it is already finished with the same settings: ``(record, ran)``.
    ``cell.json`` is written (atomically) only once the runner returned, so an interrupted cell
    has none and runs again next time."""
    directory = Path(config.output_dir) / spec.relative_dir()
    path = directory / CELL_FILE
    fingerprint = config.fingerprint()
    if path.is_file():
        record = read_json(path)
        if record.get("fingerprint") == fingerprint and record.get("spec") == dataclasses.asdict(
            spec
        ):
            return record, False
        path.unlink()  # stale: produced with other settings
    directory.mkdir(parents=True, exist_ok=True)
    started = time.time()
    result = runner(spec, config, directory)
    record = {
        "spec": dataclasses.asdict(spec),
        "fingerprint": fingerprint,
        "status": "completed",
        "wall_time_s": time.time() - started,
        **result,
    }
    write_json(path, record)
    return record, True


def load_cells(config: BenchConfig) -> list[dict[str, Any]]:
    """The finished cells of ``config``'s matrix that match its settings."""
    records = []
    fingerprint = config.fingerprint()
    for spec in config.cells():
        path = Path(config.output_dir) / spec.relative_dir() / CELL_FILE
        if path.is_file():
            record = read_json(path)
            if record.get("fingerprint") == fingerprint:
                records.append(record)
    return records


def cell_job_config(spec: CellSpec, config: BenchConfig, directory: Path) -> Any:
    """The ``TrainJobConfig`` of one cell, run in ``directory/run`` (resumed if a run is there)."""
    options: dict[str, Any] = {
        **method(spec.method).train_options(),
        "group_size": spec.group_size,
        "steps": config.steps,
        "prompts_per_step": config.prompts_per_step,
        "seed": spec.seed,
        "learning_rate": spec.learning_rate,
        "eval_samples": config.eval_samples,
        "eval_every": config.eval_every,
        "eval_problems": config.eval_problems,
        "eval_validation": True,
        "save_every": 50,
        "progress": config.verbose,
        **config.train_options,
    }
    run_dir = directory / "run"
    return TrainJobConfig(output_dir=str(run_dir), resume=(run_dir / MANIFEST).is_file(), **options)


def train_job_runner(spec: CellSpec, config: BenchConfig, directory: Path) -> dict[str, Any]:
    """The real cell: an ``ebpo train`` job with validation Pass@1 at the end.

    The job writes to ``directory/run`` and is resumed from its last checkpoint when an earlier
    attempt was interrupted. Raises KeyboardInterrupt when the job stops on a signal (its
    checkpoint is saved), so the bench stops too.
    """
    job = cell_job_config(spec, config, directory)
    with _quiet(not config.verbose):
        try:
            result = run_train_job(job)
        except ValueError:
            if not job.resume:
                raise
            # the old attempt cannot be resumed (made with other settings): start the cell over
            job = dataclasses.replace(job, resume=False, overwrite=True)
            result = run_train_job(job)
    if result["status"] != "completed":
        raise KeyboardInterrupt(
            f"train job of {spec.label()} stopped at step {result['global_step']}"
        )
    records = read_metrics(Path(result["metrics_path"]))
    # Checkpoints and the final model (~10 MB a cell) are dead weight once the cell is done:
    # gigabytes over the full matrix. Metrics, evaluations and plots stay.
    for name in ("checkpoints", "final_model"):
        shutil.rmtree(Path(result["run_dir"]) / name, ignore_errors=True)
    return {
        "validation": _summary(result["validation"]),
        "heldout": _summary(result["after"]),
        "heldout_before": _summary(result["before"]),
        "global_step": result["global_step"],
        "eval_curve": _eval_curve(
            records, result["before"], result["after"], result["global_step"]
        ),
        "curves": _train_curves(records),
        "no_signal": result.get("no_signal"),
        "run_dir": str(Path(result["run_dir"]).relative_to(Path(config.output_dir)))
        if Path(result["run_dir"]).is_relative_to(Path(config.output_dir))
        else result["run_dir"],
    }


@contextlib.contextmanager
def _quiet(enabled: bool):
    """Silence a cell's console output (its records are in the run's metrics.jsonl) and the
    trainer's no-signal warnings (the bench reports such cells itself: summary.learning_check)."""
    if not enabled:
        yield
        return
    with contextlib.redirect_stdout(io.StringIO()), quiet_logger(signal_logger.name):
        yield


def _summary(evaluation: Mapping[str, Any]) -> dict[str, Any]:
    return {
        key: evaluation[key] for key in ("overall", "topics", "tiers", "cells") if key in evaluation
    }


def _eval_curve(
    records: Sequence[Mapping[str, Any]],
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    final_step: int,
) -> dict[str, list]:
    """Held-out Pass@1 over steps: the warm start (step 0), the periodic evaluations, the end."""
    points = {0: float(before["overall"])}
    for record in records:
        if isinstance(record.get("heldout/pass@1"), (int, float)):
            points[int(record["step"])] = float(record["heldout/pass@1"])
    points[int(final_step)] = float(after["overall"])
    steps = sorted(points)
    return {"step": steps, "pass1": [points[s] for s in steps]}


#: curve name -> metric key in the train job's metrics.jsonl (TRL's names; ebpo/ for the estimator)
CURVE_KEYS = {
    "reward": "reward",
    "entropy": "entropy",
    "grad_norm": "grad_norm",
    "shrinkage": "ebpo/shrinkage_mean",
}


def _train_curves(records: Sequence[Mapping[str, Any]]) -> dict[str, list]:
    by_step: dict[int, dict[str, Any]] = {}
    for record in records:
        if "step" in record and any(key in record for key in CURVE_KEYS.values()):
            by_step.setdefault(int(record["step"]), {}).update(record)
    steps = sorted(by_step)
    curves: dict[str, list] = {"step": steps}
    for name, key in CURVE_KEYS.items():
        values = [by_step[s].get(key) for s in steps]
        curves[name] = [
            float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None for v in values
        ]
    return curves
