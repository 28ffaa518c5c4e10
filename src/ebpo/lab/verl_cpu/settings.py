"""The settings of ``ebpo verl smoke`` (checked before anything slow is imported): which estimator
configurations it runs (:data:`ESTIMATORS`), its sizes (:class:`SmokeSettings`) and the shape of
its results (:class:`Check`). Imports nothing from verl."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ebpo.integrations.verl.recipes import EBPO_OVERRIDES
from ebpo.lab.cpu_task.task import fixed_problems
from ebpo.utils.checks import check_int, check_positive_int

__all__ = [
    "ESTIMATORS",
    "LOOP_OVERRIDES",
    "MIN_STEPS",
    "TIERS",
    "TRAINERS",
    "WORK_DIR_MARKER",
    "Check",
    "EstimatorRun",
    "SmokeSettings",
    "check_work_dir",
    "run_overrides",
    "training_problems",
]


#: the trainers the smoke can run: verl's default (v1 ``PPOTrainerSync`` through ``main_ppo``) and
#: the deprecated ``RayPPOTrainer``
TRAINERS = ("v1", "legacy")
#: the shortest smoke: one step before the checkpoint, two after it (:meth:`SmokeSettings.of_length`)
MIN_STEPS = 3
#: the task cells of the CPU loop: one-digit problems of every topic
TIERS = (1,)
#: more than any one-digit cell holds: ``fixed_problems`` then gives all of a cell's problems
_WHOLE_CELL = 100


def training_problems() -> int:
    """How many distinct problems the task's training split has in :data:`TIERS` (191): the most
    one epoch can hold, since ``ebpo verl prepare-data`` (DAPO-Math-17K's loader) drops repeated
    prompts."""
    return len(fixed_problems("train", _WHOLE_CELL, tiers=TIERS))


#: the Hydra overrides that both trainers' CPU runs add to verl's ``ppo_trainer`` config: the
#: loop's settings (validation first, one epoch, checkpoints saved with ebpo's callback, data in
#: file order), the actor's PPO settings and ebpo's reward; each trainer adds its own pieces
#: (:data:`ebpo.lab.verl_cpu.launch.V1_OVERRIDES`, :data:`ebpo.lab.verl_cpu.run.CPU_OVERRIDES`)
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


def run_overrides(
    *,
    model_path: str,
    train_file: str,
    val_file: str,
    run_dir: str,
    total_steps: int,
    save_freq: int,
    batch_size: int,
    group_size: int,
    lr: float,
    max_prompt_length: int,
    max_response_length: int,
    seed: int,
    resume_from: str | None,
) -> list[str]:
    """The overrides of one CPU run that come from its files and sizes, the same for both
    trainers: data, model, learning rate, samples per prompt, steps, checkpoints (in
    ``run_dir/checkpoints``) and where to resume from (``None``: a fresh run). Each trainer adds its
    own batch splits."""
    resume = (
        ["trainer.resume_mode=resume_path", f"trainer.resume_from_path={resume_from}"]
        if resume_from
        else ["trainer.resume_mode=disable"]
    )
    return [
        f"data.train_files={train_file}",
        f"data.val_files={val_file}",
        f"data.train_batch_size={batch_size}",
        f"data.max_prompt_length={max_prompt_length}",
        f"data.max_response_length={max_response_length}",
        f"actor_rollout_ref.model.path={model_path}",
        f"actor_rollout_ref.actor.optim.lr={lr}",
        f"actor_rollout_ref.rollout.n={group_size}",
        f"actor_rollout_ref.rollout.seed={seed}",
        f"trainer.total_training_steps={total_steps}",
        f"trainer.save_freq={save_freq}",
        f"trainer.default_local_dir={os.path.join(run_dir, 'checkpoints')}",
        "trainer.project_name=ebpo-verl-cpu",
        f"trainer.experiment_name={Path(run_dir).name}",
        *resume,
    ]


#: written into a work directory the smoke uses; it clears and rewrites its runs only where it is
WORK_DIR_MARKER = ".ebpo-verl-smoke"


def check_work_dir(path: str | Path) -> None:
    """Refuse (ValueError naming ``--work-dir``) a directory that holds files and is not one the
    smoke wrote before: it clears its run folders there, and a user's files must never be among
    them. Creates and changes nothing."""
    work = Path(path).expanduser()
    if work.is_dir() and any(work.iterdir()) and not (work / WORK_DIR_MARKER).is_file():
        raise ValueError(
            f"--work-dir {str(path)!r} holds files that ebpo verl smoke did not write; "
            "give an empty or new directory (or leave --work-dir out for a temporary one)"
        )


@dataclass(frozen=True)
class EstimatorRun:
    """One estimator configuration of the smoke: its Hydra overrides, the training file order it
    reads and whether ebpo's curriculum sampler feeds verl's dataloader (legacy trainer only:
    verl 0.9.1's v1 trainer builds its sampler with ``create_rl_sampler``, which knows only
    sequential and random sampling, so there the topic order comes from the topic-sorted file, as
    in the ``ebpo_topic`` recipe)."""

    name: str
    registry_name: str  # verl's adv_estimator (the prefix of its metrics)
    overrides: tuple[str, ...]
    order: str = "file"
    curriculum_sampler: bool = False
    description: str = ""
    topic_order: bool = False  # the prompts must come in topic blocks

    def for_trainer(self, trainer: str) -> EstimatorRun:
        """This configuration as the given trainer runs it (see class docstring)."""
        if trainer == "v1" and self.curriculum_sampler:
            overrides = tuple(o for o in self.overrides if not o.startswith("+data.curriculum."))
            return replace(self, overrides=overrides, order="topic", curriculum_sampler=False)
        return self


ESTIMATORS: dict[str, EstimatorRun] = {
    run.name: run
    for run in (
        EstimatorRun(
            "ebpo",
            "ebpo",
            ("algorithm.adv_estimator=ebpo",),
            description="EBPO, whole-history prior (state across steps)",
        ),
        EstimatorRun(
            "jspo_plus_plus",
            "jspo_plus_plus",
            ("algorithm.adv_estimator=jspo_plus_plus", "+algorithm.ebpo.smooth_coef=0.9"),
            description="JSPO++, smoothing 0.9 (state across steps)",
        ),
        EstimatorRun(
            "ebpo_topic",
            "ebpo",
            (*EBPO_OVERRIDES, "+data.curriculum.order=topic", "+data.curriculum.seed=0"),
            order="shuffle",
            curriculum_sampler=True,
            topic_order=True,
            description="the ebpo_topic recipe's estimator and topic order, resumed mid-epoch "
            "(legacy: ebpo's CurriculumSampler in verl's dataloader; v1: the topic-sorted file)",
        ),
    )
}


@dataclass(frozen=True)
class SmokeSettings:
    """Sizes of the smoke (defaults: ~10 s of training per run on one CPU core)."""

    work_dir: str
    estimators: tuple[str, ...] = ("ebpo",)
    trainer: str = "v1"
    steps: int = 4
    save_step: int = 2
    batch_size: int = 4
    group_size: int = 4
    train_size: int = 16  # one epoch of 4 steps: the resume at step 2 is mid-epoch
    val_size: int = 6
    max_response_length: int = 12
    warm_steps: int = 800
    seed: int = 0
    cache: str | None = (
        None  # warm-start cache (None: ebpo's cache, ebpo.lab.cpu_task.policy.cache_dir)
    )
    verbose: bool = False  # show verl's console output instead of writing it to a file
    #: v1: every ``short_group_every``-th prompt gets one sample fewer (verl's ``__rollout_n__``),
    #: so a step has an odd number of rows and verl's ``_balance_batch`` adds a padding row for
    #: the 2 data-parallel ranks (0: every prompt gets ``group_size``)
    short_group_every: int = 4
    timeout: float = 900.0  # seconds for one v1 run (main_ppo) before it is killed

    @classmethod
    def of_length(cls, steps: int, **settings: Any) -> SmokeSettings:
        """A smoke of ``steps`` training steps (``ebpo verl smoke --steps``): one epoch of exactly
        ``steps × batch_size`` prompts, the checkpoint two steps before the end, so the resumed
        run repeats the last 2 steps (the defaults are ``of_length(4)``). ValueError naming
        ``--steps`` if it leaves no step before that checkpoint."""
        check_int("--steps", steps, low=MIN_STEPS)
        batch_size = settings.get("batch_size", cls.batch_size)
        return cls(steps=steps, save_step=steps - 2, train_size=steps * batch_size, **settings)

    def check(self) -> None:
        """ValueError naming the first bad setting."""
        if self.trainer not in TRAINERS:
            raise ValueError(
                f"--trainer must be one of {', '.join(TRAINERS)}; got {self.trainer!r}"
            )
        unknown = [name for name in self.estimators if name not in ESTIMATORS]
        if not self.estimators or unknown:
            raise ValueError(
                f"--estimator must be some of {', '.join(ESTIMATORS)}; got {list(self.estimators)}"
            )
        for name in ("steps", "save_step", "batch_size", "train_size", "val_size", "warm_steps"):
            check_positive_int(f"--{name.replace('_', '-')}", getattr(self, name))
        check_int("--group-size", self.group_size, low=2)
        if not self.save_step < self.steps:
            raise ValueError(
                f"--save-step must be below --steps (a resume needs steps after the checkpoint); "
                f"got {self.save_step} and {self.steps}"
            )
        if self.train_size < self.steps * self.batch_size:
            raise ValueError(
                f"--train-size must hold --steps × --batch-size = {self.steps * self.batch_size} "
                f"prompts (one epoch); got {self.train_size}"
            )
        available = training_problems()
        if self.train_size > available:
            raise ValueError(
                f"--steps {self.steps} needs {self.train_size} distinct prompts (one epoch of "
                f"{self.steps} steps × {self.batch_size}); the arithmetic task has {available}: "
                f"at most --steps {available // self.batch_size}"
            )


@dataclass(frozen=True)
class Check:
    """One checked claim: ``name`` (what), ``ok``, ``detail`` (the evidence)."""

    name: str
    ok: bool
    detail: str
