"""The matrix of ``ebpo bench``: :class:`BenchConfig` (methods × G × learning rates × seeds, the
contrasts read from them, and the train-job settings every cell shares) with its validation and
fingerprint, and :class:`CellSpec`, one train job of the matrix.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ebpo.lab.bench.contrasts import Contrast, default_contrasts
from ebpo.lab.bench.methods import DEFAULT_METHODS, available_methods
from ebpo.lab.cpu_task import task
from ebpo.lab.train.config import TrainJobConfig
from ebpo.utils.checks import check_ints, is_integer, is_real

__all__ = ["BenchConfig", "CellSpec"]


@dataclass
class BenchConfig:
    """The matrix (methods × G × learning rates × seeds) and the per-cell train-job settings."""

    methods: tuple[str, ...] = DEFAULT_METHODS
    #: the paired differences read (``method − baseline``, both among ``methods``); None: every
    #: method against GRPO (:func:`~ebpo.lab.bench.contrasts.default_contrasts`). They choose no
    #: cell: ``--report-only`` reads finished cells with other contrasts.
    contrasts: tuple[Contrast, ...] | None = None
    group_sizes: tuple[int, ...] = (2, 4, 8)
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    #: the sweep around ``ebpo train``'s 3e-4; the best rate per (method, G) is chosen on the
    #: validation split
    learning_rates: tuple[float, ...] = (1.5e-4, 3e-4, 6e-4)
    #: RL steps per cell (prompts per step as ``ebpo train``): half of ``ebpo train``'s 200, to keep
    #: the default matrix's wall time down; the checkpoints read the differences earlier, and a
    #: shuffled-stream run's first 100 steps are the same at either length (docs/results.md)
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
    #: torch's thread pool waits for its threads more than it computes; run shards side by side
    #: instead
    threads: int = 1
    #: show the train jobs' own progress bars (the bench always shows one bar over cells)
    verbose: bool = False
    #: the smoke test of :meth:`quick`: the report and the console say that it is not evidence
    smoke_test: bool = False

    def __post_init__(self) -> None:
        # a declared pair may be a plain (method, baseline[, label]) tuple
        if self.contrasts is not None and not isinstance(self.contrasts, (str, bytes)):
            self.contrasts = tuple(
                c if isinstance(c, Contrast) else Contrast(*c) for c in self.contrasts
            )

    @classmethod
    def quick(cls, **overrides: Any) -> BenchConfig:
        """The CI mode, a smoke test of the pipeline: GRPO and EBPO, G = 2, two seeds, one rate, a
        few steps from a tiny warm start. Its models barely learn (most rewards are 0), so its
        differences are not evidence; the report says so."""
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
            "smoke_test": True,
        }
        values.update(overrides)
        return cls(**values)

    def comparisons(self) -> tuple[Contrast, ...]:
        """The contrasts the report reads: ``contrasts``, or every method against GRPO."""
        return default_contrasts(self.methods) if self.contrasts is None else self.contrasts

    @property
    def reference_lrs(self) -> tuple[float, ...]:
        return tuple(sorted(float(lr) for lr in self.learning_rates))

    def validate(self) -> None:
        """Raise ValueError naming the first bad option."""
        known = available_methods()
        unknown = [m for m in self.methods if m not in known]
        if not self.methods or unknown:
            raise ValueError(
                f"methods must be a non-empty subset of {known} (a method or an estimator name), "
                f"got {list(self.methods)}"
            )
        if len(set(self.methods)) != len(self.methods):
            raise ValueError(f"methods has duplicates: {list(self.methods)}")
        self._validate_contrasts()
        check_ints("group_sizes", self.group_sizes, 2)
        check_ints("seeds", self.seeds, 0)
        if not self.learning_rates or any(not _positive(lr) for lr in self.learning_rates):
            raise ValueError(
                f"learning_rates must be a non-empty list of positive numbers, got {list(self.learning_rates)}"
            )
        if len(set(self.learning_rates)) != len(self.learning_rates):
            raise ValueError(f"learning_rates has duplicates: {list(self.learning_rates)}")
        for name in ("steps", "prompts_per_step", "eval_every", "threads"):
            check_ints(name, (getattr(self, name),), 1)
        check_ints("eval_samples", (self.eval_samples,), 8)
        check_ints("eval_problems", (self.eval_problems,), 1)
        bad = [
            c
            for c in self.checkpoints
            if not is_integer(c) or c < 1 or c >= self.steps or c % self.eval_every
        ]
        if bad:
            raise ValueError(
                f"checkpoints must be multiples of eval_every ({self.eval_every}) below steps "
                f"({self.steps}), got {list(self.checkpoints)}"
            )
        if not (_positive(self.target_gain) and self.target_gain <= 1):
            raise ValueError(f"target_gain must be a number in (0, 1], got {self.target_gain!r}")
        self._validate_train_options()

    def _validate_contrasts(self) -> None:
        if self.contrasts is None:
            return
        if isinstance(self.contrasts, (str, bytes)) or not self.contrasts:
            raise ValueError(
                f"contrasts must be None or a non-empty list of (method, baseline), got {self.contrasts!r}"
            )
        outside = [c.name for c in self.contrasts if {c.method, c.baseline} - set(self.methods)]
        if outside:
            raise ValueError(
                f"contrasts {outside} name methods outside the matrix {list(self.methods)}"
            )
        pairs = [(c.method, c.baseline) for c in self.contrasts]
        if len(set(pairs)) != len(pairs):
            raise ValueError(f"contrasts has duplicates: {[c.name for c in self.contrasts]}")

    def _validate_train_options(self) -> None:
        if not isinstance(self.train_options, dict):
            raise ValueError(
                f"train_options must be a dict of TrainJobConfig fields, got {type(self.train_options).__name__}"
            )
        fields = {f.name for f in dataclasses.fields(TrainJobConfig)}
        # the bench owns these: they define the cell, or where and whether its run resumes
        owned = {"output_dir", "resume", "overwrite", "group_size", "seed", "learning_rate", "estimator", "order",
                 "estimator_options", "cluster_column", "eval_validation", "steps", "prompts_per_step",
                 "eval_samples", "eval_every", "eval_problems", "progress"}  # fmt: skip
        bad = sorted(set(self.train_options) - fields) + sorted(set(self.train_options) & owned)
        if bad:
            raise ValueError(
                f"train_options may not set {bad}: expected TrainJobConfig fields other than {sorted(owned)}"
            )
        dataset = self.train_options.get("dataset", "arithmetic")
        if dataset not in task.BUILTIN_DATASETS:
            # learning rates are chosen on a validation split, which only the built-in task has
            raise ValueError(
                f"train_options['dataset'] must be a built-in dataset {list(task.BUILTIN_DATASETS)}, got {dataset!r}"
            )
        probe = TrainJobConfig(**{**self.train_options, "steps": self.steps})
        probe.validate()  # e.g. bad tiers or warm-start settings, before any cell runs

    def fingerprint(self) -> dict[str, Any]:
        """Settings every cell depends on besides its own (method, G, lr, seed): a finished cell
        with another fingerprint is stale and re-runs. It includes the train job's defaults, so
        that cells made before a change of ``ebpo train``'s defaults are not mixed with newer ones."""
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
    return is_real(value) and math.isfinite(value) and value > 0


@dataclass(frozen=True)
class CellSpec:
    """One train job of the matrix."""

    method: str
    group_size: int
    learning_rate: float
    seed: int

    def relative_dir(self) -> Path:
        return (
            Path("cells")
            / self.method
            / f"G{self.group_size}"
            / f"lr{self.learning_rate:g}"
            / f"seed{self.seed}"
        )

    def label(self) -> str:
        return f"{self.method} G={self.group_size} lr={self.learning_rate:g} seed={self.seed}"
