"""verl runs as verl 0.9.1 leaves them, for ``ebpo compare``'s tests: the file logger's JSON lines
(``{"step": N, "data": {...}}`` per log call, ``VERL_FILE_LOGGER_PATH``; the smoke's
``verl_metrics.jsonl``) and Hydra's ``.hydra/config.yaml`` / ``overrides.yaml`` in the run's
``hydra/`` folder (``hydra.run.dir``, as the smoke sets it)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

#: a slice of the config.yaml verl writes (the smoke's, shortened)
CONFIG = {
    "actor_rollout_ref": {
        "actor": {"optim": {"lr": 1.0e-05}, "ppo_mini_batch_size": 4},
        "rollout": {"n": 4, "seed": 0, "temperature": 1.0},
        "model": {"path": "Qwen/Qwen3-0.6B"},
    },
    "algorithm": {"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": True},
    "data": {"train_files": "/data/train.parquet", "seed": None},
    "trainer": {"experiment_name": "run", "default_local_dir": "/ckpt/run", "total_epochs": 1},
}


def write_verl_run(
    folder: Path,
    estimator: str,
    seed: int,
    rewards: Sequence[float],
    accuracy: Mapping[int, float],
    *,
    settings: Mapping[str, Any] | None = None,
) -> Path:
    """A verl run in ``folder``: step 0 validation, one training line per reward (steps 1..),
    validation accuracy at the steps of ``accuracy`` (its own line after the step's training
    line, as verl logs a validation); ``settings`` ``{"a.b": value}`` changes config values.
    Returns the metrics file."""
    config = json.loads(json.dumps(CONFIG))
    config["algorithm"]["adv_estimator"] = estimator
    config["actor_rollout_ref"]["rollout"]["seed"] = seed
    config["trainer"]["experiment_name"] = f"{estimator}-{seed}"
    config["trainer"]["default_local_dir"] = str(folder / "checkpoints")
    for key, value in (settings or {}).items():
        *parents, last = key.split(".")
        node = config
        for part in parents:
            node = node[part]
        node[last] = value
    hydra = folder / "hydra" / ".hydra"
    hydra.mkdir(parents=True)
    (hydra / "config.yaml").write_text(yaml.safe_dump(config))
    overrides = [
        f"algorithm.adv_estimator={estimator}",
        f"actor_rollout_ref.rollout.seed={seed}",
        f"trainer.experiment_name={estimator}-{seed}",
        f"trainer.default_local_dir={folder / 'checkpoints'}",
    ]
    (hydra / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    lines = [{"step": 0, "data": {"val-core/math/acc/mean@1": accuracy.get(0, 0.0)}}]
    for step, reward in enumerate(rewards, start=1):
        data = {"critic/score/mean": reward, "actor/entropy": 0.5 / step, "timing_s/step": 1.2}
        lines.append({"step": step, "data": data})
        if step in accuracy:
            lines.append({"step": step, "data": {"val-core/math/acc/mean@1": accuracy[step]}})
    path = folder / "verl_metrics.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def write_trl_state(folder: Path, rewards: Sequence[float], *, first_step: int = 1) -> Path:
    """A TRL run without its pickled arguments: ``folder/checkpoint-N/trainer_state.json`` as
    transformers writes it (a log entry per step, the end-of-training summary last); its
    estimator and seed are given on the command line (``ESTIMATOR@SEED=folder``)."""
    steps = range(first_step, first_step + len(rewards))
    history: list[dict[str, Any]] = [
        {"step": s, "epoch": s / 10, "reward": r, "loss": 0.01 * s, "learning_rate": 1e-3}
        for s, r in zip(steps, rewards, strict=True)
    ]
    last = steps[-1]
    history.append({"step": last, "train_runtime": 12.5, "train_loss": 0.02, "total_flos": 0.0})
    state = {"global_step": last, "log_history": history, "max_steps": last}
    checkpoint = folder / f"checkpoint-{last}"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text(json.dumps(state, indent=2))
    return folder
