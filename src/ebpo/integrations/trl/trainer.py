"""`EBPOTrainer`: TRL's `GRPOTrainer` with advantages from an `ebpo` estimator.

How it plugs into TRL 1.16.0 without copying TRL's 600-line ``_generate_and_score_completions``
(TRL has no advantage hook yet: issue #4525, PR #7298):

1. ``_calculate_rewards`` is wrapped: TRL's version gathers the ``(N, num_reward_funcs)`` rewards of
   the whole generation batch from all processes; the wrapper keeps a reference to that tensor
   (and gathers the ``cluster_column`` values of the completions, if asked).
2. ``_generate_and_score_completions`` calls TRL's, then recomputes the advantages with the
   estimator from the kept rewards (:func:`.batch_advantages.batch_advantages`, free of TRL): one
   reward per completion as TRL combines them (``multi_objective_aggregation``; NaN where every
   reward function returned None, which the estimator masks), groups = contiguous blocks of
   ``num_generations``. A completion that is the only scored one of its group gets advantage 0, as
   in TRL, unless the estimator has a prior (see :func:`has_lone_response_baseline`); TRL's own GRPO
   (``grpo``, ``dr_grpo``) also counts it in the batch's std, as ``GRPOTrainer`` does: one
   :class:`.batch_advantages.LoneRowPolicy` says which. Every process runs the estimator on the
   same gathered batch, so the running statistics stay identical everywhere without any extra
   communication; each process then takes its slice. The advantages TRL logged for the
   completions table are overwritten with ours. Running statistics are updated only when the model
   is in training mode (TRL calls the method once per generation batch in training, and once per
   batch in evaluation).
3. DAPO's group filtering zeroes the ``completion_mask`` of filtered groups (as TRL's
   ``mask_truncated_completions`` does for truncated ones) and recounts ``num_items_in_batch``. It
   compares the accuracy (the user's reward functions, without the overlong punishment) by default.
4. Clip-Cov wraps ``_get_per_token_logps_and_entropies`` while ``_compute_loss`` runs with
   gradients on, detaching the chosen tokens' log-probabilities (see :mod:`.clip_cov`).
5. The estimator state is written as JSON into every checkpoint and read back on
   ``resume_from_checkpoint``, like TRL's own adaptive-entropy state; with TRL's position in its
   generation cycle and, for a checkpoint inside a generation batch, the batch itself, so that
   resuming is exact (see :mod:`.checkpoint_files`). A checkpoint is marked complete once every file is
   written, and only a complete one is resumed from (see :mod:`.save_and_resume`).
6. In a multi-process run, every process checks after each estimator update (and after a resume)
   that all processes hold the same estimator state: one all-gather of a 64-bit digest a
   generation batch; a difference raises an error naming the ranks and the step (see
   :mod:`.consistency`). ``EBPO_TRACE_DIR`` turns on a per-process diagnostic trace of the states,
   advantages and losses (see :mod:`.trace`).

TRL still computes its own advantages inside the method (a few vector ops, discarded): that is the
price of not copying the method, and it is negligible next to generation.
"""

from __future__ import annotations

from typing import Any

import torch
import trl
from accelerate.utils import gather, gather_object
from trl import GRPOTrainer
from trl.rewards import get_soft_overlong_punishment
from trl.trainer.utils import get_config_model_id

import ebpo
from ebpo.estimators import GRPO
from ebpo.integrations.trl.aggregation import unscorable_rows, zero_variance_groups
from ebpo.integrations.trl.batch_advantages import BatchAdvantages, batch_advantages, prompt_key
from ebpo.integrations.trl.checkpoint_files import ESTIMATOR_STATE_FILE
from ebpo.integrations.trl.clip_cov import clip_cov_select
from ebpo.integrations.trl.config import EBPOConfig, EBPOConfigMixin
from ebpo.integrations.trl.consistency import check_ranks_agree, gather_digests, state_digest
from ebpo.integrations.trl.estimator_settings import lone_row_policy
from ebpo.integrations.trl.gguf_policy import load_gguf_policy, model_init_kwargs_used
from ebpo.integrations.trl.notices import estimator_line
from ebpo.integrations.trl.reference_model import reference_from_policy
from ebpo.integrations.trl.reward_calls import checked_rewards
from ebpo.integrations.trl.save_and_resume import CheckpointingMixin
from ebpo.integrations.trl.signal import NoSignalWatch
from ebpo.integrations.trl.signal import logger as signal_logger
from ebpo.integrations.trl.trace import RankTrace
from ebpo.integrations.trl.train_data import check_columns, eval_splits, reorder
from ebpo.integrations.trl.trl_version import check_trl

check_trl(
    trl.__version__, GRPOTrainer
)  # before the subclass: a missing method is named, not ignored

__all__ = [
    "ESTIMATOR_STATE_FILE",
    "METRIC_PREFIX",
    "EBPOTrainer",
    "EBPOTrainerMixin",
    "has_lone_response_baseline",
    "zero_variance_groups",
]

#: prefix of the estimator's metrics in TRL's logs (tensorboard, wandb, trackio)
METRIC_PREFIX = "ebpo/"
OVERLONG_REWARD_NAME = "soft_overlong_punishment"


def has_lone_response_baseline(estimator_name: str) -> bool:
    """Whether ``estimator_name`` gives the only scored completion of a group a baseline of its own:
    the estimator's ``uses_prior`` trait (see :class:`ebpo.AdvantageEstimator`).

    True for the estimators with a prior (``ebpo``, ``ebpo_bb``): the prior estimated from other
    prompts (and, with ``prior="history"``, other steps) is a baseline even for a lone completion,
    whose advantage is then ``S·(r − μ)`` before normalisation. False for the group-relative
    estimators (``grpo``, ``dr_grpo``, ``rloo``, ``reinforce_pp_baseline``, ``jspo``,
    ``jspo_plus_plus``): their baseline is built from the other completions of the same group, and
    a lone completion has none (JSPO's baseline mixes the other prompts' mean with the group's
    leave-one-out mean, which does not exist for a lone completion). EBPOTrainer leaves such
    completions out of the estimator, so they get advantage 0, as in TRL.
    """
    return ebpo.make_estimator(estimator_name).uses_prior


class EBPOTrainerMixin(CheckpointingMixin):
    """Everything EBPO adds to a ``GRPOTrainer`` class, mixed in before it: :class:`EBPOTrainer` is
    this mixin over ``trl.GRPOTrainer``; :mod:`ebpo.integrations.unsloth` puts it over the class
    Unsloth has in place. :class:`EBPOTrainer` documents the behaviour."""

    #: the configuration class ``args`` must be an instance of (built from it when ``args`` is None)
    _ebpo_config_class: type[EBPOConfigMixin] = EBPOConfig
    #: where such a configuration comes from, for the error message
    _ebpo_config_hint = "ebpo.integrations.trl.make_config builds one"
    _tag_names = ["trl", "grpo", "ebpo"]
    _name = "EBPO"
    # GRPOTrainer's, which __init__ extends: the reward functions and their weights
    reward_funcs: list[Any]
    reward_weights: torch.Tensor

    @property
    def no_signal_notice(self) -> str | None:
        """The last notice of a stretch of generation batches without any learning signal."""
        return self._ebpo_signal.notice

    def __init__(
        self,
        model: Any,
        reward_funcs: Any = None,
        args: EBPOConfigMixin | None = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        processing_class: Any = None,
        reward_processing_classes: Any = None,
        callbacks: Any = None,
        optimizers: tuple[Any, Any] = (None, None),
        **kwargs: Any,
    ) -> None:
        if args is None:  # as GRPOTrainer does, with EBPOConfig
            name = model if isinstance(model, str) else get_config_model_id(model.config)
            args = self._ebpo_config_class(f"{name.split('/')[-1]}-EBPO")
        if not isinstance(args, self._ebpo_config_class):
            raise ValueError(
                f"args must be an EBPOConfig ({self._ebpo_config_hint}), got {type(args).__name__}"
            )
        # Everything that can fail on the user's input fails here, before the model is touched.
        estimator = args.build_estimator()  # the one the config built to check its settings
        if args.cluster_column is not None:
            check_columns("train_dataset", train_dataset, [args.cluster_column], "cluster_column")
            for split_name, split in eval_splits(eval_dataset):
                check_columns(split_name, split, [args.cluster_column], "cluster_column")
        if args.data_order != "shuffle":
            train_dataset = reorder(train_dataset, args.data_order, args.seed)
        # A GGUF file (smollm2-135m, *.gguf), which TRL cannot load by name: loaded here.
        model, processing_class, loaded = load_gguf_policy(model, args, processing_class)

        with reference_from_policy(model, args), model_init_kwargs_used(loaded):
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
        # Which completions get which advantages, and whether TRL's own numbers stay (TRL's GRPO
        # with TRL's settings): see .batch_advantages.LoneRowPolicy.
        self._ebpo_policy = lone_row_policy(estimator, args.multi_objective_aggregation)
        # TRL still computes its own advantages (kept for its own GRPO, discarded otherwise) and logs
        # frac_reward_zero_std from them: give it the estimator's scale, or a value it accepts.
        self.scale_rewards = (
            estimator.scale if isinstance(estimator, GRPO) else (args.scale_rewards or "group")
        )
        if args.data_order != "shuffle":
            self.shuffle_dataset = False  # the config already says so; keep the sampler honest
        # The user's reward functions (TRL's, environments' included); the overlong punishment goes after.
        self.reward_funcs = checked_rewards(self.reward_funcs)  # errors name the function and line
        self._ebpo_user_columns = slice(0, len(self.reward_funcs))
        if args.overlong_buffer_ratio > 0:
            self._add_overlong_reward(args)
        # The estimator state before the current generation batch was scored (for mid-batch checkpoints).
        self._ebpo_state_before_batch: dict[str, Any] = estimator.state_dict()
        # Hand-off from the _calculate_rewards wrapper to _generate_and_score_completions.
        self._ebpo_gathered_rewards: torch.Tensor | None = None
        self._ebpo_gathered_clusters: list[Any] | None = None
        self._ebpo_gathered_prompt_keys: list[int] | None = None
        # Set while _compute_loss runs, for the Clip-Cov wrapper.
        self._ebpo_loss_inputs: dict[str, Any] | None = None
        # Generation batches in a row in which no group carried a signal (see .signal).
        self._ebpo_signal = NoSignalWatch()
        # The diagnostic trace of this process (EBPO_TRACE_DIR), or None.
        self._ebpo_trace = RankTrace.from_env(
            self.accelerator.process_index, self.accelerator.num_processes
        )

    # ------------------------------------------------------------------ DAPO soft overlong punishment
    def _add_overlong_reward(self, args: EBPOConfigMixin) -> None:
        """Append TRL's soft overlong punishment as one more reward function (weight = penalty factor).

        Appended after TRL's init, as TRL itself does for environment rewards, so it shows up in the
        logs as ``rewards/soft_overlong_punishment/mean`` and is part of the summed reward. It always
        returns a number, so :meth:`_calculate_rewards` blanks it (NaN) for completions that every user
        reward function returned None for: they stay unscored, as without the punishment.
        """
        buffer = max(int(round(args.overlong_buffer_ratio * args.max_completion_length)), 1)
        punish = get_soft_overlong_punishment(args.max_completion_length, buffer)
        self.reward_funcs.append(punish)
        self.reward_func_names.append(OVERLONG_REWARD_NAME)
        self.reward_processing_classes.append(None)
        self.reward_weights = torch.cat(
            [self.reward_weights, torch.tensor([float(args.overlong_penalty_factor)])]
        )

    # ------------------------------------------------------------------ rewards → advantages
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(
            inputs, prompts, completions, completion_ids_list
        )
        user = self._ebpo_user_columns
        if user.stop < rewards_per_func.size(1):
            # In place, so that TRL's own unscorable mask and reward metrics see it too.
            rewards_per_func[unscorable_rows(rewards_per_func, user), user.stop :] = torch.nan
        self._ebpo_gathered_rewards = rewards_per_func
        if self.args.cluster_column is not None:
            # Same process order as `gather` in TRL, so row i of the rewards is row i of the clusters.
            self._ebpo_gathered_clusters = gather_object(
                [example[self.args.cluster_column] for example in inputs]
            )
        if self.estimator.uses_prompt_keys:  # SPO: one key per completion, its prompt's text
            self._ebpo_gathered_prompt_keys = gather_object([prompt_key(p) for p in prompts])
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        training = self.model.training
        output = super()._generate_and_score_completions(inputs)
        rewards_per_func, clusters = self._ebpo_gathered_rewards, self._ebpo_gathered_clusters
        prompt_keys = self._ebpo_gathered_prompt_keys
        self._ebpo_gathered_rewards = self._ebpo_gathered_clusters = None
        self._ebpo_gathered_prompt_keys = None
        if rewards_per_func is None:  # a TRL path that did not score (should not happen)
            raise RuntimeError(
                "EBPOTrainer: TRL produced completions without calling _calculate_rewards"
            )
        token_counts = None
        if self.estimator.uses_token_counts:  # e.g. reinforce_pp_verl: token-weighted whitening
            # Same process order as TRL's gather of the rewards: row i is completion i.
            token_counts = gather(output["completion_mask"].sum(1)).cpu()
        if training:
            self._ebpo_state_before_batch = self.estimator.state_dict()
        filtering = self.args.filter_zero_variance_groups and training
        batch = batch_advantages(
            rewards_per_func,
            self.reward_weights,
            self.num_generations if training else self.num_generations_eval,
            self.estimator,
            self._ebpo_policy,
            aggregation=self.args.multi_objective_aggregation,
            clusters=clusters,
            token_counts=token_counts,
            prompt_keys=prompt_keys,
            update=training,
            filter_metric=self.args.filter_groups_metric if filtering else None,
            user_columns=self._ebpo_user_columns,
        )
        if training:
            self._ebpo_check_state("estimator", rewards=batch.estimator_rewards)
        self._place_advantages(output, batch, "train" if training else "eval")
        return output

    def _place_advantages(self, output: dict[str, Any], batch: BatchAdvantages, mode: str) -> None:
        """Put this process's slice of ``batch`` into TRL's ``output``; log the metrics (and the
        no-signal notice), mask DAPO's dropped groups, show our advantages in the completions table."""
        advantages = batch.advantages.to(
            device=output["advantages"].device, dtype=output["advantages"].dtype
        )
        num_local = output["completion_ids"].size(0)
        start = self.accelerator.process_index * num_local
        rows = slice(start, start + num_local)
        if not batch.keeps_trls_advantages:
            output["advantages"] = advantages[rows]
        # else TRL's own GRPO: TRL computed these advantages in float32 as GRPOTrainer does; the
        # estimator's (float64, rounded) agree to float32 rounding; TRL's last bits are kept.
        metrics = self._metrics[mode]
        for key, value in batch.metrics.items():
            metrics[METRIC_PREFIX + key].append(value)
        if mode == "train":
            self._ebpo_watch_signal(batch.metrics)
        dropped_rows = batch.dropped_rows
        if dropped_rows is not None:
            self._drop_rows(output, (~dropped_rows[rows]).to(output["completion_mask"].device))
        if batch.keeps_trls_advantages:
            return  # the completions table already shows these advantages
        # TRL appended its own advantages of all processes for the completions table: replace them.
        logged = self._logs["advantages"]
        num_total = advantages.numel()
        replaced = min(num_total, len(logged))
        for _ in range(replaced):
            logged.pop()
        logged.extend(advantages[num_total - replaced :].tolist())

    def _ebpo_watch_signal(self, metrics: dict[str, float]) -> None:
        """Count this generation batch in the no-signal watch; warn (main process) when it says so."""
        notice = self._ebpo_signal.update(
            self.state.global_step + 1, metrics["zero_signal_group_frac"], metrics["reward_mean"]
        )
        if notice is not None and self.accelerator.is_main_process:
            signal_logger.warning("EBPOTrainer: %s", notice)

    def train(self, *args: Any, **kwargs: Any) -> Any:
        """``GRPOTrainer.train`` (resuming as :class:`.save_and_resume.CheckpointingMixin` says),
        after the main process printed the estimator and its settings
        (:func:`.notices.estimator_line`)."""
        if self.announce and self.accelerator.is_main_process:
            print(
                estimator_line(self.args.advantage_estimator, self.estimator, self.args), flush=True
            )
        return super().train(*args, **kwargs)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "train_runtime" in logs:  # transformers' summary at the end of train()
            self._ebpo_end_of_run(logs)
        super().log(logs, start_time)

    def _ebpo_end_of_run(self, logs: dict[str, float]) -> None:
        """Add the fraction of the run's generation batches without any signal to the summary,
        and warn (main process) when none had one in a run too short for the warning that
        :meth:`_ebpo_watch_signal` gives during training (see :mod:`.signal`)."""
        fraction = self._ebpo_signal.no_signal_batch_frac
        if fraction is not None:
            logs[METRIC_PREFIX + "no_signal_batch_frac"] = fraction
        notice = self._ebpo_signal.end_of_run()
        if notice is not None and self.accelerator.is_main_process:
            signal_logger.warning("EBPOTrainer: %s", notice)

    def _ebpo_check_state(self, event: str, **fields: Any) -> None:
        """After the estimator state changed (an update, a resume): trace it (``EBPO_TRACE_DIR``),
        then, with several processes, check that every process holds the same state — a
        collective, so every process calls this at the same points (see :mod:`.consistency`)."""
        num_processes, trace = self.accelerator.num_processes, self._ebpo_trace
        if num_processes == 1 and trace is None:
            return
        state = self.estimator.state_dict()
        digest = state_digest(state)
        if trace is not None:
            trace.write(
                event, self.state.global_step, self._step, state=state, digest=digest, **fields
            )
        if num_processes > 1:
            digests = gather_digests(self.accelerator, digest)
            check_ranks_agree(digests, self.state.global_step, self._step)

    def _drop_rows(self, output: dict[str, Any], keep_rows: torch.Tensor) -> None:
        """Mask completions out of the loss (attention and loss mask), then recount the loss tokens."""
        keep = keep_rows.unsqueeze(1).to(output["completion_mask"].dtype)
        output["completion_mask"] = output["completion_mask"] * keep
        if "tool_mask" in output:
            output["tool_mask"] = output["tool_mask"] * keep.to(output["tool_mask"].dtype)
        loss_mask = (
            output["completion_mask"]
            if "tool_mask" not in output
            else output["completion_mask"] * output["tool_mask"]
        )
        # TRL clamps the normaliser at 1, so a fully filtered batch gives a zero loss, not NaN.
        output["num_items_in_batch"] = gather(loss_mask.sum()).sum()

    # ------------------------------------------------------------------ Clip-Cov
    def _compute_loss(self, model, inputs):
        if self.args.clip_cov_ratio > 0:
            self._ebpo_loss_inputs = inputs  # for _get_per_token_logps_and_entropies
        try:
            loss = super()._compute_loss(model, inputs)
        finally:
            self._ebpo_loss_inputs = None
        if self._ebpo_trace is not None and model.training:
            self._ebpo_trace.write(
                "loss",
                self.state.global_step,
                self._step,
                advantages=inputs["advantages"],
                loss=loss.item(),
            )
        return loss

    def _get_per_token_logps_and_entropies(
        self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
    ):
        result = super()._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
        )
        inputs = self._ebpo_loss_inputs
        if inputs is None:  # as returned (Unsloth's generated trainer returns other tuples)
            return result
        logps, entropies, aux_loss = result
        # Only the policy forward inside _compute_loss with gradients on (training) is touched;
        # old/ref log-probs (no grad) and evaluation are left alone.
        if not torch.is_grad_enabled() or not logps.requires_grad:
            return result
        self._ebpo_loss_inputs = None  # once per loss computation
        mask = (
            inputs["completion_mask"]
            if "tool_mask" not in inputs
            else inputs["completion_mask"] * inputs["tool_mask"]
        )
        old = inputs.get("old_per_token_logps")
        generator = torch.Generator().manual_seed(
            _mix(self.args.seed, self._step, self.accelerator.process_index)
        )
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
        self._metrics["train"][METRIC_PREFIX + "clip_cov_frac"].append(
            self.accelerator.gather(fraction).mean().item()
        )
        return torch.where(selected, logps.detach(), logps), entropies, aux_loss


class EBPOTrainer(EBPOTrainerMixin, GRPOTrainer):
    """``trl.GRPOTrainer`` whose advantages come from ``ebpo.make_estimator(args.advantage_estimator)``.

    Same constructor as ``GRPOTrainer``; ``model`` may also name a GGUF file (``smollm2-135m``, a
    ``.gguf`` path), which ebpo loads for TRL (:mod:`.gguf_policy`). ``args`` must be an
    :class:`EBPOConfig`. ``args=None`` does
    what ``GRPOTrainer(args=None)`` does with ``GRPOConfig``: ``EBPOConfig("<model name>-EBPO")``,
    i.e. TRL's defaults (for TRL 1.16: ``loss_type="dapo"``, ``beta=0``, ``num_generations=8``,
    ``bf16=True``, which needs ``use_cpu=True, bf16=False`` on a CPU-only machine, as with TRL) plus
    the ``ebpo`` estimator with its defaults (the paper's Algorithm 1, history prior) and
    ``scale_rewards=None`` (the estimator decides the scale).

    Attributes added: ``estimator`` (the live estimator; its ``state_dict()`` is what
    checkpoints store) and ``no_signal_notice`` (None, or the one-line warning logged when
    :data:`~ebpo.integrations.trl.signal.PATIENCE` generation batches in a row gave no group a
    learning signal: see :mod:`.signal`). Metrics added under ``ebpo/``: every entry of the estimator's
    ``res.metrics`` (``prior_mean``, ``sigma2``, ``tau2``, ``shrinkage_mean``,
    ``zero_variance_group_frac``, ``zero_signal_group_frac``, ...), plus
    ``ebpo/grpo_zero_signal_group_frac`` (groups GRPO gives no signal = zero-variance groups),
    ``ebpo/filtered_group_frac`` (DAPO filtering) and ``ebpo/clip_cov_frac`` (Clip-Cov); in the
    summary at the end of training, ``ebpo/no_signal_batch_frac`` (the fraction of the run's
    generation batches in which no group had a signal; a run too short for the warning above in
    which no batch had one gets a warning at its end).
    """


# ---------------------------------------------------------------------- helpers
def _mix(*values: int) -> int:
    """A deterministic 63-bit seed from a few integers (Python's hash of ints is not salted)."""
    seed = 0x9E3779B97F4A7C15
    for value in values:
        seed = (seed ^ (int(value) + 0x9E3779B97F4A7C15 + (seed << 6) + (seed >> 2))) & (2**63 - 1)
    return seed
