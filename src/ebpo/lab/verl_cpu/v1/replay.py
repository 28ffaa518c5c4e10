"""verl's sync replay buffer with the rows of a step in dataset order:
``trainer.v1.sampler.custom_sampler.{path,name}`` → :class:`OrderedReplayBuffer`.

verl's v1 trainer reads each step's rows from TransferQueue in the order the agent loop stored them
(``ReplayBuffer._materialize_batch``), and verl's agent loop is asynchronous: the order is the order
in which generations finished. Two runs that train on the same samples would then train on them
in different orders — same numbers up to floating-point summation order, not bit for bit. This
subclass (verl's hook for a custom sampler) keeps everything of verl's ``ReplayBuffer`` —
selection, eviction, off-policy control — and only sorts the selected rows by (dataset ``index``,
``session_id``, output index), the order verl's legacy trainer has (the dataloader's order,
samples of a prompt together), so that the smoke can demand a resumed run to be bit-for-bit the
uninterrupted one. Padding rows are added later, by the trainer's ``_balance_batch``.

With sub-steps (``+trainer.v1.sync.parameter_sync_step=N``: verl's ``PPOTrainer.step`` samples
``train_batch_size / N`` prompts N times from one step's generation) verl picks a sub-step's prompts
among those whose generation has finished, in set order — which prompts train in which sub-step
would then depend on timing. Here a training sample waits until the step's generation has ended
(no prompt pending or running: in ``sync`` mode the whole batch is generated at once, so the first
sub-step waits for what the last one needs anyway) and takes the prompts in dataset order.

``trainer.v1.sampler.sampler_kwargs.poll_interval`` sets verl's polling interval (verl: 2 s; on a
step that takes a fraction of a second, the wait would dominate).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import transfer_queue as tq

# verl is this module's base (a verl replay buffer): it needs the verl extra
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

__all__ = ["OrderedReplayBuffer", "prompt_indexes", "row_order"]


def row_order(keys: list[str], indexes: list[int], sessions: list[int]) -> list[int]:
    """Positions of ``keys`` (verl's ``{uid}_{session_id}_{output}``) sorted by dataset index,
    session and output index."""
    outputs = [int(key.rsplit("_", 1)[-1]) for key in keys]
    return sorted(range(len(keys)), key=lambda i: (indexes[i], sessions[i], outputs[i]))


class OrderedReplayBuffer(ReplayBuffer):
    """verl's ``ReplayBuffer`` whose batches are in dataset order (see module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        sampler_kwargs = kwargs.get("sampler_kwargs") or {}
        kwargs.setdefault("poll_interval", float(sampler_kwargs.get("poll_interval", 2.0)))
        super().__init__(*args, **kwargs)

    def _materialize_batch(
        self,
        partition_id: str,
        selected_prompt_uids: list[str],
        partition_snapshot: dict[str, dict],
    ) -> Any:
        batch = super()._materialize_batch(partition_id, selected_prompt_uids, partition_snapshot)
        if not batch.keys:
            return batch
        data = tq.kv_batch_get(
            keys=batch.keys, partition_id=partition_id, select_fields=["index", "session_id"]
        )
        order = row_order(
            list(batch.keys),
            [int(x) for x in list(data["index"])],
            [int(x) for x in list(data["session_id"])],
        )
        return dataclasses.replace(
            batch, keys=[batch.keys[i] for i in order], tags=[batch.tags[i] for i in order]
        )

    def _sampleable_terminal_keys(self, partition_id: str, eviction_reasons: Any) -> set[str]:
        if partition_id == "train" and (
            self.pending_keys[partition_id] or self.running_keys[partition_id]
        ):
            return set()  # the step's generation has not ended (see module docstring)
        return super()._sampleable_terminal_keys(partition_id, eviction_reasons)

    def _select_prompt_uids(
        self, partition_id: str, sampleable_keys: set[str], batch_size: int
    ) -> tuple[list[str], dict[str, dict], dict[str, int]]:
        selected, partition, steps = super()._select_prompt_uids(
            partition_id, sampleable_keys, len(sampleable_keys)
        )
        indexes = prompt_indexes(partition_id, selected, partition)
        selected.sort(key=lambda uid: (steps.get(uid, 0), indexes.get(uid, math.inf), uid))
        return selected[:batch_size], partition, steps


def prompt_indexes(
    partition_id: str, uids: list[str], partition: dict[str, dict]
) -> dict[str, int]:
    """The dataset ``index`` of each prompt of ``uids`` that has a trajectory in ``partition``
    (verl's keys ``{uid}_{session}_{output}``), read from TransferQueue (one row per prompt)."""
    first: dict[str, str] = {}
    for key in partition:
        first.setdefault(key.split("_")[0], key)
    keys = [first[uid] for uid in uids if uid in first]
    if not keys:
        return {}
    data = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=["index"])
    return {key.split("_")[0]: int(x) for key, x in zip(keys, list(data["index"]), strict=True)}
