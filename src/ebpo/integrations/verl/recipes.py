"""The paper's verl runs as Hydra override lists, as the authors ran them (their verl scripts).

Common to all: Qwen3-8B on DAPO-Math-17K, G = 4 responses per prompt, 512 prompts per step, PPO
mini-batch 128, lr 1e-6, weight decay 0.01, KL loss 1e-3 (low_var_kl), token-mean loss, clip 0.2,
max prompt 4096 / response 8192 tokens, FSDP2 actor, vLLM rollout, 4 nodes × 8 GPUs; validation on
AIME 2024 with 8 samples per problem every 5 steps and before training; 20 epochs, a checkpoint
every 10 steps.

| recipe | what differs |
| --- | --- |
| ``ebpo`` | ``adv_estimator=ebpo``, batch prior, the dataset's own order, no shuffling (the paper's "naive" EBPO) |
| ``ebpo_topic`` | ``ebpo``, stream sorted by topic, no shuffling |
| ``ebpo_diff`` | ``ebpo``, one epoch easy → hard, no shuffling |
| ``grpo`` | ``adv_estimator=grpo``, shuffled |
| ``dr_grpo`` | ``grpo`` without std division (token-mean loss, as the authors ran it) |
| ``dapo`` | clip-high 0.28, group filtering on ``acc``, overlong buffer 4096 (penalty 1.0), no std division, KL kept |
| ``entropy_mech`` | Clip-Cov (ratio 2e-4, bounds [1, 5]) with PPO clipping opened to [0, 2], no KL loss |

The EBPO recipes use ``algorithm.ebpo.prior=batch`` and ``algorithm.ebpo.prior_mean_from=group_means``:
the paper's numbers come from the authors' verl fork, whose Welford statistics are created inside
the advantage function, so the prior is the current batch (512 prompts) and μ the mean of its
group means — which is also what makes the topic-sorted stream matter (each
batch's prior is its topic's mean, Prop. 3.8). The paper's text describes a whole-history prior;
pass ``+algorithm.ebpo.prior=history +algorithm.ebpo.prior_mean_from=rewards`` (or ``prior=ema``) to
run that instead.

Every deliberate difference from the authors' scripts is listed, with its reason, in
``recipes/verl/README.md`` ("Differences from the authors' scripts").

Each recipe reads its training file ``<data_dir>/dapo_math_17k.<order>.parquet`` (written by
``ebpo verl prepare-data``) and validates on ``<data_dir>/aime24.parquet``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TypedDict

__all__ = [
    "EVAL_SETS",
    "PAPER",
    "RECIPES",
    "PaperSettings",
    "VAL_SETS",
    "Recipe",
    "recipe_overrides",
    "train_file",
    "val_files",
]

#: evaluation sets of the paper, file stems written by ``ebpo verl prepare-data``
EVAL_SETS = ("math500", "aime24", "aime25", "amc23", "olympiadbench")
#: the sets verl validates on during training (the authors': AIME 2024 only); the paper's table
#: comes from evaluating the final checkpoint on all of EVAL_SETS (``ebpo eval``)
VAL_SETS = ("aime24",)
TRAIN_STEM = "dapo_math_17k"


class PaperSettings(TypedDict):
    """The paper's run settings (the authors' verl scripts), one typed entry per key."""

    model: str
    group_size: int
    train_batch_size: int
    ppo_mini_batch_size: int
    lr: float
    weight_decay: float
    kl_loss_coef: float
    max_prompt_length: int
    max_response_length: int
    nnodes: int
    n_gpus_per_node: int
    val_samples: int
    test_freq: int
    save_freq: int
    total_epochs: int


PAPER: PaperSettings = {
    "model": "Qwen/Qwen3-8B",
    "group_size": 4,
    "train_batch_size": 512,
    "ppo_mini_batch_size": 128,
    "lr": 1e-6,
    "weight_decay": 0.01,
    "kl_loss_coef": 1e-3,
    "max_prompt_length": 4096,
    "max_response_length": 8192,
    "nnodes": 4,
    "n_gpus_per_node": 8,
    # the authors' scripts
    "val_samples": 8,
    "test_freq": 5,
    "save_freq": 10,
    "total_epochs": 20,
}


@dataclass(frozen=True)
class Recipe:
    """One paper run: a description, the data order it needs and its own overrides.

    ``order``: which prepared training file it reads — ``file`` (the dataset's own order),
    ``shuffle``, ``topic`` or ``difficulty``. Only ``shuffle`` is reshuffled by verl every epoch;
    the others reach the trainer in file order (``data.shuffle=False``).
    """

    name: str
    description: str
    order: str
    overrides: tuple[str, ...] = field(default_factory=tuple)


def _common(model: str, data_dir: str, order: str, project: str, experiment: str) -> list[str]:
    p = PAPER
    shuffle = order == "shuffle"  # every other order must reach the trainer as written
    return [
        f"data.train_files={train_file(data_dir, order)}",
        f"data.val_files=[{','.join(val_files(data_dir))}]",
        "data.prompt_key=prompt",
        f"data.train_batch_size={p['train_batch_size']}",
        f"data.max_prompt_length={p['max_prompt_length']}",
        f"data.max_response_length={p['max_response_length']}",
        "data.filter_overlong_prompts=True",
        "data.truncation=error",
        f"data.shuffle={shuffle}",
        f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.model.use_remove_padding=True",
        "actor_rollout_ref.model.enable_gradient_checkpointing=True",
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.ref.strategy=fsdp2",
        f"actor_rollout_ref.actor.optim.lr={p['lr']}",
        f"actor_rollout_ref.actor.optim.weight_decay={p['weight_decay']}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={p['ppo_mini_batch_size']}",
        "actor_rollout_ref.actor.use_dynamic_bsz=True",
        f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={2 * (p['max_prompt_length'] + p['max_response_length'])}",
        "actor_rollout_ref.actor.use_kl_loss=True",
        f"actor_rollout_ref.actor.kl_loss_coef={p['kl_loss_coef']}",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
        "actor_rollout_ref.actor.loss_agg_mode=token-mean",
        "actor_rollout_ref.actor.clip_ratio_low=0.2",
        "actor_rollout_ref.actor.clip_ratio_high=0.2",
        "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.rollout.n={p['group_size']}",
        "actor_rollout_ref.rollout.temperature=1.0",
        "actor_rollout_ref.rollout.top_p=1.0",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.7",
        "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True",
        "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=True",
        # Validation as the authors ran it (AIME 2024, 8 samples), but sampled at the paper's
        # evaluation temperature: verl's default (temperature 0) would repeat one greedy answer 8 times.
        f"actor_rollout_ref.rollout.val_kwargs.n={p['val_samples']}",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=True",
        "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
        "actor_rollout_ref.rollout.val_kwargs.top_p=1.0",
        "algorithm.use_kl_in_reward=False",
        "reward.custom_reward_function.path=pkg://ebpo.integrations.verl.reward",
        "reward.custom_reward_function.name=compute_score",
        f"trainer.nnodes={p['nnodes']}",
        f"trainer.n_gpus_per_node={p['n_gpus_per_node']}",
        "trainer.logger=[console,tensorboard]",
        f"trainer.project_name={project}",
        f"trainer.experiment_name={experiment}",
        f"trainer.save_freq={p['save_freq']}",
        f"trainer.test_freq={p['test_freq']}",
        "trainer.val_before_train=True",
        f"trainer.total_epochs={1 if order == 'difficulty' else p['total_epochs']}",
        "trainer.resume_mode=auto",
    ]


#: the prior of the authors' released code (see module docstring): the current batch, with μ the
#: mean of the group means (their code; the mean of all rewards differs when group sizes do)
EBPO_OVERRIDES = (
    "algorithm.adv_estimator=ebpo",
    "+algorithm.ebpo.prior=batch",
    "+algorithm.ebpo.prior_mean_from=group_means",
)

RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe(
            "ebpo",
            "EBPO, the dataset's own order, no shuffling (paper's 'naive' EBPO)",
            "file",
            EBPO_OVERRIDES,
        ),
        Recipe(
            "ebpo_topic",
            "EBPO on a topic-sorted stream (the paper's headline EBPO-topic)",
            "topic",
            EBPO_OVERRIDES,
        ),
        Recipe("ebpo_diff", "EBPO, one epoch easy -> hard", "difficulty", EBPO_OVERRIDES),
        Recipe("grpo", "GRPO baseline", "shuffle", ("algorithm.adv_estimator=grpo",)),
        Recipe(
            "dr_grpo",
            "Dr. GRPO: no std normalisation (token-mean loss, as the authors ran it)",
            "shuffle",
            ("algorithm.adv_estimator=grpo", "algorithm.norm_adv_by_std_in_grpo=False"),
        ),
        Recipe(
            "dapo",
            "DAPO: clip-higher 0.28, group filtering on acc, overlong buffer 4096, no std normalisation",
            "shuffle",
            (
                "algorithm.adv_estimator=grpo",
                "algorithm.norm_adv_by_std_in_grpo=False",
                "actor_rollout_ref.actor.clip_ratio_high=0.28",
                "algorithm.filter_groups.enable=True",
                "algorithm.filter_groups.metric=acc",
                "reward.reward_manager.name=dapo",
                "+reward.reward_kwargs.overlong_buffer_cfg.enable=True",
                "+reward.reward_kwargs.overlong_buffer_cfg.len=4096",
                "+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0",
                "+reward.reward_kwargs.overlong_buffer_cfg.log=False",
                f"+reward.reward_kwargs.max_resp_len={PAPER['max_response_length']}",
            ),
        ),
        Recipe(
            "entropy_mech",
            "EntropyMech (Cui et al.): Clip-Cov, PPO clipping opened, no KL loss",
            "shuffle",
            (
                "algorithm.adv_estimator=grpo",
                "actor_rollout_ref.actor.use_kl_loss=False",
                "actor_rollout_ref.actor.clip_ratio_low=1.0",
                "actor_rollout_ref.actor.clip_ratio_high=1.0",
                "actor_rollout_ref.actor.clip_ratio_c=10.0",
                "actor_rollout_ref.actor.policy_loss.loss_mode=clip_cov",
                "actor_rollout_ref.actor.policy_loss.clip_cov_ratio=0.0002",
                "actor_rollout_ref.actor.policy_loss.clip_cov_lb=1.0",
                "actor_rollout_ref.actor.policy_loss.clip_cov_ub=5.0",
            ),
        ),
    )
}


def train_file(data_dir: str, order: str) -> str:
    """``<data_dir>/dapo_math_17k.<order>.parquet``."""
    return os.path.join(data_dir, f"{TRAIN_STEM}.{order}.parquet")


def val_files(data_dir: str) -> list[str]:
    """The validation files of the recipes (:data:`VAL_SETS`)."""
    return [os.path.join(data_dir, f"{name}.parquet") for name in VAL_SETS]


def recipe_overrides(
    name: str,
    *,
    data_dir: str = "data/ebpo",
    model: str = PAPER["model"],
    project: str = "ebpo",
    experiment: str | None = None,
    extra: list[str] | tuple[str, ...] = (),
) -> list[str]:
    """The full override list of recipe ``name``; ``extra`` overrides come last and win.

    An extra override of a key the recipe sets replaces the recipe's entry (so
    ``+algorithm.ebpo.prior=history`` works although the recipe already adds that key; Hydra
    itself would refuse to add a key twice).

    Raises:
        ValueError: unknown recipe name.
    """
    if name not in RECIPES:
        raise ValueError(f"unknown recipe {name!r}; expected one of {sorted(RECIPES)}")
    recipe = RECIPES[name]
    common = _common(model, data_dir, recipe.order, project, experiment or f"{name}-qwen3-8b-g4")
    replaced = {_override_key(o) for o in extra}
    return [*(o for o in (*common, *recipe.overrides) if _override_key(o) not in replaced), *extra]


def _override_key(override: str) -> str:
    """``a.b`` for ``a.b=v``, ``+a.b=v``, ``++a.b=v`` and ``~a.b``."""
    return override.split("=", 1)[0].lstrip("+~")
