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
* it also points the metrics JSONL at ``trainer.default_local_dir/ebpo_metrics.jsonl``;
* it runs the config checks of :mod:`~ebpo.integrations.verl.guards` (:func:`check_config`): verl
  builds the callback in the trainer's constructor, before any worker starts, so a refused
  configuration stops in seconds.

Which trainers call it (verl 0.9.1): only the v1 trainers (``verl.trainer.ppo.v1``: ``sync``,
``colocate_async`` and ``separate_async`` modes) build ``trainer.checkpoint_callback_class`` and
call ``on_save``. Trainers derived from the legacy ``RayPPOTrainer`` never do — the legacy trainer
itself (``trainer.use_v1=False``), the experimental fully-async (``FullyAsyncTrainer``) and
one-step-off (``OneStepOffRayTrainer``) trainers, and out-of-tree recipes built on it: there the
prior is neither saved nor restored (a resumed run starts from an empty prior; harmless with
``prior=batch``, which keeps no state between steps), and the metrics JSONL falls back to the
trainer's ``trainer.default_local_dir`` (see :mod:`~ebpo.integrations.verl.advantage`); a
resumed run with a stateful estimator then stops at its first advantage call, unless the folder it
resumed from holds a state file (see :mod:`~ebpo.integrations.verl.guards`).
``ebpo verl --dry-run`` warns about ``use_v1=False``.
"""

from __future__ import annotations

import logging
from typing import Any

# verl is this module's base (verl loads the callback by name): it needs the verl extra
from verl.trainer.ppo.checkpoint_callback import CheckpointCallback

from ebpo.integrations.verl.advantage import plugin_names, resolve_options
from ebpo.integrations.verl.guards import (
    check_calls_per_step,
    check_clusters,
    check_rewards,
    check_trainer_mode,
    parameter_sync_step,
)
from ebpo.integrations.verl.resume import absolute_path, resume_folder
from ebpo.integrations.verl.state import STATE_FILENAME, STORE, EstimatorStore

__all__ = ["EBPOCheckpointCallback", "check_config"]

logger = logging.getLogger(__name__)


class EBPOCheckpointCallback(CheckpointCallback):
    """verl checkpoint callback that persists the plug-in's estimator state (see module docstring)."""

    def __init__(self, config: Any = None, store: EstimatorStore | None = None) -> None:
        super().__init__(config=config)
        self.store = STORE if store is None else store
        trainer_config = config.trainer if config is not None else None
        if trainer_config is None:
            return
        check_config(config)
        base = trainer_config.get("default_local_dir")
        if base:
            self.store.run_dir = absolute_path(str(base))
        folder = resume_folder(trainer_config)
        if folder is None:
            return
        if self.store.load(folder):
            logger.warning(
                "ebpo: restored estimator state from %s (%d estimators)", folder, len(self.store)
            )
        else:
            logger.warning(
                "ebpo: resuming from %s, which has no %s; the EBPO prior starts empty",
                folder,
                STATE_FILENAME,
            )

    def on_save(
        self,
        trainer: Any,
        global_step: int,
        checkpoint_dir: str,
        async_save: bool = False,
        **kwargs: Any,
    ) -> None:
        """Write the estimator state into ``checkpoint_dir`` (synchronously: it is a few kB)."""
        path = self.store.save(checkpoint_dir)
        logger.info("ebpo: saved estimator state for step %s to %s", global_step, path)


def check_config(config: Any) -> None:
    """The checks of :mod:`~ebpo.integrations.verl.guards` that need only the config, for one of
    ebpo's estimators: run when verl builds the callback, before any worker starts."""
    from ebpo.estimators import make_estimator

    name = config.algorithm.get("adv_estimator") if config.get("algorithm") is not None else None
    if name not in plugin_names():
        return
    options, plugin = resolve_options(name, config.algorithm)
    check_trainer_mode(name, config, plugin.get("allow_async_trainer", False))
    estimator = make_estimator(name, **options)
    check_clusters(estimator)
    check_rewards(name, estimator, config.algorithm)
    check_calls_per_step(name, estimator, parameter_sync_step(config))
