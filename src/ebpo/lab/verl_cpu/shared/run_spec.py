"""One CPU run of verl's loop as a value (:class:`RunSpec`) and the Hydra overrides that both
trainers add to verl's ``ppo_trainer`` config (:data:`LOOP_OVERRIDES`, :meth:`RunSpec.overrides`);
each trainer adds its own pieces (:func:`ebpo.lab.verl_cpu.v1.launch.v1_overrides`,
:func:`ebpo.lab.verl_cpu.legacy.run.compose_config`). Imports nothing from verl."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LOOP_OVERRIDES", "RunSpec"]

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
    ``save_freq`` steps in ``run_dir/checkpoints``; ``resume_from`` a ``global_step_<N>`` folder
    (``None``: a fresh run); ``extra``: overrides applied after all others (the estimator's
    ``algorithm.*`` keys, a test's changes)."""

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
    resume_from: str | None = None
    extra: tuple[str, ...] = ()

    @property
    def rows(self) -> int:
        """Rows of one step: ``batch_size × group_size``."""
        return self.batch_size * self.group_size

    def overrides(self) -> list[str]:
        """The overrides that come from the run's files and sizes, the same for both trainers:
        data, model, learning rate, samples per prompt, steps, checkpoints and where to resume
        from. Each trainer adds its own batch splits."""
        resume = (
            ["trainer.resume_mode=resume_path", f"trainer.resume_from_path={self.resume_from}"]
            if self.resume_from
            else ["trainer.resume_mode=disable"]
        )
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
            f"trainer.default_local_dir={os.path.join(self.run_dir, 'checkpoints')}",
            "trainer.project_name=ebpo-verl-cpu",
            f"trainer.experiment_name={Path(self.run_dir).name}",
            *resume,
        ]
