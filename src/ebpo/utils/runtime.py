"""Process-level settings shared by the trainers, the verl plug-in and the benchmarks."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["torch_threads"]


@contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """Run the block with ``count`` torch intra-op threads, then restore the previous number.

    Small tensor work (a batch of rewards, a tiny model) gains nothing from parallel regions, and
    on a busy CPU each region waits for every pool thread to be scheduled: measured on a loaded
    2-core machine, the estimator on 16k rewards took ~2-8 ms with one thread and ~20-120 ms with
    two (benchmarks/bench_verl_compute_advantage.py). ``None`` leaves the setting alone.
    """
    previous = torch.get_num_threads()
    if count is None or count == previous:
        yield
        return
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
