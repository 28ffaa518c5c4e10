"""`EBPOTrainer`: TRL's `GRPOTrainer` with advantages from an `ebpo` estimator.

How it plugs into TRL 1.16.0 without copying TRL's 600-line ``_generate_and_score_completions``
(TRL has no advantage hook yet: issue #4525, PR #7298):

1. ``_calculate_rewards`` is wrapped: TRL's version gathers the ``(N, num_reward_funcs)`` rewards of
   the whole generation batch from all processes; the wrapper keeps a reference to that tensor
   (and gathers the ``cluster_column`` values of the completions, if asked).
2. ``_generate_and_score_completions`` calls TRL's, then recomputes the advantages with the
   estimator from the kept rewards: TRL's weighted sum per completion (NaN where every reward
   function returned None, which the estimator masks), groups = contiguous blocks of
   ``num_generations``. Every process runs the estimator on the same gathered batch, so the running
   statistics stay identical everywhere without any extra communication; each process then takes
   its slice. The advantages TRL logged for the completions table are overwritten with ours.
   Running statistics are updated only when the model is in training mode (TRL calls the method
   once per generation batch in training, and once per batch in evaluation).
3. DAPO's group filtering zeroes the ``completion_mask`` of filtered groups (as TRL's
   ``mask_truncated_completions`` does for truncated ones) and recounts ``num_items_in_batch``.
4. Clip-Cov wraps ``_get_per_token_logps_and_entropies`` while ``_compute_loss`` runs with
   gradients on, detaching the chosen tokens' log-probabilities (see :mod:`.clip_cov`).
5. The estimator state is written as JSON next to every checkpoint (``_save_checkpoint``) and read
   back on ``resume_from_checkpoint`` (``_load_optimizer_and_scheduler``), like TRL's own
   adaptive-entropy state.

TRL still computes its own advantages inside the method (a few vector ops, discarded): that is the
price of not copying the method, and it is negligible next to generation.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from accelerate.utils import gather, gather_object
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer
from trl.rewards import get_soft_overlong_punishment

import ebpo
from ebpo.integrations.trl.clip_cov import clip_cov_select
from ebpo.integrations.trl.config import EBPOConfig

__all__ = ["ESTIMATOR_STATE_FILE", "METRIC_PREFIX", "EBPOTrainer", "zero_variance_groups"]

logger = logging.getLogger(__name__)

#: file written into every ``checkpoint-N/`` directory
ESTIMATOR_STATE_FILE = "ebpo_estimator_state.json"
#: prefix of the estimator's metrics in TRL's logs (tensorboard, wandb, trackio)
METRIC_PREFIX = "ebpo/"
OVERLONG_REWARD_NAME = "soft_overlong_punishment"


def zero_variance_groups(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """``(N // num_generations,)`` True for groups whose non-NaN rewards all agree, or that have none.

    ``rewards`` is ``(N,)`` with contiguous groups; NaN marks completions no reward function scored.
    A group with a single scored completion counts as zero-variance (it carries no contrast).
    """
    grouped = rewards.detach().reshape(-1, num_generations).double()
    scored = ~torch.isnan(grouped)
    count = scored.sum(dim=1)
    high = torch.where(scored, grouped, torch.full_like(grouped, -torch.inf)).amax(dim=1)
    low = torch.where(scored, grouped, torch.full_like(grouped, torch.inf)).amin(dim=1)
    return (count < 2) | (high - low <= 0)


class EBPOTrainer(GRPOTrainer):
    """``trl.GRPOTrainer`` whose advantages come from ``ebpo.make_estimator(args.advantage_estimator)``.

    Same constructor as ``GRPOTrainer``; ``args`` must be an :class:`EBPOConfig` (or None for the
    defaults). Attributes added: ``estimator`` (the live estimator; its ``state_dict()`` is what
    checkpoints store). Metrics added under ``ebpo/``: every entry of the estimator's
    ``res.metrics`` (``prior_mean``, ``sigma2``, ``tau2``, ``shrinkage_mean``,
    ``zero_variance_group_frac``, ``zero_signal_group_frac``, ...), plus
    ``ebpo/grpo_zero_signal_group_frac`` (groups GRPO gives no signal = zero-variance groups),
    ``ebpo/filtered_group_frac`` (DAPO filtering) and ``ebpo/clip_cov_frac`` (Clip-Cov).
    """

    _tag_names = ["trl", "grpo", "ebpo"]
    _name = "EBPO"

    def __init__(
        self,
        model: Any,
        reward_funcs: Any = None,
        args: EBPOConfig | None = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        processing_class: Any = None,
        reward_processing_classes: Any = None,
        callbacks: Any = None,
        optimizers: tuple[Any, Any] = (None, None),
        **kwargs: Any,
    ) -> None:
        if args is None:
            name = model if isinstance(model, str) else model.config._name_or_path
            args = EBPOConfig(f"{name.split('/')[-1]}-EBPO")
        if not isinstance(args, EBPOConfig):
            raise ValueError(
                f"args must be an EBPOConfig (ebpo.integrations.trl.make_config builds one), got {type(args).__name__}"
            )
        # Everything that can fail on the user's input fails here, before the model is touched.
        estimator = ebpo.make_estimator(args.advantage_estimator, **args.estimator_kwargs)
        if args.cluster_column is not None:
            _check_columns("train_dataset", train_dataset, [args.cluster_column], "cluster_column")
            for split_name, split in _eval_splits(eval_dataset):
                _check_columns(split_name, split, [args.cluster_column], "cluster_column")
        if args.data_order != "shuffle":
            train_dataset = _reorder(train_dataset, args.data_order, args.seed)

        with _reference_from_policy(model, args):
            super().__init__(
                model=model,
                reward_funcs=reward_funcs,
                args=args,
                train_dataset=train_dataset,
                eval_dataset=eval_dataset,
                processing_class=processing_class,
                reward_processing_classes=reward_processing_classes,
                callbacks=callbacks,
                optimizers=optimizers,
                **kwargs,
            )
        self.estimator = estimator
        if args.data_order != "shuffle":
            self.shuffle_dataset = False  # the config already says so; keep the sampler honest
        if args.overlong_buffer_ratio > 0:
            self._add_overlong_reward(args)
        # Hand-off from the _calculate_rewards wrapper to _generate_and_score_completions.
        self._ebpo_gathered_rewards: torch.Tensor | None = None
        self._ebpo_gathered_clusters: list[Any] | None = None
        # Set while _compute_loss runs, for the Clip-Cov wrapper.
        self._ebpo_loss_inputs: dict[str, Any] | None = None

    # ------------------------------------------------------------------ DAPO soft overlong punishment
    def _add_overlong_reward(self, args: EBPOConfig) -> None:
        """Append TRL's soft overlong punishment as one more reward function (weight = penalty factor).

        Appended after TRL's init, as TRL itself does for environment rewards, so it shows up in the
        logs as ``rewards/soft_overlong_punishment/mean`` and is part of the summed reward.
        """
        buffer = max(int(round(args.overlong_buffer_ratio * args.max_completion_length)), 1)
        punish = get_soft_overlong_punishment(args.max_completion_length, buffer)
        self.reward_funcs.append(punish)
        self.reward_func_names.append(OVERLONG_REWARD_NAME)
        self.reward_processing_classes.append(None)
        self.reward_weights = torch.cat([self.reward_weights, torch.tensor([float(args.overlong_penalty_factor)])])

    # ------------------------------------------------------------------ rewards → advantages
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._ebpo_gathered_rewards = rewards_per_func
        if self.args.cluster_column is not None:
            # Same process order as `gather` in TRL, so row i of the rewards is row i of the clusters.
            self._ebpo_gathered_clusters = gather_object([example[self.args.cluster_column] for example in inputs])
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        mode = "train" if self.model.training else "eval"
        output = super()._generate_and_score_completions(inputs)
        rewards_per_func, clusters = self._ebpo_gathered_rewards, self._ebpo_gathered_clusters
        self._ebpo_gathered_rewards = self._ebpo_gathered_clusters = None
        if rewards_per_func is None:  # a TRL path that did not score (should not happen)
            raise RuntimeError("EBPOTrainer: TRL produced completions without calling _calculate_rewards")

        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        rewards = self._summed_rewards(rewards_per_func)
        num_total = rewards.numel()
        group_ids = torch.arange(num_total) // num_generations
        result = self.estimator(rewards, group_ids, clusters=clusters, update=(mode == "train"))
        advantages = result.advantages.to(device=output["advantages"].device, dtype=output["advantages"].dtype)

        num_local = output["completion_ids"].size(0)
        start = self.accelerator.process_index * num_local
        output["advantages"] = advantages[start : start + num_local]

        metrics = self._metrics[mode]
        for key, value in result.metrics.items():
            metrics[METRIC_PREFIX + key].append(float(value))
        metrics[METRIC_PREFIX + "grpo_zero_signal_group_frac"].append(float(result.metrics["zero_variance_group_frac"]))

        if self.args.filter_zero_variance_groups and mode == "train":
            dropped = zero_variance_groups(rewards, num_generations)
            metrics[METRIC_PREFIX + "filtered_group_frac"].append(float(dropped.float().mean()))
            keep_rows = (~dropped).repeat_interleave(num_generations)[start : start + num_local]
            self._drop_rows(output, keep_rows.to(output["completion_mask"].device))

        # TRL appended its own advantages of all processes for the completions table: replace them.
        logged = self._logs["advantages"]
        replaced = min(num_total, len(logged))
        for _ in range(replaced):
            logged.pop()
        logged.extend(advantages[num_total - replaced :].tolist())
        return output

    def _summed_rewards(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        """TRL's reward per completion: weighted sum over reward functions; NaN if none scored it."""
        unscorable = torch.isnan(rewards_per_func).all(dim=1)
        weights = self.reward_weights.to(rewards_per_func.device).unsqueeze(0)
        rewards = (rewards_per_func * weights).nansum(dim=1).cpu()
        rewards[unscorable.cpu()] = torch.nan
        return rewards

    def _drop_rows(self, output: dict[str, Any], keep_rows: torch.Tensor) -> None:
        """Mask completions out of the loss (attention and loss mask), then recount the loss tokens."""
        keep = keep_rows.unsqueeze(1).to(output["completion_mask"].dtype)
        output["completion_mask"] = output["completion_mask"] * keep
        if "tool_mask" in output:
            output["tool_mask"] = output["tool_mask"] * keep.to(output["tool_mask"].dtype)
        loss_mask = output["completion_mask"] if "tool_mask" not in output else output["completion_mask"] * output["tool_mask"]
        # TRL clamps the normaliser at 1, so a fully filtered batch gives a zero loss, not NaN.
        output["num_items_in_batch"] = gather(loss_mask.sum()).sum()

    # ------------------------------------------------------------------ Clip-Cov
    def _compute_loss(self, model, inputs):
        if self.args.clip_cov_ratio <= 0:
            return super()._compute_loss(model, inputs)
        self._ebpo_loss_inputs = inputs
        try:
            return super()._compute_loss(model, inputs)
        finally:
            self._ebpo_loss_inputs = None

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        logps, entropies, aux_loss = super()._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
        )
        inputs = self._ebpo_loss_inputs
        # Only the policy forward inside _compute_loss with gradients on (training) is touched;
        # old/ref log-probs (no grad) and evaluation are left alone.
        if inputs is None or not torch.is_grad_enabled() or not logps.requires_grad:
            return logps, entropies, aux_loss
        self._ebpo_loss_inputs = None  # once per loss computation
        mask = inputs["completion_mask"] if "tool_mask" not in inputs else inputs["completion_mask"] * inputs["tool_mask"]
        old = inputs.get("old_per_token_logps")
        generator = torch.Generator().manual_seed(_mix(self.args.seed, self._step, self.accelerator.process_index))
        selected = clip_cov_select(
            logps,
            logps.detach() if old is None else old,
            inputs["advantages"],
            mask,
            clip_cov_ratio=self.args.clip_cov_ratio,
            clip_cov_lb=self.args.clip_cov_lb,
            clip_cov_ub=self.args.clip_cov_ub,
            epsilon_low=self.epsilon_low,
            epsilon_high=self.epsilon_high,
            generator=generator,
        )
        fraction = selected.sum() / mask.sum().clamp(min=1)
        self._metrics["train"][METRIC_PREFIX + "clip_cov_frac"].append(self.accelerator.gather(fraction).mean().item())
        return torch.where(selected, logps.detach(), logps), entropies, aux_loss

    # ------------------------------------------------------------------ checkpoints
    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            checkpoint_dir = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
            os.makedirs(checkpoint_dir, exist_ok=True)
            with open(os.path.join(checkpoint_dir, ESTIMATOR_STATE_FILE), "w") as f:
                json.dump(self.estimator.state_dict(), f)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        path = os.path.join(checkpoint, ESTIMATOR_STATE_FILE)
        if not os.path.exists(path):
            logger.warning("checkpoint %s has no %s: the estimator starts from empty statistics", checkpoint, ESTIMATOR_STATE_FILE)
            return
        with open(path) as f:
            self.estimator.load_state_dict(json.load(f))


# ---------------------------------------------------------------------- helpers
@contextlib.contextmanager
def _reference_from_policy(model: Any, args: EBPOConfig) -> Iterator[None]:
    """With ``beta > 0``, let TRL's reference model be a deep copy of a policy passed as an object.

    TRL 1.16 rebuilds the reference model with ``create_model_from_path(model.config._name_or_path)``,
    which fails for models that exist only in memory (``ebpo.models.build_tiny_llama``) or came from
    a GGUF file (the path is a directory without the ``gguf_file`` argument). The initial policy is
    exactly the reference wanted, so TRL's loader is swapped for a deep copy while the parent
    constructor runs; every other step of TRL's reference handling is unchanged.
    """
    import trl.trainer.grpo_trainer as grpo_module

    if args.beta == 0.0 or isinstance(model, str) or not isinstance(model, torch.nn.Module):
        yield
        return
    original = grpo_module.create_model_from_path

    def copy_policy(model_id: str, *loader_args: Any, **loader_kwargs: Any) -> torch.nn.Module:
        reference = copy.deepcopy(model)
        dtype = loader_kwargs.get("dtype")
        return reference.to(dtype) if isinstance(dtype, torch.dtype) else reference

    grpo_module.create_model_from_path = copy_policy
    try:
        yield
    finally:
        grpo_module.create_model_from_path = original


def _mix(*values: int) -> int:
    """A deterministic 63-bit seed from a few integers (Python's hash of ints is not salted)."""
    seed = 0x9E3779B97F4A7C15
    for value in values:
        seed = (seed ^ (int(value) + 0x9E3779B97F4A7C15 + (seed << 6) + (seed >> 2))) & (2**63 - 1)
    return seed


def _column_names(dataset: Any) -> list[str] | None:
    names = getattr(dataset, "column_names", None)
    return list(names) if isinstance(names, Sequence) else None


def _check_columns(argument: str, dataset: Any, columns: list[str], option: str) -> None:
    if dataset is None:
        return
    names = _column_names(dataset)
    if names is None:
        return  # iterable datasets may not know their columns; TRL will fail on the first batch
    missing = [c for c in columns if c not in names]
    if missing:
        raise ValueError(f"{argument} has no column {missing} (needed by {option}); its columns are {names}")


def _eval_splits(eval_dataset: Any) -> list[tuple[str, Any]]:
    if eval_dataset is None:
        return []
    if isinstance(eval_dataset, dict):
        return [(f"eval_dataset[{key!r}]", value) for key, value in eval_dataset.items()]
    return [("eval_dataset", eval_dataset)]


def _reorder(train_dataset: Any, order: str, seed: int) -> Any:
    """``train_dataset`` in the order given by ``ebpo.curriculum.order_indices``."""
    if train_dataset is None or not hasattr(train_dataset, "select"):
        raise ValueError(f"data_order={order!r} needs a map-style train_dataset (a datasets.Dataset)")
    needed = {"topic": ["topic"], "difficulty": ["difficulty"], "topic_then_difficulty": ["topic", "difficulty"]}[order]
    _check_columns("train_dataset", train_dataset, needed, f"data_order={order!r}")
    from ebpo.curriculum import (
        order_indices,  # lazy: the curriculum module is optional for plain runs
    )

    columns = {name: train_dataset[name] for name in needed}
    indices = order_indices(len(train_dataset), order, seed=seed, **columns)
    return train_dataset.select(list(indices))
