"""verl's ``RayPPOTrainer`` on CPU workers, in the style of verl's recipes (a subclass overriding
``init_workers``).

What stays verl's code, unmodified: ``fit()`` (the loop, ``_balance_batch``, the metrics, the
``Tracking`` logger), the module-level ``compute_advantage`` (hence the ``verl.plugins`` registry
lookup of ``algorithm.adv_estimator``), ``_validate``, ``_save_checkpoint`` / ``_load_checkpoint``
(``global_step_N/``, ``data.pt``, ``latest_checkpointed_iteration.txt``), the
``StatefulDataLoader`` over ``RLHFDataset`` (or ``data.custom_cls``), ``RewardLoopManager`` and
its ``RewardLoopWorker`` actors, ``RayWorkerGroup`` dispatch, ``RayResourcePool`` placement groups.

What :class:`CPURayPPOTrainer` changes:

* ``init_workers`` builds ONE worker group of :class:`~ebpo.lab.verl_cpu.shared.worker.CPUActorRolloutWorker`
  on a CPU resource pool (:class:`CPUResourcePoolManager`: verl's ``RayResourcePool`` with
  ``use_gpu=False``, instead of ``ResourcePoolManager.create_resource_pool``, which hard-codes
  GPU bundles and raises "Total available GPUs 0 is less than total desired GPUs"), verl's
  ``RewardLoopManager``, and the rollout / weight-sync managers named by verl's hooks
  ``rollout.agent.agent_loop_manager_class`` and ``rollout.checkpoint_manager_class`` (defaults:
  :mod:`ebpo.lab.verl_cpu.legacy.rollout`). It skips ``LLMServerManager`` (vLLM / SGLang / TRT-LLM
  servers only) — generation happens in the worker;
* ``trainer.checkpoint_callback_class`` is honoured as verl's v1 trainers do (built with the full
  config in ``__init__``, ``on_save`` after each save) — the legacy ``RayPPOTrainer`` ignores
  that key, so without this the EBPO prior would not travel with the checkpoints;
* ``_update_actor`` also records what it trains on (step, advantages, response mask) when
  ``trace`` is given, so a test can compare two runs row by row; the update itself is verl's.
"""

from __future__ import annotations

import os
from typing import Any

# verl is this module's base (a verl trainer subclass): it needs the verl extra
from verl import DataProto
from verl.single_controller.ray import RayClassWithInitArgs
from verl.trainer.ppo.checkpoint_callback import build_checkpoint_callback
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.utils import Role
from verl.utils.import_utils import load_class_from_fqn

from ebpo.lab.verl_cpu.legacy.rollout import (
    CPURolloutManager,
    SharedWeightsCheckpointManager,
    WorkerGroupClient,
)
from ebpo.lab.verl_cpu.shared.results import StepTrace

__all__ = ["CPURayPPOTrainer"]

DEFAULT_AGENT_LOOP_MANAGER = f"{CPURolloutManager.__module__}.{CPURolloutManager.__name__}"
DEFAULT_CHECKPOINT_MANAGER = (
    f"{SharedWeightsCheckpointManager.__module__}.{SharedWeightsCheckpointManager.__name__}"
)


class CPURayPPOTrainer(RayPPOTrainer):
    """``RayPPOTrainer`` whose workers run on CPU (see module docstring)."""

    def __init__(
        self,
        *args: Any,
        trace: list[StepTrace] | None = None,
        worker_env: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.trace = trace
        self.worker_env = dict(worker_env or {})
        # As verl's v1 trainers: the callback is built before fit() loads a checkpoint.
        self.checkpoint_callback = build_checkpoint_callback(self.config)

    def init_workers(self) -> None:
        self.resource_pool_manager.create_resource_pool()
        role = Role.ActorRollout
        pool = self.resource_pool_manager.get_resource_pool(role)
        worker = RayClassWithInitArgs(
            cls=self.role_worker_mapping[role],
            config=self.config.actor_rollout_ref,
            role=str(role),
        )
        self.actor_rollout_wg = self.ray_worker_group_cls(
            resource_pool=pool,
            ray_cls_with_init=worker,
            device_name="cpu",
            worker_env=dict(self.worker_env),  # the CPU platform even in a Ray started elsewhere
        )
        self.actor_rollout_wg.init_model()

        from verl.experimental.reward_loop import RewardLoopManager  # heavy optional import

        self.reward_loop_manager = RewardLoopManager(config=self.config, rm_resource_pool=None)
        self.async_rollout_mode = True
        self.teacher_model_manager = None
        self.distillation_config = None
        self.llm_server_manager = None  # no inference server: the worker generates

        rollout = self.config.actor_rollout_ref.rollout
        manager_fqn = rollout.get("agent", {}).get("agent_loop_manager_class")
        manager_cls = load_class_from_fqn(
            manager_fqn or DEFAULT_AGENT_LOOP_MANAGER, "AgentLoopManager"
        )
        self.async_rollout_manager = manager_cls.create(
            config=self.config,
            llm_client=WorkerGroupClient(self.actor_rollout_wg),
            teacher_client=None,
            reward_loop_worker_handles=self.reward_loop_manager.reward_loop_workers,
        )
        checkpoint_fqn = rollout.get("checkpoint_manager_class")
        checkpoint_cls = load_class_from_fqn(
            checkpoint_fqn or DEFAULT_CHECKPOINT_MANAGER, "CheckpointEngineManager"
        )
        self.checkpoint_manager = checkpoint_cls(
            config=None, actor_wg=self.actor_rollout_wg, replicas=[]
        )
        self.checkpoint_manager.sleep_replicas()

    def _save_checkpoint(self) -> None:
        super()._save_checkpoint()
        folder = os.path.join(
            self.config.trainer.default_local_dir, f"global_step_{self.global_steps}"
        )
        self.checkpoint_callback.on_save(
            trainer=self, global_step=self.global_steps, checkpoint_dir=folder, async_save=False
        )

    def _update_actor(self, batch: DataProto) -> DataProto:
        if self.trace is not None:
            self.trace.append(
                StepTrace(
                    step=int(self.global_steps),
                    advantages=batch.batch["advantages"].clone(),
                    response_mask=batch.batch["response_mask"].clone(),
                    rewards=batch.batch["token_level_rewards"].sum(dim=-1),
                    prompt_ids=[
                        str((info or {}).get("id", ""))
                        for info in batch.non_tensor_batch.get("extra_info", [])
                    ],
                    uids=[str(uid) for uid in batch.non_tensor_batch["uid"]],
                )
            )
        return super()._update_actor(batch)

    def shutdown(self) -> None:
        """Kill this trainer's Ray actors and free its placement groups (the next run in the same
        Ray session needs the CPUs back)."""
        import ray  # heavy optional import (verl extra)
        from ray.util import remove_placement_group

        wg = getattr(self, "actor_rollout_wg", None)
        for actor in list(getattr(wg, "workers", []) or []):
            ray.kill(actor)
        manager = getattr(self, "reward_loop_manager", None)
        for actor in list(getattr(manager, "reward_loop_workers", []) or []):
            ray.kill(actor)
        for pool in self.resource_pool_manager.resource_pool_dict.values():
            for pg in pool.pgs or []:
                remove_placement_group(pg)
