"""verl's default trainer, ``PPOTrainerSync`` (v1, ``trainer.v1.trainer_mode=sync``), on CPU workers:
``trainer.v1.trainer_mode=ebpo_cpu_sync``.

verl 0.9.1's v1 trainer builds its workers in ``PPOTrainer._init_resource_pool_mgr`` from names it
hard-codes: ``ray.remote(ActorRolloutRefWorker)`` on a GPU ``ResourcePoolManager``. Neither can run
on a CPU:

* ``ActorRolloutRefWorker`` builds a ``TrainingWorker``, whose process group is
  ``init_process_group(backend=f"cpu:gloo,{device}:{backend}")`` (``verl.utils.distributed.
  initialize_global_process_group_ray``): on a CPU platform that is ``"cpu:gloo,cpu:gloo"``,
  which torch refuses ("Duplicate device type cpu"); and its FSDP engine imports trl's
  ``AutoModelForCausalLMWithValueHead``, which trl ≥ 1.0 no longer has, whenever trl is installed;
* ``ResourcePoolManager._check_resource_available`` counts only Ray's ``GPU``/``NPU`` resources.

verl offers one hook for a trainer class: ``register_trainer(name)``, selected by
``trainer.v1.trainer_mode`` in ``TaskRunnerV1.run``. :class:`CPUPPOTrainerSync` is registered there
as :data:`TRAINER_MODE`. It is ``PPOTrainerSync`` with ONE method replaced, ``_init_resource_pool_mgr``
(which worker class, which resource pool: the CPU worker of :mod:`~ebpo.lab.verl_cpu.shared.worker` on
:class:`~ebpo.lab.verl_cpu.legacy.trainer.CPUResourcePoolManager`), and its constructor sets
``trainer.v1.trainer_mode`` back to ``sync`` before verl's, so that every ``trainer_mode == "sync"``
branch of verl's trainer (replay buffer, refill, TransferQueue checkpoints) behaves as in a
``sync`` run. ``init()``/``_setup()``, ``fit()``, ``step()``, ``_compute_ref_log_prob``, ``_compute_advantage``,
``_balance_batch``, ``_validate``, ``_save_checkpoint`` and ``_load_checkpoint`` are verl's
(:data:`VERL_METHODS`, checked by the smoke).
"""

from __future__ import annotations

import os
import sys
from types import FrameType
from typing import Any

import ray
from omegaconf import open_dict

# verl is this module's base (a verl trainer): it needs the verl extra
from verl.trainer.ppo.utils import Role, need_critic, need_reference_policy
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from ebpo.lab.verl_cpu.shared.resources import CPUResourcePoolManager
from ebpo.lab.verl_cpu.shared.results import MANIFEST_FILE, TRACE_ENV
from ebpo.utils.files import write_json

__all__ = ["TRAINER_MODE", "VERL_METHODS", "CPUPPOTrainerSync"]

#: ``trainer.v1.trainer_mode`` that selects the CPU trainer
TRAINER_MODE = "ebpo_cpu_sync"
#: the methods of the trainer that must be verl's own (the smoke checks them on the class)
VERL_METHODS = (
    "init",
    "_setup",
    "fit",
    "step",
    "_step_once",
    "_balance_batch",
    "_compute_old_log_prob",
    "_compute_ref_log_prob",
    "_compute_advantage",
    "_update_actor",
    "_validate",
    "_save_checkpoint",
    "_load_checkpoint",
    "on_init_end",
    "on_step_end",
    "on_sample_end",
)


@register_trainer(TRAINER_MODE)
class CPUPPOTrainerSync(PPOTrainerSync):
    """verl's ``PPOTrainerSync`` with CPU workers (see module docstring)."""

    def __init__(self, config: Any) -> None:
        with open_dict(config):
            config.trainer.v1.trainer_mode = "sync"
        super().__init__(config)

    def _init_resource_pool_mgr(self) -> None:
        config = self.config
        for what, needed in (
            ("a critic (adv_estimator=gae)", need_critic(config)),
            ("a reward model", bool(config.reward.reward_model.enable)),
        ):
            if needed:
                raise ValueError(
                    f"the CPU trainer runs the actor and its reference policy only; this config needs {what}"
                )
        # imported here, not at the top: the worker's module imports verl, whose import loads
        # this module (VERL_USE_EXTERNAL_MODULES) - a cycle when a worker process starts
        from ebpo.lab.verl_cpu.shared.worker import CPUActorRolloutWorker

        # verl's own choice of role (PPOTrainer._init_resource_pool_mgr): with a reference policy
        # the hybrid worker is ActorRolloutRef, and verl's _setup makes it the ref worker group too
        role = Role.ActorRolloutRef if need_reference_policy(config) else Role.ActorRollout
        self.role_worker_mapping = {role: ray.remote(CPUActorRolloutWorker)}
        self.mapping = {role: "global_pool", Role.RewardModel: "global_pool"}
        config.reward.reward_model.nnodes = config.trainer.nnodes
        config.reward.reward_model.n_gpus_per_node = config.trainer.n_gpus_per_node
        self.resource_pool_manager = CPUResourcePoolManager(
            resource_pool_spec={
                "global_pool": [config.trainer.n_gpus_per_node] * config.trainer.nnodes
            },
            mapping=self.mapping,
        )
        write_manifest(self)


def write_manifest(trainer: Any) -> None:
    """With ``EBPO_CPU_TRACE_DIR`` set: record which classes run this job (the smoke checks that
    they are verl's), as :data:`~ebpo.lab.verl_cpu.shared.results.MANIFEST_FILE` in that directory."""
    directory = os.environ.get(TRACE_ENV)
    if not directory:
        return
    cls = type(trainer)
    methods = {
        name: f"{getattr(cls, name).__module__}.{getattr(cls, name).__qualname__}"
        for name in VERL_METHODS
    }
    try:
        ray.get_actor("TransferQueueController", namespace="transfer_queue")
        transfer_queue = True
    except ValueError:
        transfer_queue = False
    manifest = {
        "task_runner": _task_runner(),
        "trainer_class": f"{cls.__module__}.{cls.__qualname__}",
        "trainer_bases": [f"{c.__module__}.{c.__qualname__}" for c in cls.__mro__[1:-1]],
        "trainer_mode": str(trainer.config.trainer.v1.trainer_mode),
        "parameter_sync_step": int(trainer.parameter_sync_step),
        "methods": methods,
        "replay_buffer": f"{type(trainer.replay_buffer).__module__}.{type(trainer.replay_buffer).__qualname__}",
        "transfer_queue_controller": transfer_queue,
        "use_v1": bool(trainer.config.trainer.get("use_v1", False)),
    }
    write_json(os.path.join(directory, MANIFEST_FILE), manifest, indent=1)


def _task_runner() -> dict[str, str] | None:
    """The class of the Ray actor whose ``run`` built this trainer (verl's ``TaskRunnerV1``) and
    the file it is defined in (its module is ``main_ppo`` when ``main_ppo`` runs as ``-m``)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self")
        if frame.f_code.co_name == "run" and owner is not None:
            return {"class": type(owner).__qualname__, "file": frame.f_code.co_filename}
        frame = frame.f_back
    return None
