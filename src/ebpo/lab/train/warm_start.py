"""The policy of an ``ebpo train`` job: the model it starts from and its warm start, cached on disk
(:mod:`ebpo.lab.cpu_task.policy`) under a key made of everything the warm start depends on
(:func:`warm_start_recipe`). Under a launcher the main process trains a warm start once; the other
processes load it from the cache.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ebpo.lab.cpu_task import policy
from ebpo.lab.cpu_task.policy import BUILTIN_MODEL
from ebpo.lab.runs.processes import Processes
from ebpo.lab.train import data as job_data
from ebpo.lab.train.config import TrainJobConfig

__all__ = [
    "initial_policy",
    "warm_start",
    "warm_start_notice",
    "warm_start_pending",
    "warm_start_recipe",
]


def initial_policy(config: TrainJobConfig) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of the job before its warm start."""
    return policy.load_policy(
        config.model,
        tiny_layers=config.tiny_layers,
        tiny_hidden_size=config.tiny_hidden_size,
        tiny_heads=config.tiny_heads,
        seed=config.seed,
    )


def warm_start_recipe(config: TrainJobConfig) -> dict[str, Any]:
    """Everything the job's warm start depends on: its cache key (:func:`ebpo.lab.cpu_task.policy.warm_start_key`)."""
    return {
        "model": config.model,
        "tiny": [config.tiny_layers, config.tiny_hidden_size, config.tiny_heads]
        if config.model == BUILTIN_MODEL
        else None,
        "dataset": config.dataset,
        "cells": [list(config.topics), list(config.tiers)] if config.builtin_dataset else None,
        "steps": config.warm_steps,
        "batch": config.warm_start_batch_size,
        "lr": config.warm_start_lr,
        "clean_then_corrupt": [config.warm_start_clean, config.warm_start_corrupt]
        if config.builtin_dataset
        else None,
        "seed": config.seed,
    }


def warm_start_pending(config: TrainJobConfig) -> bool:
    """Whether the job will train a warm start (one is asked for and not cached yet)."""
    if not config.warm_steps:
        return False
    path = policy.warm_start_path(policy.cache_dir(config.cache_dir), warm_start_recipe(config))
    return not policy.warm_start_is_cached(path)


#: seconds a supervised step of the built-in model (2 layers, width 128) takes at batch 128 on one
#: free CPU core (100 steps in about 8 s); a busy machine takes several times as long
_SECONDS_PER_STEP = 0.085


def warm_start_notice(config: TrainJobConfig, cache: Path) -> str:
    """The line said before a warm start trains (on a first run: later runs load it): that it
    happens, roughly how long it takes, and where it is kept."""
    steps = config.warm_steps
    where = f"cached in {cache} for later runs"
    if config.model != BUILTIN_MODEL:
        return (
            f"warm start: {steps} supervised steps of {config.model} on the CPU first (each a "
            f"forward and backward pass of {config.warm_start_batch_size} sequences; {where})"
        )
    size = (
        (config.warm_start_batch_size / 128)
        * (config.tiny_layers / 2)
        * (config.tiny_hidden_size / 128) ** 2
    )
    seconds = steps * _SECONDS_PER_STEP * max(size, 0.1)
    took = (
        "a few seconds"
        if 4 * seconds < 10
        else f"about {_duration(seconds)} on a free machine, up to {_duration(4 * seconds)} on a "
        "busy one"
    )
    return f"warm start: {steps} supervised steps first, once for this seed and setting ({where}): {took}"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    return f"{round(seconds / 60)} min"


def warm_start(
    config: TrainJobConfig, processes: Processes, data: Any, model: Any, tokenizer: Any
) -> tuple[Any, bool | None]:
    """(policy after its warm start, whether the warm start came from the cache — None without
    one). The main process trains it (or loads it) holding the cache entry's lock; the other
    processes queue on that lock once the main process holds it, and load what it cached."""
    if not config.warm_steps:
        return model, None

    def examples():
        for row in data.warm_rows():
            yield job_data.render_prompts([row], tokenizer, data.style)[0], str(row["answer"])

    cache = policy.cache_dir(config.cache_dir)
    if config.progress and processes.main and warm_start_pending(config):
        print(warm_start_notice(config, cache))
    options: dict[str, Any] = {
        "steps": config.warm_steps,
        "batch_size": config.warm_start_batch_size,
        "lr": config.warm_start_lr,
        "seed": config.seed,
        "cache": cache,
        "recipe": warm_start_recipe(config),
    }
    model, cached = processes.main_first(
        lambda release: policy.warm_start(
            model, tokenizer, examples(), progress=config.progress, on_locked=release, **options
        ),
        lambda: policy.warm_start(model, tokenizer, iter(()), train=False, **options),
    )
    if config.progress and processes.main:
        how = "loaded from cache" if cached else "trained and cached"
        others = processes.count - 1
        also = f"; {others} other process{'es' if others > 1 else ''} loaded it" if others else ""
        print(f"warm start: {how} ({cache}){also}")
    return model, cached
