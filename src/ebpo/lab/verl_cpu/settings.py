"""The settings of ``ebpo verl smoke`` (checked before anything slow is imported): which estimator
configurations it runs (:data:`ESTIMATORS`, and the paper's recipes: :func:`recipe_run`), its
sizes (:class:`SmokeSettings`) and the shape of its results (:class:`Check`). Imports nothing from
verl."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ebpo.integrations.verl.advantage import plugin_names
from ebpo.integrations.verl.recipes import EBPO_OVERRIDES, RECIPES, recipe_overrides
from ebpo.lab.verl_cpu.shared.task import training_problems
from ebpo.utils.checks import check_int, check_positive_int

__all__ = [
    "AGENT_LOOPS",
    "ESTIMATORS",
    "MIN_STEPS",
    "RESUME_MODES",
    "TRAINERS",
    "WORK_DIR_MARKER",
    "Check",
    "EstimatorRun",
    "SmokeSettings",
    "check_work_dir",
    "recipe_run",
    "recipe_smoke_overrides",
]


#: the trainers the smoke can run: verl's default (v1 ``PPOTrainerSync`` through ``main_ppo``) and
#: the deprecated ``RayPPOTrainer``
TRAINERS = ("v1", "legacy")
#: the agent loops the v1 runs can use: ``single_turn`` (one answer a session) and ``two_output``
#: (each session answers twice, the second answer scores; one empty and one failing session
#: injected in the first step and the first step after the checkpoint)
AGENT_LOOPS = ("single_turn", "two_output")
#: how the smoke's second run resumes: ``auto`` is verl's default (``trainer.resume_mode=auto``, a
#: relative ``trainer.default_local_dir``, the run started again where its checkpoints are);
#: ``resume_path`` names run A's checkpoint folder (``trainer.resume_from_path``)
RESUME_MODES = ("auto", "resume_path")
#: the shortest smoke: one step before the checkpoint, two after it (:meth:`SmokeSettings.of_length`)
MIN_STEPS = 3
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
    recipe: str | None = None  # the recipe of `ebpo verl recipe --list` it runs, if any
    replaced: tuple[str, ...] = ()  # the recipe's overrides the CPU loop replaces

    @property
    def ours(self) -> bool:
        """Whether the estimator is one of ebpo's (it logs ``<name>/*`` and carries a state)."""
        return self.registry_name in plugin_names()

    @property
    def metric_prefixes(self) -> tuple[str, ...]:
        """The logged metrics a resumed run must repeat exactly: the estimator's own
        (``<name>/*``, ebpo's estimators only) and, for a recipe, verl's ``actor/*`` (its losses,
        the KL loss included)."""
        own = (self.registry_name,) if self.ours else ()
        return (*own, "actor") if self.recipe else own

    @property
    def shuffled(self) -> bool:
        """Whether verl's dataloader reshuffles the prompts (``data.shuffle=True``, a recipe's)."""
        return _last_value(self.overrides, "data.shuffle") == "True"

    @property
    def kl_loss(self) -> bool:
        """Whether the run trains with verl's KL loss against the reference policy."""
        return _last_value(self.overrides, "actor_rollout_ref.actor.use_kl_loss") == "True"

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


#: the sections of a recipe the smoke keeps (every algorithm and actor key: the estimator, the
#: policy loss, KL loss and entropy; the reward manager), less :data:`RECIPE_REPLACED`
RECIPE_KEPT = (
    "algorithm.",
    "actor_rollout_ref.actor.",
    "actor_rollout_ref.ref.",
    "actor_rollout_ref.rollout.temperature",
    "actor_rollout_ref.rollout.top_p",
    "actor_rollout_ref.rollout.val_kwargs.",
    "reward.",
    "data.shuffle",
)
#: what a CPU cannot do as the recipe says: the engine (FSDP2 strategy, vLLM, token budgets per
#: GPU, dynamic batches) and the sizes of an 8-GPU × 4-node run (mini-batch, validation samples,
#: the 8B model's learning rate: the tiny model would not move in 4 steps)
RECIPE_REPLACED = (
    "actor_rollout_ref.actor.strategy",
    "actor_rollout_ref.ref.strategy",
    "actor_rollout_ref.actor.use_dynamic_bsz",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
    "actor_rollout_ref.ref.log_prob_use_dynamic_bsz",
    "actor_rollout_ref.actor.ppo_mini_batch_size",
    "actor_rollout_ref.actor.optim.lr",
    "actor_rollout_ref.rollout.val_kwargs.n",
    "reward.reward_kwargs.max_resp_len",
)


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def _last_value(overrides: tuple[str, ...], key: str) -> str | None:
    values = [o.split("=", 1)[1] for o in overrides if "=" in o and _key(o) == key]
    return values[-1] if values else None


def recipe_smoke_overrides(name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(kept, replaced)``: the overrides of recipe ``name`` (``ebpo verl recipe NAME --print``)
    that the CPU loop keeps — every ``algorithm.*`` and actor key, the reference policy's, the
    sampling temperature, the reward manager, ``data.shuffle`` — and those it replaces (data
    files and sizes, model, rollout engine, strategy, the trainer's nodes, logging and
    checkpoint cadence: :data:`RECIPE_REPLACED` and everything outside :data:`RECIPE_KEPT`).

    Raises:
        ValueError: an unknown recipe name.
    """
    kept: list[str] = []
    replaced: list[str] = []
    for override in recipe_overrides(name):
        key = _key(override)
        keep = key.startswith(RECIPE_KEPT) and key not in RECIPE_REPLACED
        (kept if keep else replaced).append(override)
    return tuple(kept), tuple(replaced)


def recipe_run(name: str) -> EstimatorRun:
    """Recipe ``name`` as one of the smoke's runs (see :func:`recipe_smoke_overrides`): its
    estimator, its data order, its kept overrides last (they win over the CPU loop's)."""
    kept, replaced = recipe_smoke_overrides(name)
    recipe = RECIPES[name]
    estimator = _last_value(kept, "algorithm.adv_estimator") or "gae"
    return EstimatorRun(
        f"recipe_{name}",
        estimator,
        kept,
        order=recipe.order,
        description=f"the {name} recipe ({recipe.description}) with the CPU's model and sizes",
        recipe=name,
        replaced=replaced,
    )


@dataclass(frozen=True)
class SmokeSettings:
    """Sizes of the smoke (defaults: ~10 s of training per run on one CPU core)."""

    work_dir: str
    estimators: tuple[str, ...] = ("ebpo",)
    recipes: tuple[str, ...] = ()  # recipes of `ebpo verl recipe --list` (recipe_run)
    trainer: str = "v1"
    resume_mode: str = "auto"
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
    #: v1: verl's sub-steps (``trainer.v1.sync.parameter_sync_step``): that many estimator calls
    #: and actor updates a step, each on ``batch_size / parameter_sync_step`` prompts
    parameter_sync_step: int = 1
    agent_loop: str = "single_turn"  # AGENT_LOOPS (v1 only)

    @property
    def short_groups(self) -> int:
        """``short_group_every`` of the data: 0 with ``two_output``, whose groups are shortened by
        its failing sessions alone (a short group would count as missing sessions)."""
        return self.short_group_every if self.agent_loop == "single_turn" else 0

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
        if self.resume_mode not in RESUME_MODES:
            raise ValueError(
                f"--resume-mode must be one of {', '.join(RESUME_MODES)}; got {self.resume_mode!r}"
            )
        unknown = [name for name in self.estimators if name not in ESTIMATORS]
        if not (self.estimators or self.recipes) or unknown:
            raise ValueError(
                f"--estimator must be some of {', '.join(ESTIMATORS)}; got {list(self.estimators)}"
            )
        unknown = [name for name in self.recipes if name not in RECIPES]
        if unknown:
            raise ValueError(f"--recipe must be some of {', '.join(RECIPES)}; got {unknown}")
        self._check_agent_loop()
        if self.recipes and self.trainer != "v1":
            raise ValueError(
                "--recipe runs on verl's default trainer (--trainer v1) only: the legacy CPU "
                "trainer has no reference policy, which the recipes' KL loss needs"
            )
        for name in ("steps", "save_step", "batch_size", "train_size", "val_size", "warm_steps"):
            check_positive_int(f"--{name.replace('_', '-')}", getattr(self, name))
        check_int("--group-size", self.group_size, low=2)
        check_positive_int("--parameter-sync-step", self.parameter_sync_step)
        if self.parameter_sync_step > 1 and self.trainer != "v1":
            raise ValueError(
                "--parameter-sync-step runs verl's sub-steps, which only the v1 trainer has "
                "(--trainer v1)"
            )
        if self.batch_size % self.parameter_sync_step:
            raise ValueError(
                f"--parameter-sync-step must divide the batch of {self.batch_size} prompts; "
                f"got {self.parameter_sync_step}"
            )
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

    def _check_agent_loop(self) -> None:
        if self.agent_loop not in AGENT_LOOPS:
            raise ValueError(
                f"--agent-loop must be one of {', '.join(AGENT_LOOPS)}; got {self.agent_loop!r}"
            )
        if self.agent_loop == "single_turn":
            return
        if self.trainer != "v1":
            raise ValueError(
                f"--agent-loop {self.agent_loop} runs on verl's default trainer (--trainer v1) "
                "only: the legacy trainer has no agent loop"
            )
        if self.recipes:
            raise ValueError(
                f"--agent-loop {self.agent_loop} runs the estimators, not --recipe: a recipe's KL "
                "checks need one PPO mini-batch a step, and two outputs a session make two"
            )
        if self.batch_size < 2:
            raise ValueError(
                f"--agent-loop {self.agent_loop} needs --batch-size >= 2 (an empty and a failing "
                f"session on two prompts of a step); got {self.batch_size}"
            )

    def runs(self) -> list[EstimatorRun]:
        """The runs of the smoke: the estimator configurations, then the recipes."""
        runs = [ESTIMATORS[name].for_trainer(self.trainer) for name in self.estimators]
        return runs + [recipe_run(name) for name in self.recipes]


@dataclass(frozen=True)
class Check:
    """One checked claim: ``name`` (what), ``ok``, ``detail`` (the evidence)."""

    name: str
    ok: bool
    detail: str
