"""Configurations under which a registered estimator would compute something other than what the
user asked for — refused in one line, or repaired where the repair is exact.

* **A resume without the state** (:func:`check_resume`): verl resumed (it loaded a
  ``global_step_N`` folder: its ``global_steps`` is past 1 at the first advantage call, or
  ``trainer.resume_mode`` points at an existing folder) and the estimator for these options was not
  restored, while it carries state between steps (``carries_state``: EBPO's history / ema prior,
  JSPO++'s smoothing). If that folder holds ``ebpo_estimator_state.json`` (saved by
  ``EBPOCheckpointCallback``) the state is restored from it, with a warning that later checkpoints
  will not carry it unless ``trainer.checkpoint_callback_class`` is set; otherwise training stops
  with one line naming that key. ``+algorithm.ebpo.on_missing_state=start_empty`` accepts an
  empty start instead.
* **Per-cluster priors** (:func:`check_clusters`): verl hands estimators no per-row column but
  ``uid``, so a topic cannot reach them. Refused.
* **KL in the reward with a bounded prior** (:func:`check_rewards`): ``algorithm.use_kl_in_reward``
  puts verl's KL penalty into ``token_level_rewards``, the only rewards an estimator receives; an
  estimator whose rewards must lie in a range (EBPO-BB: a success rate in [0, 1]) would take the
  penalised values for outcomes. Refused.
* **Several estimator calls per step** (:func:`check_calls_per_step`): with the v1 trainers'
  ``trainer.v1.<mode>.parameter_sync_step`` > 1 verl computes advantages once per sub-batch, so a
  state that forgets per call (EBPO's ``half_life``, JSPO++'s smoothing) would forget
  ``parameter_sync_step`` times faster than the option says in global steps. Refused. (With
  ``parameter_sync_step`` > 1 the logged counts stay counts of the step:
  :mod:`ebpo.integrations.verl.sub_steps`.)
* **An asynchronous trainer mode** (:func:`check_trainer_mode`): ``trainer.v1.trainer_mode`` =
  ``colocate_async`` or ``separate_async`` has never run with ebpo's estimators, and the CPU loop
  that proves the other modes cannot run them (:data:`ASYNC_TRAINER_MODES` names the verl 0.9.1
  piece in the way). Refused before any worker starts; ``+algorithm.ebpo.allow_async_trainer=true``
  runs it anyway, unproven. ``sync`` with ``parameter_sync_step`` > 1 (the same sub-steps, verl's
  ``PPOTrainer.step``) is proven on the CPU and allowed.

The checks read verl's full config where they run: in the advantage function (from the trainer on
the call stack) and in ``EBPOCheckpointCallback`` (built with the config before any worker starts,
so a refused configuration stops in seconds), and in ``ebpo verl``'s checks before launching.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from ebpo.estimators import AdvantageEstimator
from ebpo.integrations.verl.resume import resume_folder
from ebpo.integrations.verl.state import STATE_FILENAME, EstimatorStore

__all__ = [
    "CALLBACK_FQN",
    "MISSING_STATE_POLICIES",
    "ASYNC_TRAINER_MODES",
    "check_calls_per_step",
    "check_clusters",
    "check_resume",
    "check_resume_folder",
    "check_rewards",
    "check_trainer_mode",
    "parameter_sync_step",
]

logger = logging.getLogger(__name__)

CALLBACK_FQN = "ebpo.integrations.verl.checkpoint.EBPOCheckpointCallback"
#: ``algorithm.ebpo.on_missing_state``: what a resumed run does without the estimator's state
MISSING_STATE_POLICIES = ("error", "start_empty")


def _select(config: Any, dotted: str, default: Any = None) -> Any:
    node = config
    for part in dotted.split("."):
        if node is None:
            return default
        try:
            node = node.get(part) if hasattr(node, "get") else getattr(node, part, None)
        except Exception:  # struct configs without the key
            return default
    return default if node is None else node


def _describe(name: str, estimator: AdvantageEstimator) -> str:
    options = estimator.options() if hasattr(estimator, "options") else {}
    shown = {k: options[k] for k in ("prior", "half_life", "smooth_coef") if k in options}
    return f"{name} ({', '.join(f'{k}={v}' for k, v in shown.items())})" if shown else name


def check_clusters(estimator: AdvantageEstimator) -> None:
    """Refuse an estimator that reads clusters (its ``uses_clusters`` trait: ``per_cluster=True``):
    verl hands estimators no per-row column but ``uid``, so a topic cannot reach them."""
    if estimator.uses_clusters:
        raise ValueError(
            "algorithm.ebpo.per_cluster=True is not supported in verl: estimators only "
            "receive the group uid, not a topic; order the training data by topic instead"
        )


def check_rewards(name: str, estimator: AdvantageEstimator, algorithm: Any) -> None:
    """Refuse ``algorithm.use_kl_in_reward=True`` for an estimator with a ``reward_range``."""
    if estimator.reward_range is not None and bool(_select(algorithm, "use_kl_in_reward", False)):
        low, high = estimator.reward_range
        raise ValueError(
            f"algorithm.use_kl_in_reward=True puts verl's KL penalty into the rewards that "
            f"adv_estimator={name} reads as outcomes in [{low:g}, {high:g}]: set "
            "algorithm.use_kl_in_reward=False (actor_rollout_ref.actor.use_kl_loss=True keeps a KL term)"
        )


def parameter_sync_step(config: Any) -> int:
    """How many times a step verl's trainer calls the estimator (v1: ``parameter_sync_step`` of
    the trainer mode; 1 for the legacy trainer)."""
    trainer = _select(config, "trainer")
    if trainer is None or not bool(_select(trainer, "use_v1", True)):  # verl's default: v1
        return 1
    mode = _select(trainer, "v1.trainer_mode", "sync")
    return int(_select(trainer, f"v1.{mode}.parameter_sync_step", 1) or 1)


#: verl's asynchronous v1 trainer modes, refused by :func:`check_trainer_mode`, and what keeps each
#: off the CPU loop (verl 0.9.1, ``verl/trainer/ppo/v1/``)
ASYNC_TRAINER_MODES = {
    "separate_async": (
        "PPOTrainerSeparateAsync asserts rollout.checkpoint_engine.backend != 'naive', and every "
        "other weight-sync backend (nccl, hccl, nixl, mooncake, kimi, delta_sharded) sends the "
        "weights to the standalone rollout over a GPU transport"
    ),
    "colocate_async": (
        "PPOTrainerColocateAsync aborts rollouts mid-response and resumes them on the next "
        "weights (FullyAsyncLLMServerClient), and a resumed run re-issues the checkpoint's "
        "in-flight prompts from scratch (_reissue_inflight_prompts), so no resumed run repeats "
        "the uninterrupted one"
    ),
}


def trainer_mode(config: Any) -> str:
    """verl's v1 ``trainer.v1.trainer_mode`` (``sync`` when unset; ``legacy`` when
    ``trainer.use_v1=False``)."""
    trainer = _select(config, "trainer")
    if trainer is not None and not bool(_select(trainer, "use_v1", True)):
        return "legacy"
    return str(_select(trainer, "v1.trainer_mode", "sync")) if trainer is not None else "sync"


def check_trainer_mode(name: str, config: Any, allow_async: Any = False) -> None:
    """Refuse an asynchronous v1 trainer mode (:data:`ASYNC_TRAINER_MODES`) unless
    ``allow_async`` (``algorithm.ebpo.allow_async_trainer``) is true."""
    if not isinstance(allow_async, bool):
        raise ValueError(
            f"algorithm.ebpo.allow_async_trainer must be true or false, got {allow_async!r}"
        )
    mode = trainer_mode(config)
    if mode in ASYNC_TRAINER_MODES and not allow_async:
        raise ValueError(
            f"adv_estimator={name} has not run under trainer.v1.trainer_mode={mode} (verl 0.9.1: "
            f"{ASYNC_TRAINER_MODES[mode]}): use trainer.v1.trainer_mode=sync (sub-steps run there "
            "too: +trainer.v1.sync.parameter_sync_step=N), or +algorithm.ebpo.allow_async_trainer=true "
            "to run it unproven"
        )


def check_calls_per_step(name: str, estimator: AdvantageEstimator, calls: int) -> None:
    """Refuse a per-call decay when verl calls the estimator ``calls`` > 1 times a step."""
    if calls > 1 and estimator.decays_per_call:
        raise ValueError(
            f"{_describe(name, estimator)} forgets per estimator call, and with "
            f"parameter_sync_step={calls} verl calls it {calls} times a step (once per sub-batch), "
            "so its half-life or smoothing would not mean global steps: use "
            "+algorithm.ebpo.prior=history or batch (ebpo), smooth_coef=0 (jspo_plus_plus), or "
            "trainer.v1.<mode>.parameter_sync_step=1"
        )


def check_resume(
    store: EstimatorStore,
    name: str,
    core: str,
    options: dict[str, Any],
    trainer_config: Any,
    global_steps: int | None,
    policy: str = "error",
) -> bool:
    """At the first advantage call of ``core``/``options`` in this process: the repair or the
    refusal described in the module docstring. Returns True when it restored the state (the caller
    must fetch the estimator from ``store`` again)."""
    if not store.first_call(core, options):
        return False
    estimator = store.get(core, options)
    if not estimator.carries_state or store.was_restored(core, options):
        return False
    folder = resume_folder(trainer_config) if trainer_config is not None else None
    if folder is not None and not os.path.isdir(folder):
        folder = None
    resumed = folder is not None or (global_steps is not None and global_steps > 1)
    if not resumed:
        return False
    if folder is not None and os.path.isfile(os.path.join(folder, STATE_FILENAME)):
        store.load(folder)
        if store.was_restored(core, options):
            logger.warning(
                "ebpo: verl resumed from %s without ebpo's checkpoint callback; restored %s's state "
                "from its %s. Set trainer.checkpoint_callback_class=%s, or later checkpoints "
                "will not carry the state",
                folder,
                name,
                STATE_FILENAME,
                CALLBACK_FQN,
            )
            return True
    if policy == "start_empty":
        logger.warning(
            "ebpo: verl resumed (step %s) without %s's state; starting it empty "
            "(algorithm.ebpo.on_missing_state=start_empty)",
            global_steps,
            name,
        )
        return False
    if folder is not None:
        check_resume_folder(name, estimator, folder, restored=False)
    raise _missing_state(
        name, estimator, f"at step {global_steps}, and no checkpoint folder of it is known here"
    )


def check_resume_folder(
    name: str, estimator: AdvantageEstimator, folder: str, *, restored: bool | None = None
) -> None:
    """Refuse to resume from ``folder`` without the state of an estimator that carries state
    (``restored``: whether the folder's state file held this configuration; None: look for the
    file only)."""
    if not estimator.carries_state:
        return
    has_file = os.path.isfile(os.path.join(folder, STATE_FILENAME))
    if restored is None:
        restored = has_file
    if not restored:
        what = "holds state for other options" if has_file else f"holds no {STATE_FILENAME}"
        raise _missing_state(name, estimator, f"from {folder}, which {what}")


def _missing_state(name: str, estimator: AdvantageEstimator, where: str) -> ValueError:
    return ValueError(
        f"ebpo: verl resumed {where}: {_describe(name, estimator)} keeps state between steps and "
        f"would restart it empty. Resume from a checkpoint saved with "
        f"trainer.checkpoint_callback_class={CALLBACK_FQN}, or set "
        "+algorithm.ebpo.on_missing_state=start_empty"
    )
