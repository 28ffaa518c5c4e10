"""One CPU run of verl's loop as a value (:class:`RunSpec`) and the Hydra overrides that both
trainers add to verl's ``ppo_trainer`` config (:data:`LOOP_OVERRIDES`, :meth:`RunSpec.overrides`);
each trainer adds its own pieces (:func:`ebpo.lab.verl_cpu.v1.launch.v1_overrides`,
:func:`ebpo.lab.verl_cpu.legacy.run.compose_config`). Imports nothing from verl."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LOOP_OVERRIDES", "RESUME_MODES", "RunSpec"]

#: verl's ``trainer.resume_mode`` values; ``auto`` is verl's default
RESUME_MODES = ("disable", "auto", "resume_path")

#: the Hydra overrides that both trainers' CPU runs add to verl's ``ppo_trainer`` config: the
#: loop's settings (validation first, one epoch, checkpoints saved with ebpo's callback, data in
#: file order), the actor's PPO settings and ebpo's reward
LOOP_OVERRIDES = (
    "trainer.device=cpu",
    "trainer.nnodes=1",
    "trainer.logger=[console,file]",
    "trainer.val_before_train=True",
    "trainer.test_freq=-1",
    "trainer.total_epochs=1",
    "trainer.balance_batch=True",
    "trainer.checkpoint_callback_class=ebpo.integrations.verl.checkpoint.EBPOCheckpointCallback",
    "data.prompt_key=prompt",
    "data.shuffle=False",
    "data.validation_shuffle=False",
    "data.dataloader_num_workers=0",
    "data.filter_overlong_prompts=False",
    "data.truncation=error",
    "actor_rollout_ref.hybrid_engine=True",
    "actor_rollout_ref.actor.use_kl_loss=False",
    "actor_rollout_ref.actor.entropy_coeff=0",
    "actor_rollout_ref.actor.loss_agg_mode=token-mean",
    "actor_rollout_ref.actor.ppo_epochs=1",
    "actor_rollout_ref.actor.shuffle=False",
    "actor_rollout_ref.actor.grad_clip=1.0",
    "actor_rollout_ref.rollout.temperature=1.0",
    "actor_rollout_ref.rollout.agent.num_workers=1",
    "algorithm.use_kl_in_reward=False",
    "reward.num_workers=1",
    "reward.custom_reward_function.path=pkg://ebpo.integrations.verl.reward",
    "reward.custom_reward_function.name=compute_score",
)


@dataclass(frozen=True)
class RunSpec:
    """One CPU run of either trainer: its files, its sizes and where it resumes from.

    ``steps`` training steps of ``batch_size`` prompts × ``group_size`` samples, a checkpoint every
    ``save_freq`` steps in ``checkpoint_dir`` (verl's ``trainer.default_local_dir``; None:
    ``run_dir/checkpoints``, absolute; a relative one is verl's kind: against the working
    directory of the run's processes). ``resume_mode`` is verl's: ``disable`` (a fresh run),
    ``auto`` (verl's default, so the key is left unset: verl resumes from the folder its tracker
    file in ``checkpoint_dir`` names, or starts fresh without one) or ``resume_path`` (from the
    ``global_step_<N>`` folder ``resume_from``). ``parameter_sync_step`` > 1 (v1 only): verl's
    sub-steps, that many actor updates a step, each on ``batch_size / parameter_sync_step``
    prompts (one PPO mini-batch each). ``extra``: overrides applied after all others (the
    estimator's ``algorithm.*`` keys, a test's changes)."""

    model_path: str
    train_file: str
    val_file: str
    run_dir: str
    steps: int
    save_freq: int
    batch_size: int
    group_size: int
    lr: float
    max_prompt_length: int
    max_response_length: int
    seed: int = 0
    resume_mode: str = "disable"
    resume_from: str | None = None
    checkpoint_dir: str | None = None
    parameter_sync_step: int = 1
    extra: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.resume_mode not in RESUME_MODES:
            raise ValueError(
                f"resume_mode must be one of {', '.join(RESUME_MODES)}; got {self.resume_mode!r}"
            )
        if (self.resume_mode == "resume_path") != (self.resume_from is not None):
            raise ValueError("resume_from is given exactly when resume_mode is resume_path")
        if self.parameter_sync_step < 1 or self.batch_size % self.parameter_sync_step:
            raise ValueError(
                f"parameter_sync_step must divide batch_size ({self.batch_size}); "
                f"got {self.parameter_sync_step}"
            )

    @property
    def rows(self) -> int:
        """Rows of one step: ``batch_size × group_size``."""
        return self.batch_size * self.group_size

    @property
    def checkpoints(self) -> str:
        """The absolute directory of the run's checkpoints (a relative ``checkpoint_dir`` taken
        against ``run_dir``, the working directory the smoke runs it in)."""
        return os.path.join(self.run_dir, self.checkpoint_dir or "checkpoints")

    def overrides(self) -> list[str]:
        """The overrides that come from the run's files and sizes, the same for both trainers:
        data, model, learning rate, samples per prompt, steps, checkpoints and where to resume
        from. Each trainer adds its own batch splits."""
        resume = {
            "disable": ["trainer.resume_mode=disable"],
            "auto": [],  # verl's default
            "resume_path": [
                "trainer.resume_mode=resume_path",
                f"trainer.resume_from_path={self.resume_from}",
            ],
        }[self.resume_mode]
        return [
            f"data.train_files={self.train_file}",
            f"data.val_files={self.val_file}",
            f"data.train_batch_size={self.batch_size}",
            f"data.max_prompt_length={self.max_prompt_length}",
            f"data.max_response_length={self.max_response_length}",
            f"actor_rollout_ref.model.path={self.model_path}",
            f"actor_rollout_ref.actor.optim.lr={self.lr}",
            f"actor_rollout_ref.rollout.n={self.group_size}",
            f"actor_rollout_ref.rollout.seed={self.seed}",
            f"trainer.total_training_steps={self.steps}",
            f"trainer.save_freq={self.save_freq}",
            f"trainer.default_local_dir={self.checkpoint_dir or self.checkpoints}",
            "trainer.project_name=ebpo-verl-cpu",
            f"trainer.experiment_name={Path(self.run_dir).name}",
            *resume,
        ]
