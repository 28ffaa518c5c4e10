"""``ebpo bench``: a small-scale reproduction of the paper's comparison with real token-level RL.

Every *cell* of the matrix is one ``ebpo train`` job (:mod:`ebpo.training`, the built-in CPU task by
default) for one (method, G, learning rate, seed). A method is a preset of
``ebpo.integrations.trl.PRESETS`` plus a data order and estimator options (:data:`METHODS`), so
"EBPO + topic order" and "EBPO per-cluster" are rows of the table like GRPO or DAPO.

Fair comparison. Estimators scale advantages differently (group std, batch std, none), so one
learning rate favours some of them. Each method therefore runs at every learning rate of a small
sweep; the rate is chosen per (method, G) on the *validation* split (disjoint from the held-out
problems, :func:`ebpo.tasks.problem_split`), and the held-out numbers are read at that rate. The
equal-learning-rate table reads every method at one rate (``BenchConfig.equal_lr``). The held-out
split is never used for any choice.

Layout of the results folder::

    cells/<method>/G<g>/lr<lr>/seed<s>/cell.json   one finished cell (resumability: skipped on rerun)
    cells/<method>/G<g>/lr<lr>/seed<s>/run/        the train job's run directory
    summary.json                                   every aggregate below, machine-readable
    results.md                                     tables (Markdown) and plot links
    table_best_lr.csv, table_equal_lr.csv          method x (topic, tier, avg), mean ± 95% CI
    lr_sweep.csv, steps_to_target.csv
    heldout_pass1_best_lr.png, heldout_pass1_equal_lr.png, reward.png, grad_norm.png,
    entropy.png, shrinkage.png                     curves over steps, 95% CI bands over seeds

Resumability: a cell is done when its ``cell.json`` exists and was produced with the same
settings (:meth:`BenchConfig.fingerprint`); anything else is (re-)run, continuing the train job
from its last checkpoint when it has one. Cells run seed by seed, so a partial run already gives
a complete one-seed table. ``aggregate`` works on whatever cells are finished.

Statistics: mean over seeds ± the half-width of a two-sided 95% Student-t interval,
``t_{0.975, n-1} · s / sqrt(n)`` with ``s`` the sample (n−1) standard deviation; one seed gives no
interval.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import math
import os
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CELL_FILE",
    "DEFAULT_METHODS",
    "METHODS",
    "BenchConfig",
    "CellSpec",
    "Method",
    "aggregate",
    "cell_dir",
    "load_cells",
    "mean_ci",
    "run_bench",
    "run_cell",
    "select_learning_rates",
    "shard_cells",
    "steps_to_target",
    "t_quantile_975",
    "train_job_runner",
    "write_report",
]

CELL_FILE = "cell.json"


# ====================================================================== methods
@dataclass(frozen=True)
class Method:
    """One row of the results table: a train-job preset plus data order and estimator options."""

    name: str
    preset: str
    order: str = "shuffle"
    estimator_options: Mapping[str, Any] | None = None
    cluster_column: str | None = None
    description: str = ""

    def train_options(self) -> dict[str, Any]:
        """The :class:`ebpo.training.TrainJobConfig` fields this method sets."""
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
        Method("dr_grpo", "dr_grpo", description="Dr. GRPO: group mean, no std, token-sum loss"),
        Method("dapo", "dapo", description="DAPO: clip-higher, zero-variance group filtering, overlong shaping, no KL"),
        Method("entropy_mech", "entropy_mech", description="EntropyMech: GRPO + Clip-Cov, no KL"),
        Method("rloo", "rloo", description="RLOO: leave-one-out baseline"),
        Method("jspo", "jspo", description="JSPO: James-Stein baseline (batch statistics)"),
        Method("ebpo", "ebpo", description="EBPO, paper defaults (history prior), shuffled stream"),
        Method("ebpo_topic", "ebpo", order="topic", description="EBPO, stream sorted by topic"),
        Method("ebpo_difficulty", "ebpo", order="difficulty", description="EBPO, stream easy → hard"),
        Method(
            "ebpo_cluster",
            "ebpo",
            estimator_options={"per_cluster": True},
            cluster_column="topic",
            description="EBPO, one prior per topic, shuffled stream",
        ),
        # Not in the default matrix (issue #7 lists the ten above); selectable with --estimators.
        Method("ebpo_ema", "ebpo", estimator_options={"prior": "ema", "half_life": 20.0}, description="EBPO, EMA prior (half-life 20 steps)"),
        Method("ebpo_batch", "ebpo", estimator_options={"prior": "batch"}, description="EBPO, batch prior (authors' verl code)"),
        Method("ebpo_bb", "ebpo_bb", description="EBPO-BB: Beta-Binomial prior"),
    )
}
DEFAULT_METHODS = (
    "grpo",
    "dr_grpo",
    "dapo",
    "entropy_mech",
    "rloo",
    "jspo",
    "ebpo",
    "ebpo_topic",
    "ebpo_difficulty",
    "ebpo_cluster",
)
#: the reference of steps-to-target (its final held-out Pass@1 is the target)
REFERENCE_METHOD = "grpo"


# ====================================================================== configuration
@dataclass
class BenchConfig:
    """The matrix (methods × G × learning rates × seeds) and the per-cell train-job settings."""

    methods: tuple[str, ...] = DEFAULT_METHODS
    group_sizes: tuple[int, ...] = (2, 4, 8)
    seeds: tuple[int, ...] = (0, 1, 2)
    #: the sweep; the best rate per (method, G) is chosen on the validation split
    learning_rates: tuple[float, ...] = (1e-4, 2e-4, 5e-4)
    #: the rate of the equal-learning-rate table; None = the middle of the sweep
    equal_lr: float | None = None
    #: RL steps per cell
    steps: int = 60
    prompts_per_step: int = 16
    #: samples per problem for held-out and validation Pass@1 (issue #7: at least 16)
    eval_samples: int = 16
    #: held-out Pass@1 every this many steps (learning curves, steps-to-target); 0 = before/after
    eval_every: int = 10
    #: held-out and validation problems per (topic, tier) cell
    eval_problems: int = 8
    output_dir: str = "bench-results"
    #: further TrainJobConfig fields for every cell (e.g. ``{"warm_start_steps": 200}``)
    train_options: dict[str, Any] = field(default_factory=dict)
    #: torch intra-op threads for the real runner. 1 by default: the model is tiny, and on a busy
    #: machine torch's thread pool makes a training step ~17x slower than one thread (measured on
    #: the shared 2-core CI machine: 8.2 s vs 0.48 s). Run benches side by side for more cores.
    threads: int = 1
    #: show the train jobs' own progress bars (the bench always shows one bar over cells)
    verbose: bool = False

    @classmethod
    def quick(cls, **overrides: Any) -> BenchConfig:
        """The CI mode: one seed, GRPO and EBPO, G = 4, two learning rates, a few steps."""
        values: dict[str, Any] = {
            "methods": ("grpo", "ebpo"),
            "group_sizes": (4,),
            "seeds": (0,),
            "learning_rates": (1e-4, 5e-4),
            "steps": 6,
            "prompts_per_step": 8,
            "eval_samples": 16,
            "eval_every": 3,
            "eval_problems": 4,
            "output_dir": "bench-results-quick",
        }
        values.update(overrides)
        return cls(**values)

    @property
    def reference_lr(self) -> float:
        """The rate of the equal-learning-rate table."""
        if self.equal_lr is not None:
            return float(self.equal_lr)
        ordered = sorted(self.learning_rates)
        return float(ordered[(len(ordered) - 1) // 2])

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
        if self.equal_lr is not None and self.equal_lr not in self.learning_rates:
            raise ValueError(f"equal_lr must be one of learning_rates {list(self.learning_rates)}, got {self.equal_lr!r}")
        _check_ints("steps", (self.steps,), 1)
        _check_ints("prompts_per_step", (self.prompts_per_step,), 1)
        _check_ints("eval_samples", (self.eval_samples,), 1)
        _check_ints("eval_every", (self.eval_every,), 0)
        _check_ints("eval_problems", (self.eval_problems,), 1)
        _check_ints("threads", (self.threads,), 1)
        self._validate_train_options()

    def _validate_train_options(self) -> None:
        from ebpo import tasks, training

        if not isinstance(self.train_options, dict):
            raise ValueError(f"train_options must be a dict of TrainJobConfig fields, got {type(self.train_options).__name__}")
        fields = {f.name for f in dataclasses.fields(training.TrainJobConfig)}
        # the bench owns these: they define the cell, or where and whether its run resumes
        owned = {"output_dir", "resume", "overwrite", "group_size", "seed", "learning_rate", "estimator", "order"}
        bad = sorted(set(self.train_options) - fields) + sorted(set(self.train_options) & owned)
        if bad:
            raise ValueError(f"train_options may not set {bad}: expected TrainJobConfig fields other than {sorted(owned)}")
        dataset = self.train_options.get("dataset", "arithmetic")
        if dataset not in tasks.BUILTIN_DATASETS:
            # learning rates are chosen on a validation split, which only the built-in task has
            raise ValueError(f"train_options['dataset'] must be a built-in dataset {list(tasks.BUILTIN_DATASETS)}, got {dataset!r}")

    def fingerprint(self) -> dict[str, Any]:
        """Settings every cell depends on besides its own (method, G, lr, seed): a finished cell
        with another fingerprint is stale and re-runs. It includes the train job's defaults, so
        that cells made before a change of ``ebpo train``'s defaults are not mixed with newer ones."""
        from ebpo import training

        return json.loads(
            json.dumps(
                {
                    "train_defaults": training.TrainJobConfig().identity(),
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
        """Every cell, seed by seed (so a partial run already has a full one-seed matrix)."""
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


def cell_dir(output_dir: str | Path, spec: CellSpec) -> Path:
    return Path(output_dir) / spec.relative_dir()


# ====================================================================== running cells
#: ``runner(spec, config, directory) -> result``; ``result`` holds ``validation`` and ``heldout``
#: (each ``{"overall", "topics", "tiers"}``), ``eval_curve`` (``{"step": [...], "pass1": [...]}``,
#: held-out Pass@1 over steps, step 0 = before RL) and ``curves`` (``{"step": [...], <metric>:
#: [...]}`` for reward, entropy, grad_norm, shrinkage; None where a step lacks the metric).
CellRunner = Callable[[CellSpec, BenchConfig, Path], dict[str, Any]]


def run_cell(spec: CellSpec, config: BenchConfig, runner: CellRunner) -> tuple[dict[str, Any], bool]:
    """Run one cell unless it is already finished with the same settings.

    Returns ``(cell record, ran)``. The record is written to ``cell.json`` only once the runner
    returned, via a temporary file and a rename, so an interrupted cell has no ``cell.json`` and
    runs again next time.
    """
    directory = cell_dir(config.output_dir, spec)
    path = directory / CELL_FILE
    fingerprint = config.fingerprint()
    if path.is_file():
        record = _read_json(path)
        if record.get("fingerprint") == fingerprint and record.get("spec") == dataclasses.asdict(spec):
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
    _write_json(path, record)
    return record, True


def load_cells(config: BenchConfig) -> list[dict[str, Any]]:
    """The finished cells of ``config``'s matrix that match its settings."""
    records = []
    fingerprint = config.fingerprint()
    for spec in config.cells():
        path = cell_dir(config.output_dir, spec) / CELL_FILE
        if path.is_file():
            record = _read_json(path)
            if record.get("fingerprint") == fingerprint:
                records.append(record)
    return records


def train_job_runner(spec: CellSpec, config: BenchConfig, directory: Path) -> dict[str, Any]:
    """The real cell: an ``ebpo train`` job, then Pass@1 of its final model on the validation split.

    The train job writes to ``directory/run`` and is resumed from its last checkpoint when a
    previous attempt was interrupted. Raises KeyboardInterrupt when the job stops on a signal
    (its checkpoint is saved), so the bench stops too.
    """
    from ebpo import training

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
        "progress": config.verbose,
        **config.train_options,
    }
    run_dir = directory / "run"
    job = training.TrainJobConfig(output_dir=str(run_dir), resume=(run_dir / training.MANIFEST).is_file(), **options)
    # Even without progress bars, TRL prints every log record to stdout (its PrinterCallback); the
    # records are in the run's metrics.jsonl, and the bench's own output should stay readable.
    quiet = contextlib.nullcontext() if config.verbose else contextlib.redirect_stdout(io.StringIO())
    with quiet:
        try:
            result = training.run_train_job(job)
        except ValueError:
            if not job.resume:
                raise
            # The old attempt cannot be resumed (e.g. it stopped before its first checkpoint or
            # was made with other settings): start the cell over.
            job = dataclasses.replace(job, resume=False, overwrite=True)
            result = training.run_train_job(job)
    if result["status"] != "completed":
        raise KeyboardInterrupt(f"train job of {spec.label()} stopped at step {result['global_step']}")

    validation = _evaluate_validation(job, Path(result["run_dir"]))
    records = _read_jsonl(Path(result["metrics_path"]))
    # The train job's checkpoints (model + optimiser, kept for its own resume) are dead weight once
    # it completed: ~10 MB a cell, gigabytes over the full matrix. final_model/ stays.
    shutil.rmtree(Path(result["run_dir"]) / "checkpoints", ignore_errors=True)
    return {
        "validation": _summary(validation),
        "heldout": _summary(result["after"]),
        "heldout_before": _summary(result["before"]),
        "global_step": result["global_step"],
        "eval_curve": _eval_curve(records, result["before"], result["after"], result["global_step"]),
        "curves": _train_curves(records),
        "run_dir": _relative(Path(result["run_dir"]), Path(config.output_dir)),
        "train_wall_time_s": result.get("wall_time_s"),
    }


def _evaluate_validation(job: Any, run_dir: Path) -> dict[str, Any]:
    """Pass@1 of the trained model on the validation split of the built-in task (same protocol and
    sample count as the held-out evaluation). The train job evaluates only the held-out split, so
    the bench reloads its final model."""
    from transformers import AutoModelForCausalLM

    from ebpo import models, tasks, training

    final = run_dir / "final_model"
    model = AutoModelForCausalLM.from_pretrained(final)
    if job.model == training.BUILTIN_MODEL:
        tokenizer = models.build_char_tokenizer()
    else:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(final)
    # the same cells and sizes as the train job's held-out set (``training._load_rows``), other problems
    cells = {"topics": getattr(job, "topics", tasks.TOPICS), "tiers": getattr(job, "tiers", tasks.TIERS)}
    rows = tasks.make_problems("validation", job.eval_problems, style=tasks.BUILTIN_DATASETS[job.dataset], seed=0, **cells)
    return training.evaluate_heldout(model, tokenizer, rows, job, desc="validation eval")


def _summary(evaluation: Mapping[str, Any]) -> dict[str, Any]:
    return {key: evaluation[key] for key in ("overall", "topics", "tiers", "cells") if key in evaluation}


def _eval_curve(records: Sequence[Mapping[str, Any]], before: Mapping[str, Any], after: Mapping[str, Any], final_step: int) -> dict[str, list]:
    """Held-out Pass@1 over steps: before RL (step 0), the periodic evaluations, after RL."""
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
    processes with the same output dir run disjoint cells (and each shard still goes seed by seed)."""
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
    finished cell and write the report (with the PNG plots unless ``plots`` is False).

    Returns the summary (see :func:`aggregate`) with ``ran`` / ``skipped`` cell counts and the
    bench's wall time. KeyboardInterrupt propagates after the current cell (finished cells stay).
    """
    from tqdm.auto import tqdm

    config.validate()
    if runner is None:
        import torch

        # process-wide, so only for the real runner (an injected runner keeps the caller's setting)
        torch.set_num_threads(config.threads)
        runner = train_job_runner
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    ran = skipped = 0
    specs = shard_cells(config.cells(), shard)
    with tqdm(specs, desc="bench cells", unit="cell", disable=not progress) as bar:
        for spec in bar:
            bar.set_postfix_str(spec.label(), refresh=True)
            _, did_run = run_cell(spec, config, runner)
            ran, skipped = ran + did_run, skipped + (not did_run)
    summary = aggregate(load_cells(config), config)
    summary["bench"] = {"ran": ran, "skipped": skipped, "wall_time_s": time.time() - started}
    write_report(summary, config, plots=plots)
    return summary


# ====================================================================== statistics
# t_{0.975, df} for df = 1..30 (scipy.stats.t.ppf(0.975, df)); larger df use the Cornish-Fisher
# expansion below (error < 1e-6 for df > 30). A table keeps the bench free of a scipy dependency.
_T975 = (
    12.706204736, 4.30265273, 3.182446305, 2.776445105, 2.570581836, 2.446911851, 2.364624252,
    2.306004135, 2.262157163, 2.228138852, 2.20098516, 2.17881283, 2.160368656, 2.144786688,
    2.131449546, 2.119905299, 2.109815578, 2.10092204, 2.093024054, 2.085963447, 2.079613845,
    2.073873068, 2.06865761, 2.063898562, 2.059538553, 2.055529439, 2.051830516, 2.048407142,
    2.045229642, 2.042272456,
)  # fmt: skip
_Z975 = 1.959963984540054


def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom."""
    if isinstance(df, bool) or not isinstance(df, int) or df < 1:
        raise ValueError(f"df must be an integer >= 1, got {df!r}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


def mean_ci(values: Sequence[float]) -> dict[str, float]:
    """``{"mean", "ci", "n"}``: the mean and the half-width of its two-sided 95% Student-t
    interval, ``t_{0.975, n-1} · s / sqrt(n)`` (``s``: sample standard deviation, ddof 1).
    ``ci`` is NaN for one value; everything is NaN for none. NaN values are ignored."""
    clean = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    n = len(clean)
    if n == 0:
        return {"mean": math.nan, "ci": math.nan, "n": 0}
    mean = sum(clean) / n
    if n == 1:
        return {"mean": mean, "ci": math.nan, "n": 1}
    sd = math.sqrt(sum((v - mean) ** 2 for v in clean) / (n - 1))
    return {"mean": mean, "ci": t_quantile_975(n - 1) * sd / math.sqrt(n), "n": n}


# ====================================================================== aggregation
def _cells_by_key(cells: Iterable[Mapping[str, Any]]) -> dict[tuple[str, int, float], list[Mapping[str, Any]]]:
    grouped: dict[tuple[str, int, float], list[Mapping[str, Any]]] = {}
    for cell in cells:
        s = cell["spec"]
        grouped.setdefault((s["method"], int(s["group_size"]), float(s["learning_rate"])), []).append(cell)
    for records in grouped.values():
        records.sort(key=lambda c: c["spec"]["seed"])
    return grouped


def select_learning_rates(cells: Iterable[Mapping[str, Any]], *, split: str = "validation") -> dict[tuple[str, int], dict[str, Any]]:
    """The best learning rate per (method, G): highest mean ``split`` Pass@1 over seeds.

    ``split`` is ``"validation"`` for the bench (the held-out split must never choose anything;
    the argument exists so that tests can show the choice differs). Ties go to the smaller rate.
    Returns ``{(method, G): {"lr", "score", "scores": {lr: mean}}}``.
    """
    if split not in ("validation", "heldout"):
        raise ValueError(f"split must be 'validation' or 'heldout', got {split!r}")
    scores: dict[tuple[str, int], dict[float, float]] = {}
    for (method, g, lr), records in _cells_by_key(cells).items():
        value = mean_ci([r[split]["overall"] for r in records])["mean"]
        if math.isfinite(value):
            scores.setdefault((method, g), {})[lr] = value
    best = {}
    for key, by_lr in scores.items():
        lr = max(sorted(by_lr), key=lambda rate: by_lr[rate])  # max keeps the first (smallest) of ties
        best[key] = {"lr": lr, "score": by_lr[lr], "scores": dict(sorted(by_lr.items()))}
    return best


def _columns(cells: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """Table columns ``(label, section, key)``: topics, tiers, then the average."""
    topics: dict[str, None] = {}
    tiers: dict[str, None] = {}
    for cell in cells:
        topics.update(dict.fromkeys(cell["heldout"].get("topics", {})))
        tiers.update(dict.fromkeys(cell["heldout"].get("tiers", {})))
    columns = [(t, "topics", t) for t in sorted(topics)]
    columns += [(f"tier {t}" if t.isdigit() else t, "tiers", t) for t in sorted(tiers, key=_natural)]
    return columns + [("avg", "overall", "")]


def _natural(text: str) -> tuple[int, str]:
    return (int(text), "") if text.isdigit() else (10**9, text)


def _table(
    grouped: Mapping[tuple[str, int, float], list[Mapping[str, Any]]],
    columns: Sequence[tuple[str, str, str]],
    chosen: Mapping[tuple[str, int], float],
    methods: Sequence[str],
    group_sizes: Sequence[int],
) -> list[dict[str, Any]]:
    """Rows ``{method, G, lr, seeds, <column>: {"mean", "ci", "n"}}`` at the given rate per (method, G)."""
    rows = []
    for g in group_sizes:
        for method in methods:
            lr = chosen.get((method, g))
            records = grouped.get((method, g, lr), []) if lr is not None else []
            if not records:
                continue
            row: dict[str, Any] = {"method": method, "G": g, "lr": lr, "seeds": [r["spec"]["seed"] for r in records]}
            for label, section, key in columns:
                row[label] = mean_ci([_column_value(r["heldout"], section, key) for r in records])
            rows.append(row)
    return rows


def _column_value(evaluation: Mapping[str, Any], section: str, key: str) -> float:
    if section == "overall":
        return float(evaluation["overall"])
    value = evaluation.get(section, {}).get(key)
    return float(value) if isinstance(value, (int, float)) else math.nan


def steps_to_target(steps: Sequence[int], values: Sequence[float], target: float) -> int | None:
    """The first step at which ``values`` reaches ``target`` (``>=``), or None if it never does."""
    if len(steps) != len(values):
        raise ValueError(f"steps and values differ in length: {len(steps)} vs {len(values)}")
    if not math.isfinite(target):
        raise ValueError(f"target must be a finite number, got {target!r}")
    for step, value in zip(steps, values, strict=True):
        if value is not None and math.isfinite(value) and value >= target - 1e-12:
            return int(step)
    return None


def _mean_curve(curves: Sequence[Mapping[str, list]], name: str) -> dict[str, list]:
    """Mean and 95% CI band over seeds, at the steps every seed has."""
    if not curves:
        return {"step": [], "mean": [], "lower": [], "upper": [], "n": []}
    common = set(curves[0]["step"])
    for c in curves[1:]:
        common &= set(c["step"])
    steps = sorted(common)
    lookup = [dict(zip(c["step"], c[name], strict=True)) for c in curves]
    out: dict[str, list] = {"step": [], "mean": [], "lower": [], "upper": [], "n": []}
    for s in steps:
        stats = mean_ci([v for v in (d[s] for d in lookup) if v is not None])
        if stats["n"] == 0:
            continue
        half = stats["ci"] if math.isfinite(stats["ci"]) else 0.0
        out["step"].append(s)
        out["mean"].append(stats["mean"])
        out["lower"].append(stats["mean"] - half)
        out["upper"].append(stats["mean"] + half)
        out["n"].append(stats["n"])
    return out


def _steps_to_target_rows(
    grouped: Mapping[tuple[str, int, float], list[Mapping[str, Any]]],
    chosen: Mapping[tuple[str, int], float],
    methods: Sequence[str],
    group_sizes: Sequence[int],
) -> list[dict[str, Any]]:
    """Per (method, G): steps its seed-mean held-out curve needs to reach GRPO's final Pass@1
    (mean over GRPO's seeds, at GRPO's rate in ``chosen``), and how many seeds reach it alone."""
    rows = []
    for g in group_sizes:
        ref_lr = chosen.get((REFERENCE_METHOD, g))
        reference = grouped.get((REFERENCE_METHOD, g, ref_lr), []) if ref_lr is not None else []
        if not reference:
            continue
        target = mean_ci([r["heldout"]["overall"] for r in reference])["mean"]
        for method in methods:
            lr = chosen.get((method, g))
            records = grouped.get((method, g, lr), []) if lr is not None else []
            if not records:
                continue
            curves = [r["eval_curve"] for r in records]
            mean = _mean_curve(curves, "pass1")
            per_seed = [steps_to_target(c["step"], c["pass1"], target) for c in curves]
            reached = [s for s in per_seed if s is not None]
            rows.append(
                {
                    "method": method,
                    "G": g,
                    "lr": lr,
                    "target": target,
                    "final_step": max(c["step"][-1] for c in curves),
                    "steps_mean_curve": steps_to_target(mean["step"], mean["mean"], target),
                    "seeds_reached": len(reached),
                    "seeds": len(per_seed),
                    "steps_per_seed": per_seed,
                }
            )
    return rows


def aggregate(cells: Sequence[Mapping[str, Any]], config: BenchConfig) -> dict[str, Any]:
    """Everything the report shows, from finished cells: the learning-rate sweep on validation,
    the best-lr and equal-lr tables (mean ± 95% CI over seeds), the group-size table,
    steps-to-target, and seed-mean curves with bands."""
    grouped = _cells_by_key(cells)
    best = select_learning_rates(cells, split="validation")
    best_lr = {key: value["lr"] for key, value in best.items()}
    equal = float(config.reference_lr)
    equal_lr = {(m, g): equal for m in config.methods for g in config.group_sizes}
    columns = _columns(cells)
    methods = [m for m in config.methods]
    group_sizes = list(config.group_sizes)

    curves: dict[str, dict[str, Any]] = {}
    for label, chosen in (("best_lr", best_lr), ("equal_lr", equal_lr)):
        for (method, g), lr in chosen.items():
            records = grouped.get((method, g, lr), [])
            if not records:
                continue
            entry = {"pass1": _mean_curve([r["eval_curve"] for r in records], "pass1")}
            for name in CURVE_KEYS:
                if all(name in r["curves"] for r in records):
                    entry[name] = _mean_curve([r["curves"] for r in records], name)
            curves.setdefault(label, {})[f"{method}|{g}"] = entry

    sweep = []
    for (method, g, lr), records in sorted(grouped.items()):
        sweep.append(
            {
                "method": method,
                "G": g,
                "lr": lr,
                "validation": mean_ci([r["validation"]["overall"] for r in records]),
                "heldout": mean_ci([r["heldout"]["overall"] for r in records]),
                "chosen": best_lr.get((method, g)) == lr,
                "seeds": [r["spec"]["seed"] for r in records],
            }
        )
    wall = [float(c["wall_time_s"]) for c in cells if isinstance(c.get("wall_time_s"), (int, float))]
    return {
        "config": {
            **{k: v for k, v in dataclasses.asdict(config).items() if k not in ("verbose", "threads")},
            "equal_lr": equal,
        },
        "columns": [label for label, _, _ in columns],
        "cells_finished": len(cells),
        "cells_total": len(config.cells()),
        "cell_wall_time_s": mean_ci(wall) | {"total": sum(wall)},
        "lr_sweep": sweep,
        "best_lr": {f"{m}|{g}": v for (m, g), v in best.items()},
        "table_best_lr": _table(grouped, columns, best_lr, methods, group_sizes),
        "table_equal_lr": _table(grouped, columns, equal_lr, methods, group_sizes),
        "steps_to_target_best_lr": _steps_to_target_rows(grouped, best_lr, methods, group_sizes),
        "steps_to_target_equal_lr": _steps_to_target_rows(grouped, equal_lr, methods, group_sizes),
        "curves": curves,
    }


# ====================================================================== report
def _fmt(stats: Mapping[str, float], scale: float = 100.0, digits: int = 1) -> str:
    mean, ci = stats.get("mean", math.nan), stats.get("ci", math.nan)
    if not math.isfinite(mean):
        return "—"
    text = f"{scale * mean:.{digits}f}"
    return text + (f" ± {scale * ci:.{digits}f}" if math.isfinite(ci) else "")


def _markdown(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _table_markdown(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], g: int) -> str:
    selected = [r for r in rows if r["G"] == g]
    if not selected:
        return "(no finished cells)"
    body = [[r["method"], f"{r['lr']:g}", len(r["seeds"]), *(_fmt(r[c]) for c in columns)] for r in selected]
    return _markdown(["method", "lr", "seeds", *columns], body)


def _group_size_markdown(rows: Sequence[Mapping[str, Any]], methods: Sequence[str], group_sizes: Sequence[int]) -> str:
    body = []
    for method in methods:
        cells = {r["G"]: r for r in rows if r["method"] == method}
        if cells:
            body.append([method, *(_fmt(cells[g]["avg"]) + f" (lr {cells[g]['lr']:g})" if g in cells else "—" for g in group_sizes)])
    return _markdown(["method", *(f"G={g}" for g in group_sizes)], body) if body else "(no finished cells)"


def _steps_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:
        return f"(needs finished `{REFERENCE_METHOD}` cells: its final Pass@1 is the target)"
    body = [
        [
            r["G"],
            r["method"],
            f"{r['lr']:g}",
            f"{100 * r['target']:.1f}",
            r["steps_mean_curve"] if r["steps_mean_curve"] is not None else f"not reached (≤ {r['final_step']})",
            f"{r['seeds_reached']}/{r['seeds']}",
        ]
        for r in rows
    ]
    return _markdown(["G", "method", "lr", f"target ({REFERENCE_METHOD} final, %)", "steps (seed-mean curve)", "seeds reaching it"], body)


def write_report(summary: Mapping[str, Any], config: BenchConfig, *, plots: bool = True) -> Path:
    """Write ``summary.json``, the CSV tables, the PNG plots and ``results.md`` to the output dir."""
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    _write_json(out / "summary.json", summary)
    columns = summary["columns"]
    _write_table_csv(out / "table_best_lr.csv", summary["table_best_lr"], columns)
    _write_table_csv(out / "table_equal_lr.csv", summary["table_equal_lr"], columns)
    _write_csv(
        out / "lr_sweep.csv",
        ["method", "G", "lr", "validation_mean", "validation_ci", "heldout_mean", "heldout_ci", "seeds", "chosen"],
        [
            [r["method"], r["G"], r["lr"], r["validation"]["mean"], r["validation"]["ci"], r["heldout"]["mean"], r["heldout"]["ci"], len(r["seeds"]), r["chosen"]]
            for r in summary["lr_sweep"]
        ],
    )
    _write_csv(
        out / "steps_to_target.csv",
        ["table", "method", "G", "lr", "target", "steps_mean_curve", "seeds_reached", "seeds"],
        [
            [table, r["method"], r["G"], r["lr"], r["target"], r["steps_mean_curve"], r["seeds_reached"], r["seeds"]]
            for table in ("best_lr", "equal_lr")
            for r in summary[f"steps_to_target_{table}"]
        ],
    )
    images = _plots(summary, config, out) if plots and summary["cells_finished"] else []
    (out / "results.md").write_text(_results_markdown(summary, config, images))
    return out / "results.md"


def _results_markdown(summary: Mapping[str, Any], config: BenchConfig, images: Sequence[Path]) -> str:
    cfg = summary["config"]
    wall = summary["cell_wall_time_s"]
    lines = [
        "# ebpo bench — results\n",
        f"Cells finished: {summary['cells_finished']} / {summary['cells_total']} · "
        f"methods {', '.join(cfg['methods'])} · G ∈ {{{', '.join(map(str, cfg['group_sizes']))}}} · seeds {list(cfg['seeds'])} · "
        f"learning rates {[float(lr) for lr in cfg['learning_rates']]} · {cfg['steps']} RL steps of {cfg['prompts_per_step']} prompts · "
        f"Pass@1 over {cfg['eval_samples']} samples per problem, {cfg['eval_problems']} problems per (topic, tier) cell.",
        f"Wall time per cell: {wall['mean']:.0f} s on average (total {wall['total'] / 3600:.2f} h of cells)." if wall["n"] else "",
        (
            f"\n**Partial results: {summary['cells_finished']} of {summary['cells_total']} cells.** A learning rate chosen from an "
            "unfinished sweep (see the sweep table's seed counts) may still change."
        )
        if summary["cells_finished"] < summary["cells_total"]
        else "",
        "\nHeld-out Pass@1 (%), mean ± 95% CI over seeds (Student t; no interval with one seed). "
        "`avg` is Pass@1 over all held-out problems. The learning rate per (method, G) is the best of the "
        "sweep on the **validation** split; the held-out split chooses nothing.\n",
    ]
    for g in cfg["group_sizes"]:
        lines += [f"## G = {g}, each method at its best learning rate (validation)\n", _table_markdown(summary["table_best_lr"], summary["columns"], g), ""]
    for g in cfg["group_sizes"]:
        lines += [f"## G = {g}, every method at learning rate {cfg['equal_lr']:g}\n", _table_markdown(summary["table_equal_lr"], summary["columns"], g), ""]
    if len(cfg["group_sizes"]) > 1:
        lines += ["## Group size (avg held-out Pass@1, best learning rate)\n", _group_size_markdown(summary["table_best_lr"], cfg["methods"], cfg["group_sizes"]), ""]
    lines += [
        f"## Steps to target (best learning rate)\n\nSteps each method's held-out Pass@1 (mean curve over seeds, evaluated every "
        f"{cfg['eval_every']} steps) needs to reach {REFERENCE_METHOD}'s final Pass@1 at the same G. "
        f"Step 0 is the warm-started model before RL: 0 means it already scored the target, i.e. "
        f"{REFERENCE_METHOD} ended no better than where it started.\n",
        _steps_markdown(summary["steps_to_target_best_lr"]),
        f"\n## Steps to target (learning rate {cfg['equal_lr']:g})\n",
        _steps_markdown(summary["steps_to_target_equal_lr"]),
        "\n## Learning-rate sweep (Pass@1 %, validation split chooses; * = chosen)\n",
    ]
    sweep_rows = [
        [r["method"], r["G"], f"{r['lr']:g}" + (" *" if r["chosen"] else ""), _fmt(r["validation"]), _fmt(r["heldout"]), len(r["seeds"])]
        for r in summary["lr_sweep"]
    ]
    lines.append(_markdown(["method", "G", "lr", "validation", "held-out", "seeds"], sweep_rows) if sweep_rows else "(no finished cells)")
    if images:
        lines.append("\n## Plots\n")
        lines += [f"![{p.stem}]({p.name})" for p in images]
    return "\n".join(lines) + "\n"


def _plots(summary: Mapping[str, Any], config: BenchConfig, out: Path) -> list[Path]:
    from ebpo.plotting import plot_panels

    images = []
    titles = {
        "pass1": "held-out Pass@1",
        "reward": "training reward",
        "grad_norm": "gradient norm",
        "entropy": "token entropy",
        "shrinkage": "EBPO mean shrinkage S",
    }
    plan = [("heldout_pass1_best_lr", "best_lr", "pass1"), ("heldout_pass1_equal_lr", "equal_lr", "pass1")]
    plan += [(name, "best_lr", name) for name in CURVE_KEYS]
    for filename, table, curve in plan:
        entries = summary["curves"].get(table, {})
        panels: dict[str, dict[str, tuple[list, list]]] = {}
        bands: dict[str, dict[str, tuple[list, list]]] = {}
        for key, entry in entries.items():
            method, g = key.split("|")
            data = entry.get(curve)
            if not data or not data["step"] or all(v is None for v in data["mean"]):
                continue
            panel = f"G={g}"
            x = data["step"]
            # Per-step training metrics are noisy at a few prompts per step: a moving average
            # makes the trends readable (the held-out curves are already averages of 16 samples).
            window = 1 if curve == "pass1" else max(1, len(x) // 15)
            panels.setdefault(panel, {})[method] = (x, _smooth(data["mean"], window))
            bands.setdefault(panel, {})[method] = (_smooth(data["lower"], window), _smooth(data["upper"], window))
        if not panels:
            continue
        suffix = "" if table == "best_lr" else f" (lr {summary['config']['equal_lr']:g})"
        ordered = dict(sorted(panels.items(), key=lambda item: int(item[0][2:])))
        images.append(
            plot_panels(out / f"{filename}.png", ordered, bands=bands, ncols=len(ordered), title=f"{titles[curve]}{suffix}, mean and 95% CI over seeds")
        )
    return images


def _smooth(values: Sequence[float], window: int) -> list[float]:
    if window <= 1:
        return list(values)
    out = []
    for i in range(len(values)):
        chunk = values[max(0, i - window + 1) : i + 1]
        out.append(sum(chunk) / len(chunk))
    return out


# ====================================================================== files
def _read_json(path: Path) -> dict[str, Any]:
    with open(path) as f:
        return json.load(f)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _write_json(path: Path, value: Any) -> None:
    # write-then-rename: an interrupt never leaves half a file (a half cell.json would look finished)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w") as f:
        json.dump(value, f, indent=2, default=_json_default, allow_nan=True)
    os.replace(tmp, path)


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"not JSON-serialisable: {type(value).__name__}")


def _write_table_csv(path: Path, rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> None:
    header = ["method", "G", "lr", "seeds"]
    for c in columns:
        header += [f"{c}_mean", f"{c}_ci95"]
    body = []
    for r in rows:
        line = [r["method"], r["G"], r["lr"], len(r["seeds"])]
        for c in columns:
            line += [r[c]["mean"], r[c]["ci"]]
        body.append(line)
    _write_csv(path, header, body)


def _write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def _relative(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` when it lies under it (the results folder can then move)."""
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)
