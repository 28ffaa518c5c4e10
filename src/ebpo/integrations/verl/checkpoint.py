"""Save the plug-in's estimator state with every verl checkpoint and restore it on resume: EBPO's
running prior, and JSPO++'s smoothing of λ and the mean (``jspo_plus_plus`` with ``smooth_coef > 0``).

Enable with ``trainer.checkpoint_callback_class=ebpo.integrations.verl.checkpoint.EBPOCheckpointCallback``
(verl ≥ 0.9.1; ``ebpo verl`` sets it by default).

Where things run (verl 0.9.1, ``trainer.use_v1=True``, the default): ``TaskRunnerV1.run`` builds the
trainer inside the TaskRunner Ray actor; the trainer's ``__init__`` builds this callback, its
``fit`` loop computes advantages and saves checkpoints, all in that one process. So the callback
and the advantage function share :data:`~ebpo.integrations.verl.state.STORE`:

* ``on_save`` writes ``global_step_N/ebpo_estimator_state.json`` next to ``actor/`` and ``data.pt``;
* verl has no ``on_load``: the constructor (called before the trainer loads its checkpoint)
  finds the folder verl will resume from with verl's own rules (``trainer.resume_mode`` ``auto``:
  the step in ``latest_checkpointed_iteration.txt`` under ``trainer.default_local_dir``;
  ``resume_path``: ``trainer.resume_from_path``; ``disable``: none) and loads the state from it;
* it also points the metrics JSONL at ``trainer.default_local_dir/ebpo_metrics.jsonl``.

Which trainers call it (verl 0.9.1): only the v1 trainers (``verl.trainer.ppo.v1``: ``sync``,
``colocate_async`` and ``separate_async`` modes) build ``trainer.checkpoint_callback_class`` and
call ``on_save``. Trainers derived from the legacy ``RayPPOTrainer`` never do — the legacy trainer
itself (``trainer.use_v1=False``), the experimental fully-async (``FullyAsyncTrainer``) and
one-step-off (``OneStepOffRayTrainer``) trainers, and out-of-tree recipes built on it: there the
prior is neither saved nor restored (a resumed run starts from an empty prior; harmless with
``prior=batch``, which keeps no state between steps), and the metrics JSONL falls back to the
trainer's ``trainer.default_local_dir`` (see :mod:`~ebpo.integrations.verl.advantage`).
``ebpo verl --dry-run`` warns about ``use_v1=False``.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from verl.trainer.ppo.checkpoint_callback import CheckpointCallback

from ebpo.integrations.verl.state import STATE_FILENAME, STORE, EstimatorStore

__all__ = ["EBPOCheckpointCallback", "resume_folder"]

logger = logging.getLogger(__name__)
TRACKER_FILENAME = "latest_checkpointed_iteration.txt"


def _absolute(path: str) -> str:
    return path if os.path.isabs(path) else os.path.join(os.getcwd(), path)


def resume_folder(trainer_config: Any) -> str | None:
    """The ``global_step_N`` folder verl will resume from, or None (mirrors verl's ``_load_checkpoint``)."""
    mode = trainer_config.get("resume_mode", "auto")
    if mode == "disable":
        return None
    if mode == "resume_path":
        path = trainer_config.get("resume_from_path")
        if not isinstance(path, str) or "global_step_" not in path:
            raise ValueError(
                f"trainer.resume_from_path must be a path containing 'global_step_' when "
                f"trainer.resume_mode=resume_path, got {path!r}"
            )
        return _absolute(path)
    if mode != "auto":
        raise ValueError(f"trainer.resume_mode must be one of ['auto', 'resume_path', 'disable'], got {mode!r}")
    base = trainer_config.get("default_local_dir")
    if not base:
        return None
    tracker = os.path.join(_absolute(base), TRACKER_FILENAME)
    if not os.path.exists(tracker):
        return None
    with open(tracker) as handle:
        step = int(handle.read().strip())
    folder = os.path.join(_absolute(base), f"global_step_{step}")
    return folder if os.path.isdir(folder) else None


class EBPOCheckpointCallback(CheckpointCallback):
    """verl checkpoint callback that persists the plug-in's estimator state (see module docstring)."""

    def __init__(self, config: Any = None, store: EstimatorStore | None = None) -> None:
        super().__init__(config=config)
        self.store = STORE if store is None else store
        trainer_config = config.trainer if config is not None else None
        if trainer_config is None:
            return
        base = trainer_config.get("default_local_dir")
        if base:
            self.store.run_dir = _absolute(str(base))
        folder = resume_folder(trainer_config)
        if folder is None:
            return
        if self.store.load(folder):
            logger.warning("ebpo: restored estimator state from %s (%d estimators)", folder, len(self.store))
        else:
            logger.warning(
                "ebpo: resuming from %s, which has no %s; the EBPO prior starts empty", folder, STATE_FILENAME
            )

    def on_save(self, trainer: Any, global_step: int, checkpoint_dir: str, async_save: bool = False, **kwargs: Any) -> None:
        """Write the estimator state into ``checkpoint_dir`` (synchronously: it is a few kB)."""
        path = self.store.save(checkpoint_dir)
        logger.info("ebpo: saved estimator state for step %s to %s", global_step, path)
