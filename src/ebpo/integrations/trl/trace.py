"""A diagnostic: each process of an EBPOTrainer run writes what it computed, step by step.

Off unless the environment variable ``EBPO_TRACE_DIR`` names a directory. Then every process
appends JSON lines to ``$EBPO_TRACE_DIR/rank<k>.jsonl`` (``k`` = its rank):

- ``{"event": "estimator", ...}`` after every update of the estimator (once per generation batch
  in training): the rewards it was given, its state after the update and the state's digest;
- ``{"event": "loss", ...}`` after every training loss (one per micro-step): the advantages that
  entered it (this process's slice) and the loss;
- ``{"event": "resume", ...}`` after resuming from a checkpoint: the checkpoint and the restored
  state.

Every line carries ``rank``, ``world_size``, ``global_step`` and ``micro_step`` (TRL's counter of
forward/backward passes). It is how the tests observe every process of ``accelerate launch -m ebpo
grpo`` (the per-rank state, the per-step advantages and losses of an uninterrupted and a resumed
run); it is also a way to look into a run by hand. It writes as it goes, not atomically, and reads
the loss back from the device (one synchronisation per micro-step): a diagnostic, not for
production runs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

__all__ = ["TRACE_DIR_ENV", "RankTrace", "trace_file"]

#: the environment variable that turns the trace on (a directory; created if missing)
TRACE_DIR_ENV = "EBPO_TRACE_DIR"


def trace_file(directory: str | os.PathLike[str], rank: int) -> Path:
    """The trace of process ``rank`` inside ``directory``."""
    return Path(directory) / f"rank{rank}.jsonl"


class RankTrace:
    """Appends one process's records to its trace file (see the module)."""

    def __init__(self, directory: str | os.PathLike[str], rank: int, world_size: int) -> None:
        self.path = trace_file(directory, rank)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.rank, self.world_size = rank, world_size

    @classmethod
    def from_env(cls, rank: int, world_size: int) -> RankTrace | None:
        """A trace into ``$EBPO_TRACE_DIR``, or None when the variable is unset or empty."""
        directory = os.environ.get(TRACE_DIR_ENV)
        return cls(directory, rank, world_size) if directory else None

    def write(self, event: str, global_step: int, micro_step: int, **fields: Any) -> None:
        record = {
            "event": event,
            "rank": self.rank,
            "world_size": self.world_size,
            "global_step": int(global_step),
            "micro_step": int(micro_step),
            **{key: _plain(value) for key, value in fields.items()},
        }
        with self.path.open("a") as file:
            file.write(json.dumps(record) + "\n")


def _plain(value: Any) -> Any:
    """Tensors as (nested) lists of Python numbers, anything else unchanged."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().tolist()
    return value
