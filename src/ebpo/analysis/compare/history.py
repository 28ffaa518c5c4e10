"""A run's logged history, ``metric -> step -> value``, read the same way from every format
``ebpo compare`` takes: TRL's ``log_history`` entries, verl's ``{"step", "data"}`` lines,
``ebpo train``'s ``metrics.jsonl`` records and its evaluations.

* **Steps** are whole numbers, finite, from 0 to 2^53 (JSON's ``3.0`` is step 3). Anything else
  (``1.7``, Infinity, NaN, text, a bool, no step at all) is refused when it is read: ValueError
  naming the run, the file and the entry.
* **Metrics** are the keys with a number in at least one entry, bookkeeping aside (the step, the
  epoch, clocks, ``*_runtime``, ``*_per_second``, verl's ``timing_*`` and ``perf/*``). A null,
  NaN or text value of a metric, in whichever entry, the first included, is NaN at its step; an
  infinite one stays infinite. Neither is a number to compare: a compared metric that is not
  finite at a common step is refused (:func:`ebpo.analysis.compare.pairing.common_steps`).
* A metric logged **twice at one step** keeps its value where both agree; where they differ the
  step is a conflict (:attr:`History.conflicts`), refused when that metric is compared, naming
  the run and the step (a resumed run that logged some steps twice, two runs' logs in one file).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ebpo.utils.checks import is_real

__all__ = ["MAX_STEP", "History", "whole_step"]

#: the largest step read: every step up to it is exact as a float (the statistics' steps are)
MAX_STEP = 2**53
#: what a training log holds besides metrics: bookkeeping, clocks and end-of-training summaries
_NOT_METRICS = re.compile(
    r"^(step|epoch|time|step_time|total_flos|train_loss|train_runtime|global_step|"
    r".*_runtime|.*_per_second|timing_.*|perf/.*|.*/time.*)$"
)


def whole_step(value: Any, where: str) -> int:
    """``value`` as a step: a finite whole number from 0 to :data:`MAX_STEP`; ValueError naming
    ``where`` (the run, the file and the entry) otherwise."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_STEP:
        return value
    if is_real(value) and math.isfinite(_float(value)) and float(value).is_integer():
        step = int(value)
        if 0 <= step <= MAX_STEP:
            return step
    shown = repr(value) if not isinstance(value, str) else repr(value[:40])
    raise ValueError(
        f"{where}: step {shown} is not a whole number from 0 to 2^53: a step counts "
        "optimizer updates"
    )


@dataclass
class History:
    """The history of one run, filled an entry at a time (:meth:`add`), read with
    :meth:`metrics`."""

    values: dict[str, dict[int, float]] = field(default_factory=dict)
    #: metric -> step -> (first value, a different later one)
    conflicts: dict[str, dict[int, tuple[float, float]]] = field(default_factory=dict)
    _numeric: set[str] = field(default_factory=set)

    def add(self, step: Any, entry: Mapping[str, Any], where: str) -> None:
        """Record ``entry``'s values at ``step`` (checked: :func:`whole_step`, ``where`` naming
        the run, the file and the entry)."""
        number = whole_step(step, where)
        for key, value in entry.items():
            if not isinstance(key, str) or _NOT_METRICS.match(key):
                continue
            if is_real(value):
                self._numeric.add(key)
                self._put(key, number, _float(value))
            elif value is None or isinstance(value, str):
                self._put(key, number, math.nan)

    def metrics(self) -> dict[str, dict[int, float]]:
        """``metric -> step -> value`` of the keys logged as a number at least once."""
        return {k: v for k, v in self.values.items() if k in self._numeric}

    def _put(self, key: str, step: int, value: float) -> None:
        steps = self.values.setdefault(key, {})
        if step in steps:
            old = steps[step]
            if not (old == value or math.isnan(old) and math.isnan(value)):
                self.conflicts.setdefault(key, {}).setdefault(step, (old, value))
            return
        steps[step] = value


def _float(value: Any) -> float:
    """A real number as a float; an integer too large for one is infinite (refused if compared)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf
