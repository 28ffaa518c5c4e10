"""The TRL trainer of an ``ebpo train`` job: its :class:`~ebpo.integrations.trl.EBPOConfig` (the
estimator's preset, then the job's settings, then ``extra``) and the
:class:`~ebpo.integrations.trl.EBPOTrainer` over the job's prompt stream, with the job's callback
(metrics, held-out evaluations, checkpoints' manifest, progress) first in line.
:mod:`ebpo.lab.train.job` runs it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ebpo.integrations.trl import EBPOTrainer, make_config
from ebpo.lab.runs.lifecycle import RunLifecycle
from ebpo.lab.runs.processes import Processes
from ebpo.lab.train import data as job_data
from ebpo.lab.train.callbacks import make_job_callback, quiet_trl_console
from ebpo.lab.train.config import TrainJobConfig

__all__ = ["build_trainer", "completion_length", "trainer_args_of"]


def completion_length(config: TrainJobConfig, data: Any) -> int:
    """Tokens a completion may take: the option, or the task's own length when it is 0."""
    return config.max_completion_length or data.completion_length


def trainer_args_of(
    config: TrainJobConfig, run_dir: Path, data: Any, num_processes: int = 1
) -> Any:
    """The EBPOConfig of this run: the preset, then the job's settings, then ``config.extra``.
    TRL counts the batch per process and in completions: each of ``num_processes`` samples an equal
    share of the step's ``prompts_per_step × group_size`` (a group may straddle two processes:
    TRL gathers the rewards of the whole step before it groups them)."""
    overrides: dict[str, Any] = {
        "output_dir": str(run_dir / "checkpoints"),
        "num_generations": config.group_size,
        "per_device_train_batch_size": config.prompts_per_step * config.group_size // num_processes,
        "gradient_accumulation_steps": 1,
        "max_steps": config.steps,
        "learning_rate": config.learning_rate,
        "lr_scheduler_type": "constant",
        "temperature": config.temperature,
        "max_completion_length": completion_length(config, data),
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


def build_trainer(
    config: TrainJobConfig,
    processes: Processes,
    run: RunLifecycle,
    data: Any,
    model: Any,
    tokenizer: Any,
    trainer_args: Any,
    evaluate: Callable[..., dict[str, Any]],
    on_start: Callable[..., Any],
) -> tuple[Any, Any]:
    """The run's EBPOTrainer on the rendered RL prompts and the job callback it calls first;
    ``evaluate`` runs on the main process only, checkpoints update the manifest there
    (:meth:`RunLifecycle.running`); every process calls ``on_start(step)`` when training starts."""
    # optional heavy dependencies (trl extra)
    import datasets
    from transformers.integrations import TensorBoardCallback

    run_dir, rows = run.path, data.rl_rows
    dataset = datasets.Dataset.from_dict(
        {
            "prompt": job_data.render_prompts(rows, tokenizer, data.style),
            "answer": [str(r["answer"]) for r in rows],
            "topic": [str(r["topic"]) for r in rows],
            "difficulty": [r["difficulty"] for r in rows],
        }
    )
    trainer = EBPOTrainer(
        model=model,
        reward_funcs=job_data.trl_reward(data.score),
        args=trainer_args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    quiet_trl_console(trainer)
    trainer.announce = config.progress  # --quiet: no estimator line, no resume line

    def periodic_eval(policy: Any, step: int) -> dict[str, Any]:
        return processes.on_main(lambda: evaluate(policy, f"held-out eval @ {step}"))

    def on_checkpoint(step: int) -> None:
        if processes.main:
            run.running(step)

    callback = make_job_callback(
        run_dir / "metrics.jsonl" if processes.main else None,
        total_steps=config.steps,
        eval_every=config.eval_every,
        evaluate=periodic_eval,
        on_checkpoint=on_checkpoint,
        on_start=on_start,
        progress=config.progress and processes.main,
        processes=processes,
    )
    # first, so the held-out metrics it adds to a log record reach TensorBoard (see make_job_callback)
    trainer.callback_handler.callbacks.insert(0, callback)
    for cb in trainer.callback_handler.callbacks:
        if isinstance(cb, TensorBoardCallback):
            cb.logging_dir = str(run_dir / "tensorboard")
    return trainer, callback
