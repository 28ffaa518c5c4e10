"""What the plug-in reads from verl's call stack: what verl does not hand an advantage estimator.

verl calls a registered estimator with the batch's tensors and ``uid`` only
(:mod:`ebpo.integrations.verl.advantage`). What else the estimator needs lies in the frames of
its callers, found by walking up at most ``max_depth`` frames from the registered function:

* the trainer (a frame of ``verl.trainer`` / ``verl.experimental``, or a method of a subclass of
  one of their classes: :func:`is_trainer_frame`) and its local ``metrics`` dict, the only way
  into verl's loggers (:func:`trainer_frame_metrics`);
* the TransferQueue keys ``{uid}_{session}_{output}`` of the rows, from verl's v1
  ``compute_advantage_for_multi_trajectories`` (:func:`session_keys`);
* one stable key per prompt, its token ids, from verl's ``compute_advantage(data, ...)``, for
  an estimator that tracks prompts across steps (SPO: :func:`verl_prompt_keys`).

Each function is called directly by :func:`~ebpo.integrations.verl.advantage.outcome_advantage`,
so the walk starts two frames up (``sys._getframe(2)``: the registered function verl called).
Outside such callers nothing is found (None), but a missing prompt key is an error.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

from ebpo.integrations.verl.state import STORE

__all__ = [
    "ADVANTAGE_CALLER",
    "MULTI_OUTPUT_FUNCTION",
    "VERL_TRAINER_MODULES",
    "is_trainer_frame",
    "session_keys",
    "trainer_frame_metrics",
    "verl_prompt_keys",
]

#: modules whose frames (or whose classes, in a trainer's MRO) mark a verl trainer on the stack
VERL_TRAINER_MODULES = ("verl.trainer.", "verl.experimental.")


def is_trainer_frame(frame: Any) -> bool:
    """A frame of verl's trainers (``verl.trainer``, ``verl.experimental``) or a method of a
    subclass of one (an out-of-tree recipe's trainer, e.g. ``recipe.dapo``)."""
    if frame.f_globals.get("__name__", "").startswith(VERL_TRAINER_MODULES):
        return True
    owner = frame.f_locals.get("self")
    return owner is not None and any(
        getattr(cls, "__module__", "").startswith(VERL_TRAINER_MODULES)
        for cls in type(owner).__mro__[:-1]
    )


#: the v1 trainers' function that hands verl's TransferQueue keys (``{uid}_{session}_{output}``)
#: of the rows to ``compute_advantage`` (verl 0.9.1, ``verl/trainer/ppo/v1/utils.py``)
MULTI_OUTPUT_FUNCTION = "compute_advantage_for_multi_trajectories"


def session_keys(rows: int, max_depth: int = 12) -> list[str] | None:
    """verl's TransferQueue keys of the ``rows`` rows, from the calling
    ``compute_advantage_for_multi_trajectories`` (its ``batch_keys``), or None outside it."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(max_depth):
        if frame is None:
            return None
        if frame.f_code.co_name == MULTI_OUTPUT_FUNCTION and is_trainer_frame(frame):
            keys = frame.f_locals.get("batch_keys")
            if isinstance(keys, (list, tuple)) and len(keys) == rows:
                return [str(key) for key in keys]
            STORE.warn_once(
                "no-session-keys",
                "ebpo: %s called the estimator without %d `batch_keys`: outputs of multi-output "
                "agent loops count as separate samples",
                MULTI_OUTPUT_FUNCTION,
                rows,
            )
            return None
        frame = frame.f_back
    return None


#: verl's function that calls a registered estimator with the batch as its local ``data``
ADVANTAGE_CALLER = "compute_advantage"


def verl_prompt_keys(name: str, rows: int, max_depth: int = 12) -> list[bytes]:
    """One key per row for an estimator that tracks prompts across steps (SPO): the prompt's token
    ids (``data.batch["prompts"]`` without its left padding, ``attention_mask``), read from the
    calling verl ``compute_advantage(data, ...)``. verl hands the estimator only ``uid``, drawn
    afresh for every sample; the prompt's tokens are the same on every step. ValueError (one line)
    where no such caller or no prompt tokens are found."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(max_depth):
        if frame is None:
            break
        if frame.f_code.co_name == ADVANTAGE_CALLER and is_trainer_frame(frame):
            batch = getattr(frame.f_locals.get("data"), "batch", None)
            if batch is not None and {"prompts", "attention_mask"} <= set(batch.keys()):
                prompts = batch["prompts"].cpu()
                mask = batch["attention_mask"][:, : prompts.shape[-1]].cpu().bool()
                if len(prompts) == rows:
                    return [p[m].numpy().tobytes() for p, m in zip(prompts, mask, strict=True)]
            break
        frame = frame.f_back
    raise ValueError(
        f"adv_estimator={name!r} needs a stable key per prompt, and verl passes the estimator only "
        "per-sample uids: it must be called by verl's compute_advantage(data, ...) with "
        "data.batch['prompts'] and 'attention_mask' for all its rows"
    )


def trainer_frame_metrics(max_depth: int = 12) -> tuple[dict | None, Any]:
    """The calling verl trainer's ``metrics`` dict and the trainer object, if we are inside one.

    verl gives estimators no metrics channel. Its trainers call ``compute_advantage`` from a
    method holding a local ``metrics`` dict that is later sent to ``Tracking.log`` (``verl.trainer``:
    the v1 and legacy trainers; ``verl.experimental``: the fully-async and one-step-off trainers,
    where it is ``self.metrics``); updating that dict puts our statistics into every configured
    backend (wandb, tensorboard, console...). Outside such a frame nothing is found.
    """
    frame: FrameType | None = sys._getframe(2)
    for _ in range(max_depth):
        if frame is None:
            break
        if is_trainer_frame(frame):
            local = frame.f_locals
            metrics = local.get("metrics")
            if isinstance(metrics, dict):
                return metrics, local.get("self")
        frame = frame.f_back
    return None, None
