"""``ebpo grpo``'s ``output_dir``: the rules of ``ebpo train``'s run directory, for the directory
TRL's trainer writes into.

TRL writes its checkpoints, then the final model (``config.json``, ``model.safetensors``, the
tokenizer's files), a model card (``README.md``) and ``training_args.bin`` into ``output_dir``,
over whatever is there: a user's own folder given by mistake loses its ``config.json`` and
``README.md``; a file given by mistake fails with a traceback once the model has loaded. Checked
here, before anything loads (by every process of a launch: they decide alike, and none of them
writes into the directory before they have all passed this check — their first exchange, in the
trainer's construction, comes first):

* a path that is a file, lies below a file, cannot be written, a link loop or a dead link: refused;
* a directory that is not empty and holds no training run: refused. A training run is what
  transformers' ``Trainer`` leaves behind (:data:`RUN_ENTRIES`: ``checkpoint-N`` folders,
  ``training_args.bin``, ``trainer_state.json``, TensorBoard's ``runs/``); such a directory is
  TRL's own;
* a directory holding an earlier run's checkpoints or its finished model (``training_args.bin``)
  without ``resume_from_checkpoint``: refused, as ``ebpo train`` refuses a plain run on a run
  that holds checkpoints (``trl grpo`` would write over them). Only TensorBoard logs of a run that
  stopped before its first checkpoint may be written beside (TRL adds an event file);
* ``resume_from_checkpoint``: the checkpoint it names, or with ``True`` the newest one of
  ``output_dir``, must be complete (:func:`.save_and_resume.resolve_checkpoint`) and must exist.
* a run killed before its first checkpoint was complete left only interrupted ebpo saves
  (unmarked ``checkpoint-N`` folders holding ebpo's files, the first a save writes, or nothing):
  nothing to resume, so a plain rerun starts again from step 0, as ``ebpo train`` does; the run
  that holds the folder removes those folders first (:func:`clear_interrupted_saves`), saying so.
  An unmarked checkpoint without ebpo's files (``trl grpo``'s, a user's) is never removed.

The lock file (:data:`ebpo.utils.run_lock.LOCK`) is not the run's content. The run that holds the
folder also removes our own temporary files that a kill left in its checkpoints
(``.ebpo_*.<hex>.tmp``, :func:`remove_stale_temporaries`); never another name.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ebpo.integrations.trl.checkpoint_files import REQUIRED_FILES
from ebpo.integrations.trl.save_and_resume import resolve_checkpoint
from ebpo.utils.checkpoints import MARKER, checkpoint_dirs, incomplete_reason, newest_complete
from ebpo.utils.output_folder import check_folder, entries_of

__all__ = [
    "RUN_ENTRIES",
    "check_output_dir",
    "clear_interrupted_saves",
    "interrupted_saves",
    "remove_stale_temporaries",
]

#: a temporary file of ebpo's atomic writes (:mod:`ebpo.utils.files`) of one of its checkpoint
#: files: ``.ebpo_<name>.<hex>.tmp``
OUR_TEMPORARY = re.compile(r"^\.ebpo_[^/]+\.[0-9a-f]{8}\.tmp$")
#: what a plain rerun says of a folder that holds only interrupted saves
STARTS_AGAIN = "nothing to resume; a plain rerun starts again from step 0 (it removes them)"

#: entries that only a transformers ``Trainer`` run leaves in its output directory (besides
#: ``checkpoint-N`` folders)
RUN_ENTRIES = ("training_args.bin", "trainer_state.json", "runs")


def check_output_dir(output_dir: Any, resume_from_checkpoint: Any = None) -> None:
    """Raise ValueError (one line naming ``output_dir``) unless TRL may write into ``output_dir``
    (see the module). Creates and changes nothing."""
    if not isinstance(output_dir, (str, os.PathLike)):
        raise ValueError(f"output_dir must be a path, got {output_dir!r}")
    path = check_folder(output_dir, "output_dir")
    name = os.fspath(output_dir)
    if not _is_training_run(path) and entries_of(path):
        raise ValueError(
            f"output_dir {name!r} is not empty and holds no training run (no "
            f"{PREFIX_CHECKPOINT_DIR}-N, no training_args.bin); TRL would write its model, "
            "config.json and README.md over the files there: choose another directory"
        )
    resuming = resume_from_checkpoint not in (None, False, "")
    if path.is_dir() and not resuming:
        _refuse_an_earlier_run(path, name)
    if resume_from_checkpoint is True and not checkpoint_dirs(path, PREFIX_CHECKPOINT_DIR):
        raise ValueError(
            f"resume_from_checkpoint: output_dir {name!r} holds no "
            f"{PREFIX_CHECKPOINT_DIR}-N to resume"
        )
    if resuming:
        try:
            resolve_checkpoint(resume_from_checkpoint, os.fspath(path))
        except ValueError as error:
            if path.is_dir() and _only_interrupted_saves(path):
                raise ValueError(
                    f"{error}; output_dir {name!r} holds only interrupted saves: {STARTS_AGAIN}"
                ) from error
            raise


def interrupted_saves(output_dir: str | os.PathLike[str]) -> list[Path]:
    """The ``checkpoint-N`` folders of ``output_dir`` when all of them are interrupted ebpo saves
    and it holds no finished model (see the module); else none."""
    path = Path(output_dir)
    if not path.is_dir() or not _only_interrupted_saves(path):
        return []
    return checkpoint_dirs(path, PREFIX_CHECKPOINT_DIR)


def clear_interrupted_saves(
    output_dir: str | os.PathLike[str], say: Callable[[str], None]
) -> list[Path]:
    """Remove :func:`interrupted_saves` (for a plain run that holds the folder), saying each; the
    removed folders."""
    removed = interrupted_saves(output_dir)
    for folder in removed:
        say(
            f"{folder} is incomplete ({incomplete_reason(folder, required=REQUIRED_FILES)}): "
            "removed; training starts again from step 0"
        )
        shutil.rmtree(folder)
    return removed


def remove_stale_temporaries(output_dir: str | os.PathLike[str]) -> list[Path]:
    """Remove ebpo's own temporary files (:data:`OUR_TEMPORARY`) that a kill left in the
    ``checkpoint-N`` folders of ``output_dir`` (for the run that holds the folder: nobody else
    writes there); the removed files."""
    removed = []
    for folder in checkpoint_dirs(output_dir, PREFIX_CHECKPOINT_DIR):
        for entry in folder.iterdir():
            if OUR_TEMPORARY.match(entry.name) and entry.is_file() and not entry.is_symlink():
                entry.unlink()
                removed.append(entry)
    return removed


def _refuse_an_earlier_run(path: Path, name: str) -> None:
    """A plain run may not write over an earlier run's checkpoints or finished model; only
    interrupted saves (nothing to resume) and TensorBoard logs are written over."""
    if _only_interrupted_saves(path):
        return
    checkpoints = [p.name for p in checkpoint_dirs(path, PREFIX_CHECKPOINT_DIR)]
    earlier = checkpoints[:3] + [entry for entry in RUN_ENTRIES[:2] if (path / entry).exists()]
    if not earlier:
        return
    newest, _ = newest_complete(path, PREFIX_CHECKPOINT_DIR, required=REQUIRED_FILES)
    # on the command line transformers reads `true` as a path: name the newest checkpoint
    how = (
        f"continue it with --resume_from_checkpoint {os.path.join(name, newest.name)}, "
        "or choose another directory"
        if newest is not None
        else "it has no complete checkpoint to continue: choose another directory"
    )
    raise ValueError(
        f"output_dir {name!r} holds an earlier training run ({', '.join(earlier)}): {how}; "
        "ebpo grpo never writes over a run"
    )


def _only_interrupted_saves(path: Path) -> bool:
    """Every ``checkpoint-N`` of ``path`` (at least one) an interrupted ebpo save, and no
    finished model (``training_args.bin`` / ``trainer_state.json`` beside them)."""
    folders = checkpoint_dirs(path, PREFIX_CHECKPOINT_DIR)
    finished = any((path / entry).exists() for entry in RUN_ENTRIES[:2])
    return bool(folders) and not finished and all(_interrupted_save(f) for f in folders)


def _interrupted_save(folder: Path) -> bool:
    """An unmarked folder that an ebpo save began: empty, or holding ebpo's files (a save writes
    them first), temporary ones included. A symlink is never one."""
    if folder.is_symlink() or (folder / MARKER).exists():
        return False
    names = [entry.name for entry in folder.iterdir()]
    return not names or any(n.startswith(("ebpo_", ".ebpo_")) for n in names)


def _is_training_run(path: Path) -> bool:
    return bool(checkpoint_dirs(path, PREFIX_CHECKPOINT_DIR)) or any(
        (path / name).exists() for name in RUN_ENTRIES
    )
