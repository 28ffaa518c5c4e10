"""One ``RayPPOTrainer.fit()`` on CPU: verl's Hydra config with the CPU overrides, a local Ray
session, the trainer built as verl's ``main_ppo`` TaskRunner builds it, then ``fit()``.

:func:`run_fit` runs the trainer in the calling process; :class:`TaskRunner` runs it in a Ray actor,
as ``main_ppo`` does (what the smoke uses). The actor-rollout worker and verl's reward-loop worker
are Ray actors. Every Ray process imports :mod:`ebpo.lab.verl_cpu.shared.platform`
(``VERL_USE_EXTERNAL_MODULES``) and selects it (``VERL_PLATFORM``); the ebpo estimators arrive
through the ``verl.plugins`` entry point on ``import verl``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ebpo.integrations.verl.state import STORE
from ebpo.lab.verl_cpu.legacy.trainer import CPURayPPOTrainer
from ebpo.lab.verl_cpu.shared.platform import PLATFORM_NAME, cpu_platform
from ebpo.lab.verl_cpu.shared.results import (
    METRICS_LOG,
    RunResult,
    StepTrace,
    console_to,
    read_logged_metrics,
)
from ebpo.lab.verl_cpu.shared.run_spec import LOOP_OVERRIDES, RunSpec

__all__ = [
    "CPU_OVERRIDES",
    "TaskRunner",
    "compose_config",
    "ray_session",
    "run_fit",
    "start_task_runner",
]

PLATFORM_MODULE = "ebpo.lab.verl_cpu.shared.platform"

#: Hydra overrides that every CPU run adds to verl's ``ppo_trainer`` config (sizes come separately)
CPU_OVERRIDES = (
    *LOOP_OVERRIDES,
    "trainer.n_gpus_per_node=1",
    "+actor_rollout_ref.rollout.agent.agent_loop_manager_class=ebpo.lab.verl_cpu.legacy.rollout.CPURolloutManager",
    "+actor_rollout_ref.rollout.checkpoint_manager_class=ebpo.lab.verl_cpu.legacy.rollout.SharedWeightsCheckpointManager",
)


def compose_config(spec: RunSpec) -> Any:
    """verl's ``ppo_trainer`` config (Hydra compose) of the CPU run ``spec``: :data:`CPU_OVERRIDES`,
    the spec's overrides, one PPO mini-batch a step and the spec's ``extra`` (e.g. the
    estimator's ``algorithm.*`` keys) applied, resolved."""
    import verl  # heavy optional import (verl extra)
    from hydra import compose, initialize_config_dir  # heavy optional import (verl extra)
    from omegaconf import OmegaConf  # heavy optional import (verl extra)

    overrides = [
        *CPU_OVERRIDES,
        *spec.overrides(),
        f"actor_rollout_ref.actor.ppo_mini_batch_size={spec.batch_size}",
        # the CPU worker updates a mini-batch at once: one micro-batch per mini-batch
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={spec.rows}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={spec.rows}",
        *spec.extra,
    ]
    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose(config_name="ppo_trainer", overrides=overrides)
    OmegaConf.resolve(config)
    return config


#: the environment of every Ray worker of the CPU loop (the job's runtime env and each worker's)
WORKER_ENV = {
    "VERL_PLATFORM": PLATFORM_NAME,
    "VERL_USE_EXTERNAL_MODULES": PLATFORM_MODULE,
    "OMP_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_OFFLINE": "1",
}


@contextlib.contextmanager
def ray_session(num_cpus: int = 2) -> Iterator[None]:
    """A new local Ray instance with ``num_cpus`` CPUs, a 200 MB object store and no dashboard, whose
    workers import and select the CPU platform; the driver uses it too (:func:`cpu_platform`).
    Ray is shut down on exit, if this call started it."""
    import ray  # heavy optional import (verl extra)

    with cpu_platform():
        started = False
        if not ray.is_initialized():
            ray.init(
                # a new instance even when this machine runs a cluster (a `ray start`, or RAY_ADDRESS
                # set): the CPU loop is local, and Ray refuses num_cpus for a cluster it joins
                address="local",
                num_cpus=num_cpus,
                num_gpus=0,
                include_dashboard=False,
                object_store_memory=200 * 1024**2,
                runtime_env={"env_vars": dict(WORKER_ENV)},
                log_to_driver=False,
                configure_logging=False,
            )
            started = True
        try:
            yield
        finally:
            if started:
                ray.shutdown()


@contextlib.contextmanager
def _env(values: Mapping[str, str]) -> Iterator[None]:
    old = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run_fit(config: Any, *, sampler_factory: Any = None) -> RunResult:
    """Build the trainer as verl's ``TaskRunner`` does and run ``fit()``; inside :func:`ray_session`.

    ``sampler_factory(dataset, data_config)``: a ``Sampler`` for verl's train dataloader (the
    ``train_sampler`` argument of ``RayPPOTrainer``), e.g. ebpo's curriculum sampler. The process'
    estimator store is cleared first, as in a fresh TaskRunner process: whatever state the run
    uses comes from its own steps or from the checkpoint it resumes."""
    import time

    import ray  # heavy optional import (verl extra)
    from verl.single_controller.ray import RayWorkerGroup  # heavy optional import
    from verl.trainer.ppo.utils import Role, create_rl_dataset  # heavy optional import
    from verl.utils import hf_tokenizer  # heavy optional import

    from ebpo.lab.verl_cpu.shared.resources import CPUResourcePoolManager
    from ebpo.lab.verl_cpu.shared.worker import CPUActorRolloutWorker

    run_dir = str(Path(config.trainer.default_local_dir).parent)
    os.makedirs(run_dir, exist_ok=True)
    STORE.clear()
    tokenizer = hf_tokenizer(config.actor_rollout_ref.model.path)
    train_dataset = create_rl_dataset(config.data.train_files, config.data, tokenizer, None)
    val_dataset = create_rl_dataset(config.data.val_files, config.data, tokenizer, None)
    sampler = sampler_factory(train_dataset, config.data) if sampler_factory else None
    mapping = {Role.ActorRollout: "global_pool"}
    pools = CPUResourcePoolManager(
        resource_pool_spec={"global_pool": [config.trainer.n_gpus_per_node]}, mapping=mapping
    )
    trace: list[StepTrace] = []
    trainer = CPURayPPOTrainer(
        config=config,
        tokenizer=tokenizer,
        role_worker_mapping={Role.ActorRollout: ray.remote(CPUActorRolloutWorker)},
        resource_pool_manager=pools,
        ray_worker_group_cls=RayWorkerGroup,
        train_dataset=train_dataset,
        val_dataset=val_dataset,
        train_sampler=sampler,
        device_name="cpu",
        trace=trace,
        worker_env=WORKER_ENV,
    )
    start = time.perf_counter()
    log_path = os.path.join(run_dir, METRICS_LOG)
    try:
        with _env({"VERL_FILE_LOGGER_PATH": log_path}):
            trainer.init_workers()
            trainer.fit()
    finally:
        trainer.shutdown()
    checkpoints = sorted(
        str(p) for p in Path(config.trainer.default_local_dir).glob("global_step_*") if p.is_dir()
    )
    return RunResult(
        run_dir=run_dir,
        trace=trace,
        metrics=read_logged_metrics(log_path),
        estimator_state=STORE.state_dict(),
        seconds=time.perf_counter() - start,
        checkpoints=checkpoints,
    )


class TaskRunner:
    """The role of verl's ``main_ppo`` ``TaskRunner`` in the CPU loop: a Ray actor
    (:func:`start_task_runner`) that builds the trainer and runs ``fit()``. As in a verl job, the
    process computing advantages is then a Ray worker: ebpo's estimators reach it only through
    the ``verl.plugins`` entry point (``import verl``), and the estimator store, the checkpoint
    callback and the metrics side channel live there."""

    def registered(self, names: Sequence[str]) -> dict[str, str | None]:
        """``{name: module of the function verl's registry holds}`` in this process."""
        from verl.trainer.ppo import core_algos  # heavy optional import (verl extra)

        registry = core_algos.ADV_ESTIMATOR_REGISTRY
        return {name: getattr(registry.get(name), "__module__", None) for name in names}

    def run(self, config: Any, curriculum_sampler: bool, console: str | None) -> RunResult:
        """:func:`run_fit` here; with ebpo's ``CurriculumSampler`` (settings from
        ``data.curriculum``) as verl's train sampler if ``curriculum_sampler``; verl's stdout into
        ``console``."""
        from ebpo.integrations.verl.curriculum_sampler import CurriculumSampler

        factory = (
            (lambda dataset, data: CurriculumSampler(data_source=dataset, data_config=data))
            if curriculum_sampler
            else None
        )
        with console_to(console):
            return run_fit(config, sampler_factory=factory)


def start_task_runner() -> Any:
    """A :class:`TaskRunner` actor (inside :func:`ray_session`). It reserves no CPU: it only
    orchestrates (verl's reserves one; the 2-CPU session holds the worker and the reward worker)."""
    import ray  # heavy optional import (verl extra)

    return ray.remote(num_cpus=0)(TaskRunner).remote()
