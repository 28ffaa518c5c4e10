"""The prompt order of a resumed run: the uninterrupted run's, from any checkpoint.

TRL 1.16's ``RepeatSampler`` shuffles the prompts with a generator of its own, seeded once with
``args.seed`` when the sampler is built, and draws one permutation each time an epoch starts
(``torch.randperm(len(dataset))``), so epoch ``e`` gets the ``e + 1``-th permutation of that
generator. A resumed trainer builds a new sampler, seeded again, and transformers fast-forwards
only the batches of the current epoch (``skip_first_batches``), not the permutations of the
epochs before it. Resumed in epoch ``e >= 1`` — a checkpoint at the end of an epoch included, the
next batch being the first of a new epoch — the run would train epoch ``e`` on epoch 0's order:
other prompts, other completions, another run.

:class:`ResumedSampler` wraps that sampler: the first time it is iterated it reseeds the
generator and draws the permutations of the ``e`` epochs already trained (``e`` = the whole part of
transformers' ``state.epoch``, which a checkpoint stores: ``e`` mid-epoch, exactly ``e`` at the
start of epoch ``e``), then iterates as before. An uninterrupted run starts at epoch 0 and gets
exactly TRL's order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import Sampler

__all__ = ["ResumedSampler", "resumable"]


def resumable(sampler: Any) -> bool:
    """Whether ``sampler`` shuffles with a seeded generator of its own (TRL's ``RepeatSampler``
    with ``shuffle=True``), so that its order in a later epoch can be reproduced."""
    return (
        bool(getattr(sampler, "shuffle", False))
        and getattr(sampler, "generator", None) is not None
        and isinstance(getattr(sampler, "seed", None), int)
    )


class ResumedSampler(Sampler[int]):
    """``sampler`` positioned at the epoch ``epoch()`` says when first iterated (see the module).

    ``epoch`` is read once, at the first iteration (transformers' ``state.epoch``: float, None
    before training); later iterations continue the generator as the wrapped sampler does.
    """

    def __init__(self, sampler: Any, epoch: Callable[[], float | None]) -> None:
        if not resumable(sampler):
            raise ValueError("sampler must shuffle with a seeded generator of its own")
        self.sampler = sampler
        self._epoch = epoch
        self._positioned = False

    @property
    def generator(self) -> Any:
        """The wrapped sampler's generator (what accelerate keeps equal across processes)."""
        return self.sampler.generator

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self) -> Iterator[int]:
        if not self._positioned:
            self._positioned = True
            epochs_done = math.floor(self._epoch() or 0)
            self.sampler.generator.manual_seed(self.sampler.seed)
            for _ in range(epochs_done):  # each epoch drew its permutation as it started
                next(iter(self.sampler), None)
        return iter(self.sampler)
