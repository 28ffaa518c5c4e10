"""The statuses of a scored response and the per-process counters of :func:`reward_stats`
(one per status, plus ``calls``, ``correct`` and ``worker_restarts``), shared by the scorer and
the helper-process pool. Thread-safe; a forked child gets a fresh lock.
"""

from __future__ import annotations

import os
import threading
from collections import Counter

__all__ = ["STATUSES", "UNSCORABLE", "count", "reset_reward_stats", "reward_stats"]

# Statuses of a scored response (ScoreResult.status); each is also a counter in reward_stats().
STATUSES = (
    "exact",  # normalised strings equal
    "integer",  # both plain integers, compared as ints
    "verified",  # math-verify said equal
    "rejected",  # compared and found different
    "no_answer",  # nothing extractable
    "too_long",  # answer exceeds max_answer_chars / max_brace_depth: not parsed
    "timeout",  # math-verify exceeded the time limit
    "error",  # any exception inside math-verify
    "missing_ground_truth",  # None, NaN, pandas.NA, blank, or "nan"/"None"/"N/A"... (extract.py)
    "bad_input",  # response or ground truth neither text nor a number (bytes, list, object...)
)
#: Statuses of pairs that could not be compared at all (the adapters report them as unscorable).
UNSCORABLE = ("missing_ground_truth", "bad_input")

_STATS: Counter[str] = Counter()
_STATS_LOCK = threading.Lock()


def count(*keys: str) -> None:
    """Add one to each counter in ``keys``."""
    with _STATS_LOCK:
        for key in keys:
            _STATS[key] += 1


def reward_stats() -> dict[str, int]:
    """Counters since the last reset: ``calls``, ``correct``, one per status in :data:`STATUSES`
    (``timeout`` is the number of responses that scored 0 because of the time limit;
    ``missing_ground_truth`` and ``bad_input`` the pairs that could not be compared at all) and
    ``worker_restarts`` (helper processes killed after overrunning). Counted per process: a
    forked worker counts its own calls."""
    with _STATS_LOCK:
        out = {key: 0 for key in ("calls", "correct", *STATUSES, "worker_restarts")}
        out.update(_STATS)
        return out


def reset_reward_stats() -> None:
    """Zero every counter of :func:`reward_stats`."""
    with _STATS_LOCK:
        _STATS.clear()


def _after_fork_in_child() -> None:
    global _STATS_LOCK
    _STATS_LOCK = threading.Lock()  # a parent thread may have held it at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
