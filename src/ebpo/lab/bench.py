"""``ebpo bench``: a paired comparison of advantage estimators with real token-level RL on the
built-in task.

Every *cell* of the matrix is one ``ebpo train`` job (:mod:`ebpo.lab.job`) for one (method, G,
learning rate, seed). A *method* is a TRL preset plus a data order and estimator options
(:data:`METHODS`), so "EBPO with topic order" and "EBPO with per-topic priors" are rows like GRPO.

Paired design. For a given seed every cell starts from the **same warm start** (cached, keyed by
the seed) and trains on the **same stream of prompts** (:func:`ebpo.lab.task.problem_stream`; a
curriculum reorders the same prompts), and every evaluation samples with the same seed. Method
differences are therefore read seed by seed against GRPO (:data:`REFERENCE_METHOD`), and reported
as a mean paired difference with a Student-t interval (:mod:`ebpo.lab.stats`).

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
    heldout_pass1.png, reward.png, ...             see ebpo.lab.bench_report

Cells run seed by seed; ``--shard K/N`` runs every N-th cell so N processes share one folder
(warm starts are computed once: a lock file makes the other shards wait for the cache).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ebpo.utils.files import read_json, write_json

__all__ = [
    "CELL_FILE",
    "DEFAULT_METHODS",
    "METHODS",
    "REFERENCE_METHOD",
    "BenchConfig",
    "CellSpec",
    "Method",
    "load_cells",
    "run_bench",
    "run_cell",
    "shard_cells",
    "train_job_runner",
]

CELL_FILE = "cell.json"


# ====================================================================== methods
@dataclass(frozen=True)
class Method:
    """One row of the comparison: a train-job preset plus data order and estimator options."""

    name: str
    preset: str
    order: str = "shuffle"
    estimator_options: Mapping[str, Any] | None = None
    cluster_column: str | None = None
    description: str = ""

    def train_options(self) -> dict[str, Any]:
        """The :class:`ebpo.lab.job.TrainJobConfig` fields this method sets."""
        return {
            "estimator": self.preset,
            "order": self.order,
            "estimator_options": dict(self.estimator_options) if self.estimator_options else None,
            "cluster_column": self.cluster_column,
        }


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("grpo", "grpo", description="GRPO: group mean, ÷ group std"),
        Method("ebpo", "ebpo", description="EBPO, paper defaults (history prior, pooled σ², raw τ²), shuffled stream"),
        Method(
            "ebpo_within",
            "ebpo",
            estimator_options={"within_variance": "within", "tau2": "corrected"},
            description="EBPO, within-group σ² and corrected τ² (the revision's variant)",
        ),
        Method("ebpo_topic", "ebpo", order="topic", description="EBPO, stream sorted by topic"),
        Method("ebpo_difficulty", "ebpo", order="difficulty", description="EBPO, stream easy → hard (digits)"),
        Method(
            "ebpo_cluster",
            "ebpo",
            estimator_options={"per_cluster": True},
            cluster_column="topic",
            description="EBPO, one prior per topic, shuffled stream",
        ),
        Method("rloo", "rloo", description="RLOO: leave-one-out baseline"),
        Method("jspo", "jspo", description="JSPO: James-Stein baseline (batch statistics)"),
        # Not in the default matrix; selectable with --estimators.
        Method("dr_grpo", "dr_grpo", description="Dr. GRPO: group mean, no std, token-sum loss"),
        Method("dapo", "dapo", description="DAPO: clip-higher, zero-variance group filtering, overlong shaping, no KL"),
        Method("entropy_mech", "entropy_mech", description="EntropyMech: GRPO + Clip-Cov, no KL"),
        Method("ebpo_ema", "ebpo", estimator_options={"prior": "ema", "half_life": 20.0}, description="EBPO, EMA prior (half-life 20 steps)"),
        Method("ebpo_batch", "ebpo_batch", description="EBPO, batch prior with μ = mean of group means (authors' verl code)"),
        Method("ebpo_bb", "ebpo_bb", description="EBPO-BB: Beta-Binomial prior"),
    )
}
DEFAULT_METHODS = ("grpo", "ebpo", "ebpo_within", "ebpo_topic", "ebpo_difficulty", "ebpo_cluster", "rloo", "jspo")
#: every paired difference is against this method (at the same G and seed)
REFERENCE_METHOD = "grpo"


# ====================================================================== configuration
@dataclass
class BenchConfig:
    """The matrix (methods × G × learning rates × seeds) and the per-cell train-job settings."""

    methods: tuple[str, ...] = DEFAULT_METHODS
    group_sizes: tuple[int, ...] = (2, 4, 8)
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    #: the sweep around ``ebpo train``'s 3e-4 (1e-3 collapsed GRPO and EBPO alike in a probe); the
    #: best rate per (method, G) is chosen on the validation split
    learning_rates: tuple[float, ...] = (1.5e-4, 3e-4, 6e-4)
    #: RL steps per cell (prompts per step as ``ebpo train``). 100, half of ``ebpo train``'s 200, so
    #: that the default matrix fits in about 2 h on 2 cores (200 steps took 3 h 26 min); the G = 2
    #: differences show at steps 25 and 50, and a shuffled-stream run's first 100 steps are the same
    #: at either length (docs/results.md)
    steps: int = 100
    prompts_per_step: int = 32
    #: samples per problem for held-out and validation Pass@1
    eval_samples: int = 16
    #: held-out Pass@1 every this many steps (learning curves, checkpoints, steps-to-target)
    eval_every: int = 25
    #: held-out and validation problems per (topic, tier) cell
    eval_problems: int = 32
    #: steps at which paired differences are read, besides the final step (multiples of eval_every)
    checkpoints: tuple[int, ...] = (25, 50)
    #: steps-to-target: steps until held-out Pass@1 is this much above the seed's warm start
    target_gain: float = 0.10
    output_dir: str = "bench-results"
    #: further TrainJobConfig fields for every cell (e.g. ``{"warm_start_steps": 200}``)
    train_options: dict[str, Any] = field(default_factory=dict)
    #: torch intra-op threads per process: one, because the model is tiny and on a busy machine
    #: torch's thread pool made a step ~17x slower (measured); run shards side by side instead
    threads: int = 1
    #: show the train jobs' own progress bars (the bench always shows one bar over cells)
    verbose: bool = False

    @classmethod
    def quick(cls, **overrides: Any) -> BenchConfig:
        """The CI mode: GRPO and EBPO, G = 2, two seeds, one rate, a few steps of a tiny warm start."""
        values: dict[str, Any] = {
            "methods": ("grpo", "ebpo"),
            "group_sizes": (2,),
            "seeds": (0, 1),
            "learning_rates": (3e-4,),
            "steps": 6,
            "prompts_per_step": 8,
            "eval_samples": 8,
            "eval_every": 3,
            "eval_problems": 4,
            "checkpoints": (3,),
            "output_dir": "bench-results-quick",
            "train_options": {"warm_start_steps": 40},
        }
        values.update(overrides)
        return cls(**values)

    @property
    def reference_lrs(self) -> tuple[float, ...]:
        return tuple(sorted(float(lr) for lr in self.learning_rates))

    def validate(self) -> None:
        """Raise ValueError naming the first bad option."""
        unknown = [m for m in self.methods if m not in METHODS]
        if not self.methods or unknown:
            raise ValueError(f"methods must be a non-empty subset of {list(METHODS)}, got {list(self.methods)}")
        if len(set(self.methods)) != len(self.methods):
            raise ValueError(f"methods has duplicates: {list(self.methods)}")
        _check_ints("group_sizes", self.group_sizes, 2)
        _check_ints("seeds", self.seeds, 0)
        if not self.learning_rates or any(not _positive(lr) for lr in self.learning_rates):
            raise ValueError(f"learning_rates must be a non-empty list of positive numbers, got {list(self.learning_rates)}")
        if len(set(self.learning_rates)) != len(self.learning_rates):
            raise ValueError(f"learning_rates has duplicates: {list(self.learning_rates)}")
        for name in ("steps", "prompts_per_step", "eval_every", "threads"):
            _check_ints(name, (getattr(self, name),), 1)
        _check_ints("eval_samples", (self.eval_samples,), 8)
        _check_ints("eval_problems", (self.eval_problems,), 1)
        bad = [c for c in self.checkpoints if isinstance(c, bool) or not isinstance(c, int) or c < 1 or c >= self.steps or c % self.eval_every]
        if bad:
            raise ValueError(f"checkpoints must be multiples of eval_every ({self.eval_every}) below steps ({self.steps}), got {list(self.checkpoints)}")
        if not (_positive(self.target_gain) and self.target_gain <= 1):
            raise ValueError(f"target_gain must be a number in (0, 1], got {self.target_gain!r}")
        self._validate_train_options()

    def _validate_train_options(self) -> None:
        from ebpo.lab import task
        from ebpo.lab.job import TrainJobConfig

        if not isinstance(self.train_options, dict):
            raise ValueError(f"train_options must be a dict of TrainJobConfig fields, got {type(self.train_options).__name__}")
        fields = {f.name for f in dataclasses.fields(TrainJobConfig)}
        # the bench owns these: they define the cell, or where and whether its run resumes
        owned = {"output_dir", "resume", "overwrite", "group_size", "seed", "learning_rate", "estimator", "order",
                 "estimator_options", "cluster_column", "eval_validation", "steps", "prompts_per_step",
                 "eval_samples", "eval_every", "eval_problems", "progress"}  # fmt: skip
        bad = sorted(set(self.train_options) - fields) + sorted(set(self.train_options) & owned)
        if bad:
            raise ValueError(f"train_options may not set {bad}: expected TrainJobConfig fields other than {sorted(owned)}")
        dataset = self.train_options.get("dataset", "arithmetic")
        if dataset not in task.BUILTIN_DATASETS:
            # learning rates are chosen on a validation split, which only the built-in task has
            raise ValueError(f"train_options['dataset'] must be a built-in dataset {list(task.BUILTIN_DATASETS)}, got {dataset!r}")
        probe = TrainJobConfig(**{**self.train_options, "steps": self.steps})
        probe.validate()  # e.g. bad tiers or warm-start settings, before any cell runs

    def fingerprint(self) -> dict[str, Any]:
        """Settings every cell depends on besides its own (method, G, lr, seed): a finished cell
        with another fingerprint is stale and re-runs. It includes the train job's defaults, so
        that cells made before a change of ``ebpo train``'s defaults are not mixed with newer ones."""
        from ebpo.lab.job import TrainJobConfig

        return json.loads(
            json.dumps(
                {
                    "train_defaults": TrainJobConfig().identity(),
                    "steps": self.steps,
                    "prompts_per_step": self.prompts_per_step,
                    "eval_samples": self.eval_samples,
                    "eval_every": self.eval_every,
                    "eval_problems": self.eval_problems,
                    "train_options": self.train_options,
                },
                sort_keys=True,
                default=str,
            )
        )

    def cells(self) -> list[CellSpec]:
        """Every cell, seed by seed (a partial run already holds complete paired seeds)."""
        return [
            CellSpec(method, g, float(lr), seed)
            for seed in self.seeds
            for g in self.group_sizes
            for method in self.methods
            for lr in self.learning_rates
        ]


def _positive(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def _check_ints(name: str, values: Iterable[Any], low: int) -> None:
    values = list(values)
    if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < low for v in values):
        raise ValueError(f"{name} must be non-empty integers >= {low}, got {values}")
    if len(set(values)) != len(values):
        raise ValueError(f"{name} has duplicates: {values}")


@dataclass(frozen=True)
class CellSpec:
    """One train job of the matrix."""

    method: str
    group_size: int
    learning_rate: float
    seed: int

    def relative_dir(self) -> Path:
        return Path("cells") / self.method / f"G{self.group_size}" / f"lr{self.learning_rate:g}" / f"seed{self.seed}"

    def label(self) -> str:
        return f"{self.method} G={self.group_size} lr={self.learning_rate:g} seed={self.seed}"


# ====================================================================== running cells
#: ``runner(spec, config, directory) -> result`` holding ``validation`` / ``heldout`` /
#: ``heldout_before`` (each ``{"overall", "topics", "tiers", "cells"}``), ``eval_curve``
#: (``{"step": [...], "pass1": [...]}``, held-out Pass@1 over steps, step 0 = the warm start) and
#: ``curves`` (``{"step": [...], <metric>: [...]}``, None where a step lacks the metric).
CellRunner = Callable[["CellSpec", BenchConfig, Path], dict[str, Any]]


def run_cell(spec: CellSpec, config: BenchConfig, runner: CellRunner) -> tuple[dict[str, Any], bool]:
    """Run one cell unless it is already finished with the same settings: ``(record, ran)``.
    ``cell.json`` is written (atomically) only once the runner returned, so an interrupted cell
    has none and runs again next time."""
    directory = Path(config.output_dir) / spec.relative_dir()
    path = directory / CELL_FILE
    fingerprint = config.fingerprint()
    if path.is_file():
        record = read_json(path)
        if record.get("fingerprint") == fingerprint and record.get("spec") == dataclasses.asdict(spec):
            return record, False
        path.unlink()  # stale: produced with other settings
    directory.mkdir(parents=True, exist_ok=True)
    started = time.time()
    result = runner(spec, config, directory)
    record = {"spec": dataclasses.asdict(spec), "fingerprint": fingerprint, "status": "completed", "wall_time_s": time.time() - started, **result}
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
    from ebpo.lab.job import TrainJobConfig
    from ebpo.lab.rundir import MANIFEST

    options: dict[str, Any] = {
        **METHODS[spec.method].train_options(),
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
    from ebpo.lab.job import run_train_job
    from ebpo.lab.rundir import read_metrics

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
        raise KeyboardInterrupt(f"train job of {spec.label()} stopped at step {result['global_step']}")
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
        "eval_curve": _eval_curve(records, result["before"], result["after"], result["global_step"]),
        "curves": _train_curves(records),
        "run_dir": str(Path(result["run_dir"]).relative_to(Path(config.output_dir))) if Path(result["run_dir"]).is_relative_to(Path(config.output_dir)) else result["run_dir"],
    }


def _warm_start_note(spec: CellSpec, config: BenchConfig, runner: CellRunner) -> str:
    """Tell the user why the first cell of a seed takes minutes: it trains the seed's warm start
    (or waits for another shard to), which every later cell of the seed loads from the cache."""
    directory = Path(config.output_dir) / spec.relative_dir()
    if runner is not train_job_runner or (directory / CELL_FILE).is_file():
        return ""
    from ebpo.lab.job import warm_start_pending

    job = cell_job_config(spec, config, directory)
    return f" · first the warm start of seed {spec.seed} ({job.warm_steps} supervised steps, once per seed)" if warm_start_pending(job) else ""


@contextlib.contextmanager
def _quiet(enabled: bool):
    """Silence a cell's console output (its records are in the run's metrics.jsonl)."""
    if not enabled:
        yield
        return
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def _summary(evaluation: Mapping[str, Any]) -> dict[str, Any]:
    return {key: evaluation[key] for key in ("overall", "topics", "tiers", "cells") if key in evaluation}


def _eval_curve(records: Sequence[Mapping[str, Any]], before: Mapping[str, Any], after: Mapping[str, Any], final_step: int) -> dict[str, list]:
    """Held-out Pass@1 over steps: the warm start (step 0), the periodic evaluations, the end."""
    points = {0: float(before["overall"])}
    for record in records:
        if isinstance(record.get("heldout/pass@1"), (int, float)):
            points[int(record["step"])] = float(record["heldout/pass@1"])
    points[int(final_step)] = float(after["overall"])
    steps = sorted(points)
    return {"step": steps, "pass1": [points[s] for s in steps]}


#: curve name -> metric key in the train job's metrics.jsonl (TRL's names; ebpo/ for the estimator)
CURVE_KEYS = {"reward": "reward", "entropy": "entropy", "grad_norm": "grad_norm", "shrinkage": "ebpo/shrinkage_mean"}


def _train_curves(records: Sequence[Mapping[str, Any]]) -> dict[str, list]:
    by_step: dict[int, dict[str, Any]] = {}
    for record in records:
        if "step" in record and any(key in record for key in CURVE_KEYS.values()):
            by_step.setdefault(int(record["step"]), {}).update(record)
    steps = sorted(by_step)
    curves: dict[str, list] = {"step": steps}
    for name, key in CURVE_KEYS.items():
        values = [by_step[s].get(key) for s in steps]
        curves[name] = [float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None for v in values]
    return curves


def shard_cells(specs: Sequence[CellSpec], shard: tuple[int, int] | None) -> list[CellSpec]:
    """Cells of shard ``(k, n)`` (0-based ``k`` of ``n``): every n-th cell from the k-th, so that n
    processes with the same output dir run disjoint cells (each shard still goes seed by seed)."""
    if shard is None:
        return list(specs)
    index, count = shard
    if isinstance(count, bool) or not isinstance(count, int) or count < 1 or isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
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
    finished cell and write the report (:mod:`ebpo.lab.bench_report`).

    Returns the summary with ``bench`` = ``{"ran", "skipped", "wall_time_s"}``.
    KeyboardInterrupt propagates after the current cell (finished cells stay).
    """
    from tqdm.auto import tqdm

    from ebpo.lab.bench_report import aggregate, write_report

    config.validate()
    if runner is None:
        import torch

        # process-wide, so only for the real runner (an injected runner keeps the caller's setting)
        torch.set_num_threads(config.threads)
        runner = train_job_runner
    Path(config.output_dir).mkdir(parents=True, exist_ok=True)
    started = time.time()
    ran = skipped = 0
    specs = shard_cells(config.cells(), shard)
    with tqdm(specs, desc="bench cells", unit="cell", disable=not progress, dynamic_ncols=True) as bar:
        for spec in bar:
            bar.set_postfix_str(spec.label() + _warm_start_note(spec, config, runner), refresh=True)
            _, did_run = run_cell(spec, config, runner)
            ran, skipped = ran + did_run, skipped + (not did_run)
    summary = aggregate(load_cells(config), config)
    summary["bench"] = {"ran": ran, "skipped": skipped, "wall_time_s": time.time() - started}
    write_report(summary, config, plots=plots)
    return summary
