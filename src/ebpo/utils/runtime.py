"""Process-level settings shared by the trainers, the verl plug-in and the benchmarks."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from ebpo.utils.checks import check_positive_int

__all__ = ["quiet_logger", "torch_threads"]


@contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """Run the block with ``count`` torch intra-op threads, then restore the previous number (also
    when the block raises). ``None`` leaves the setting alone.

    Small tensor work (a batch of rewards, a tiny model) gains nothing from parallel regions, and
    on a busy CPU each region waits for every pool thread to be scheduled, so one thread is faster
    there (benchmarks/bench_verl_compute_advantage.py compares both).

    Raises:
        ValueError: ``count`` is neither None nor an integer >= 1 (before anything changes).
    """
    if count is not None:
        count = check_positive_int("count", count)
    previous = torch.get_num_threads()
    if count is None or count == previous:
        yield
        return
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@contextmanager
def quiet_logger(name: str, level: int = logging.CRITICAL) -> Iterator[None]:
    """Only records of ``level`` and above from logger ``name`` while the block runs (for a caller
    that reports the matter itself); the logger's level comes back afterwards."""
    log = logging.getLogger(name)
    previous = log.level
    log.setLevel(level)
    try:
        yield
    finally:
        log.setLevel(previous)
