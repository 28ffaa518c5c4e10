"""Which ``global_step_N`` folder verl will resume a run from, by verl's own rules
(``trainer.resume_mode``), without importing verl: the launcher's dry run reports it and
:class:`~ebpo.integrations.verl.checkpoint.EBPOCheckpointCallback` restores the estimator state
from it.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["TRACKER_FILENAME", "absolute_path", "resume_folder"]

TRACKER_FILENAME = "latest_checkpointed_iteration.txt"


def absolute_path(path: str) -> str:
    """``path`` made absolute against the working directory (as verl does)."""
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
        return absolute_path(path)
    if mode != "auto":
        raise ValueError(
            f"trainer.resume_mode must be one of ['auto', 'resume_path', 'disable'], got {mode!r}"
        )
    base = trainer_config.get("default_local_dir")
    if not base:
        return None
    tracker = os.path.join(absolute_path(base), TRACKER_FILENAME)
    if not os.path.exists(tracker):
        return None
    with open(tracker) as handle:
        step = int(handle.read().strip())
    folder = os.path.join(absolute_path(base), f"global_step_{step}")
    # verl's find_latest_ckpt_path tests existence, not a directory (the guards check that)
    return folder if os.path.exists(folder) else None
