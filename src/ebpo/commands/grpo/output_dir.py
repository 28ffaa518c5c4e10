"""``ebpo grpo``'s ``output_dir``: the rules of ``ebpo train``'s run directory, for the directory
TRL's trainer writes into.

TRL writes its checkpoints, then the final model (``config.json``, ``model.safetensors``, the
tokenizer's files), a model card (``README.md``) and ``training_args.bin`` into ``output_dir``,
over whatever is there: a user's own folder given by mistake loses its ``config.json`` and
``README.md``; a file given by mistake fails with a traceback once the model has loaded. Checked
here, before anything loads (by every process of a launch: they decide alike, and none of them
writes into the directory before they have all passed this check — their first exchange, in the
trainer's construction, comes first):

* a path that is a file, lies below a file or cannot be written: refused;
* a directory that is not empty and holds no training run: refused. A training run is what
  transformers' ``Trainer`` leaves behind (:data:`RUN_ENTRIES`: ``checkpoint-N`` folders,
  ``training_args.bin``, ``trainer_state.json``, TensorBoard's ``runs/``); such a directory is
  TRL's own;
* a directory holding an earlier run's checkpoints or its finished model (``training_args.bin``)
  without ``resume_from_checkpoint``: refused, as ``ebpo train`` refuses a plain run on a run
  that holds checkpoints (``trl grpo`` would write over them). Only TensorBoard logs of a run that
  stopped before its first checkpoint may be written beside (TRL adds an event file);
* ``resume_from_checkpoint``: the checkpoint it names, or with ``True`` the newest one of
  ``output_dir``, must be complete (:func:`.checkpointing.resolve_checkpoint`) and must exist.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ebpo.integrations.trl.checkpointing import resolve_checkpoint
from ebpo.utils.checkpoints import checkpoint_dirs
from ebpo.utils.files import check_output_path

__all__ = ["RUN_ENTRIES", "check_output_dir"]

#: entries that only a transformers ``Trainer`` run leaves in its output directory (besides
#: ``checkpoint-N`` folders)
RUN_ENTRIES = ("training_args.bin", "trainer_state.json", "runs")


def check_output_dir(output_dir: Any, resume_from_checkpoint: Any = None) -> None:
    """Raise ValueError (one line naming ``output_dir``) unless TRL may write into ``output_dir``
    (see the module). Creates and changes nothing."""
    if not isinstance(output_dir, (str, os.PathLike)):
        raise ValueError(f"output_dir must be a path, got {output_dir!r}")
    path = check_output_path(output_dir, "output_dir", kind="dir")
    if path.is_dir() and not _is_training_run(path) and any(path.iterdir()):
        raise ValueError(
            f"output_dir {os.fspath(output_dir)!r} is not empty and holds no training run (no "
            f"{PREFIX_CHECKPOINT_DIR}-N, no training_args.bin); TRL would write its model, "
            "config.json and README.md over the files there: choose another directory"
        )
    resuming = resume_from_checkpoint not in (None, False, "")
    if path.is_dir() and not resuming:
        checkpoints = [p.name for p in checkpoint_dirs(path, PREFIX_CHECKPOINT_DIR)]
        earlier = checkpoints[:3] + [name for name in RUN_ENTRIES[:2] if (path / name).exists()]
        if earlier:
            # on the command line transformers reads `true` as a path: name the newest checkpoint
            how = (
                "continue it with --resume_from_checkpoint "
                f"{os.path.join(os.fspath(output_dir), checkpoints[-1])}, or choose another directory"
                if checkpoints
                else "it has no checkpoint to continue: choose another directory"
            )
            raise ValueError(
                f"output_dir {os.fspath(output_dir)!r} holds an earlier training run "
                f"({', '.join(earlier)}): {how}; ebpo grpo never writes over a run"
            )
    if resume_from_checkpoint is True and not checkpoint_dirs(path, PREFIX_CHECKPOINT_DIR):
        raise ValueError(
            f"resume_from_checkpoint: output_dir {os.fspath(output_dir)!r} holds no "
            f"{PREFIX_CHECKPOINT_DIR}-N to resume"
        )
    if resuming:
        resolve_checkpoint(resume_from_checkpoint, os.fspath(path))


def _is_training_run(path: Path) -> bool:
    return bool(checkpoint_dirs(path, PREFIX_CHECKPOINT_DIR)) or any(
        (path / name).exists() for name in RUN_ENTRIES
    )
