"""What :class:`~ebpo.integrations.trl.EBPOTrainer` adds to a ``checkpoint-N/`` directory, so that a
resumed run continues exactly where the uninterrupted one would be.

TRL generates completions once per *generation batch* and trains on them for
``generate_every = steps_per_generation × num_iterations`` micro-steps. The estimator is updated
once per generation batch, when the batch is scored. A checkpoint can fall in the middle of a
generation batch (``steps_per_generation > gradient_accumulation_steps`` or ``num_iterations > 1``):
the estimator has already counted the batch, but TRL 1.16 keeps neither the batch nor its position
in the cycle across a resume — it restarts its micro-step counter at 0 and generates (and scores)
the batch again, which counts it twice and shifts every later generation.

Files (JSON via :func:`ebpo.utils.files.write_json`, tensors via ``torch.save``, all written atomically):

- ``ebpo_estimator_state.json`` — ``estimator.state_dict()`` (the running prior), written by the
  main process; loadable by hand into ``ebpo.make_estimator(...)``.
- ``ebpo_generation_state.json`` — the position in the generation cycle (TRL's micro-step counter,
  ``generate_every``, ``steps_per_generation``, number of processes), the no-signal watch's counts
  (:class:`.signal.NoSignalWatch`: the run's ``ebpo/no_signal_batch_frac`` goes on from them) and,
  when the checkpoint falls inside a generation batch, the estimator state and the watch's counts
  from before that batch was scored.
- ``ebpo_generation_buffer_<rank>.pt`` — inside a generation batch only: each process's scored
  completions not yet consumed (TRL's ``_buffered_inputs``), with their advantages.

On resume inside a generation batch, the buffers and the counter are restored, so TRL does not
generate again and the run is identical to an uninterrupted one. If the cycle's layout changed
(another ``steps_per_generation``, ``num_iterations`` or number of processes), the estimator falls
back to the state from before the batch (TRL then generates the batch again and it is counted
once) and a warning says the run is no longer identical.

A checkpoint is resumed from only when it is complete: ``ebpo_checkpoint_complete.json``, written
last, lists every file with its size (:mod:`ebpo.utils.checkpoints`; the order of the writes is in
:mod:`.save_and_resume`).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import torch
from transformers.trainer import TRAINER_STATE_NAME

from ebpo.utils.checks import is_integer
from ebpo.utils.files import atomic_path, read_json, write_json

__all__ = [
    "ESTIMATOR_STATE_FILE",
    "GENERATION_STATE_FILE",
    "REQUIRED_FILES",
    "GenerationCycle",
    "SavedState",
    "generation_buffer_file",
    "read_buffer",
    "read_state",
    "write_buffer",
    "write_state",
]

#: file written into every ``checkpoint-N/`` directory: the estimator's ``state_dict()``
ESTIMATOR_STATE_FILE = "ebpo_estimator_state.json"
#: the position in TRL's generation cycle and the estimator state before the current batch
GENERATION_STATE_FILE = "ebpo_generation_state.json"
#: what a complete checkpoint of EBPOTrainer holds at least (besides what TRL saves)
REQUIRED_FILES = (TRAINER_STATE_NAME, ESTIMATOR_STATE_FILE, GENERATION_STATE_FILE)


def generation_buffer_file(process_index: int) -> str:
    """Name of process ``process_index``'s buffered generation batch inside a checkpoint."""
    return f"ebpo_generation_buffer_{process_index}.pt"


@dataclass(frozen=True)
class GenerationCycle:
    """Where a trainer stands in TRL's generation cycle.

    ``micro_step`` is TRL's ``_step`` (forward/backward passes so far); a new generation batch is
    generated when ``micro_step % generate_every == 0``.
    """

    micro_step: int
    generate_every: int
    steps_per_generation: int
    num_processes: int

    @property
    def inside_batch(self) -> bool:
        """True when the next micro-step trains on completions generated before it."""
        return self.micro_step % self.generate_every != 0

    def same_layout(self, other: GenerationCycle) -> bool:
        """Whether buffers saved under ``self`` can be replayed by a trainer set up as ``other``."""
        return (self.generate_every, self.steps_per_generation, self.num_processes) == (
            other.generate_every,
            other.steps_per_generation,
            other.num_processes,
        )


class SavedState(NamedTuple):
    """What :func:`read_state` found in a checkpoint; None for what it lacks (checkpoints written
    before the cycle file existed have only the estimator state, before the watch's counts no
    ``signal``)."""

    estimator: dict[str, Any] | None
    cycle: GenerationCycle | None
    estimator_before_batch: dict[str, Any] | None = None
    signal: dict[str, Any] | None = None
    signal_before_batch: dict[str, Any] | None = None


def write_state(checkpoint_dir: str, saved: SavedState) -> None:
    """Write the estimator state and the generation-cycle file (main process only); the states
    before the batch only when the checkpoint falls inside one."""
    assert saved.estimator is not None and saved.cycle is not None
    write_json(os.path.join(checkpoint_dir, ESTIMATOR_STATE_FILE), saved.estimator, indent=None)
    inside = saved.cycle.inside_batch
    record = {
        **asdict(saved.cycle),
        "estimator_state_before_batch": saved.estimator_before_batch if inside else None,
        "signal_watch": saved.signal,
        "signal_watch_before_batch": saved.signal_before_batch if inside else None,
    }
    write_json(os.path.join(checkpoint_dir, GENERATION_STATE_FILE), record, indent=None)


def read_state(checkpoint_dir: str) -> SavedState:
    """The states :func:`write_state` wrote. Raises ValueError naming the file when a file is not
    what EBPOTrainer wrote: not JSON (or nested too deeply, :mod:`ebpo.utils.structured_input`), a
    state that is not an object, or a cycle whose counters are not integers (``micro_step`` >= 0,
    the others >= 1)."""
    estimator_path = os.path.join(checkpoint_dir, ESTIMATOR_STATE_FILE)
    estimator_state = None
    if os.path.exists(estimator_path):
        estimator_state = _read_object(estimator_path)
    cycle_path = os.path.join(checkpoint_dir, GENERATION_STATE_FILE)
    if not os.path.exists(cycle_path):
        return SavedState(estimator_state, None)
    record = _read_object(cycle_path)
    values = []
    for key, low in _CYCLE_FIELDS.items():
        value: Any = record.get(key)  # a JSON value, checked here
        if not (is_integer(value) and value >= low):
            raise ValueError(
                f"{cycle_path} is not a generation-cycle record written by EBPOTrainer: {key} "
                f"must be an integer >= {low}, got {value!r}"
            )
        values.append(int(value))
    objects = []
    for key in ("estimator_state_before_batch", "signal_watch", "signal_watch_before_batch"):
        value = record.get(key)
        if value is not None and not isinstance(value, dict):
            raise ValueError(
                f"{cycle_path}: {key} must be an object or null, got {type(value).__name__}"
            )
        objects.append(value)
    return SavedState(estimator_state, GenerationCycle(*values), *objects)


#: the counters of a generation-cycle record and their smallest values
_CYCLE_FIELDS = {
    "micro_step": 0,
    "generate_every": 1,
    "steps_per_generation": 1,
    "num_processes": 1,
}


def _read_object(path: str) -> dict[str, Any]:
    try:
        value = read_json(path)
    except (OSError, ValueError) as error:
        raise ValueError(f"{path} is not readable JSON ({error})") from error
    if not isinstance(value, dict):
        raise ValueError(f"{path} should hold a JSON object, got {type(value).__name__}")
    return value


def write_buffer(
    checkpoint_dir: str, process_index: int, buffered_inputs: list[dict[str, Any]]
) -> None:
    """Save this process's buffered generation batch (TRL's ``_buffered_inputs``)."""
    with atomic_path(os.path.join(checkpoint_dir, generation_buffer_file(process_index))) as tmp:
        torch.save(buffered_inputs, tmp)


def read_buffer(
    checkpoint_dir: str, process_index: int, device: torch.device | str
) -> list[dict[str, Any]]:
    """Load this process's buffered generation batch onto ``device`` (tensors, lists and None only)."""
    path = os.path.join(checkpoint_dir, generation_buffer_file(process_index))
    # Loaded on the CPU first: torch cannot restore onto an indexed CPU device ("cpu:0"), which is
    # what accelerate reports for each process of a multi-process CPU run.
    return _to_device(torch.load(path, map_location="cpu", weights_only=True), torch.device(device))


def _to_device(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value if device.type == "cpu" else value.to(device)
    if isinstance(value, dict):
        return {key: _to_device(item, device) for key, item in value.items()}
    if isinstance(value, list):
        return [_to_device(item, device) for item in value]
    return value
