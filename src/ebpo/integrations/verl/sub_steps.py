"""ebpo's metrics in a verl step made of sub-steps (``trainer.v1.<mode>.parameter_sync_step`` > 1).

verl's v1 trainer (``PPOTrainer.step``, verl 0.9.1) runs ``parameter_sync_step`` sub-steps a step,
each on ``train_batch_size / parameter_sync_step`` prompts, so an advantage estimator is called
once per sub-step with a fresh ``metrics`` dict; verl's ``MetricsAggregator`` then folds the
sub-steps' dicts into the step's by the metric's NAME: ``*max*`` → max, ``*min*`` → min,
``*sum*``/``*total*`` → sum, anything else → the mean weighted by each sub-step's rows. Left to
that rule, ``ebpo/num_responses`` would be the mean number of responses of a sub-step, and
``ebpo/prior_count`` (the rewards in the running prior) the mean of its values after each
sub-step: neither means what it says. So the plug-in hands verl, for the sub-steps of one step:

* **batch counts** (:data:`BATCH_COUNTS`: ``num_responses``, ``num_groups``,
  ``missing_sessions``): nothing until the step's last sub-step, then their sum over the step —
  the count of the whole step, as in a step without sub-steps;
* **running counts** (:data:`RUNNING_COUNTS`: ``prior_count``, ``jspo_steps``,
  ``num_cluster_priors``): only at the last sub-step — the value after the step;
* **everything else** at every sub-step, left to verl's rule: fractions and means
  (``reward_mean``, ``zero_signal_group_frac``, ``shrinkage_mean``, ``prior_mean``, ...) become
  row-weighted means over the sub-steps, ``*_max`` / ``*_min`` the step's extreme.

A metric verl receives from one sub-step only is that value after aggregation (a weighted mean of
one value, or its max, is the value). The estimator's JSON-lines file keeps one record per call,
every value as that call computed it. Without sub-steps (``parameter_sync_step=1``, the legacy
trainer) the metrics pass through unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["BATCH_COUNTS", "RUNNING_COUNTS", "SubStepMetrics", "sub_step_position"]

#: counts over one batch: summed over a step's sub-steps
BATCH_COUNTS = frozenset({"num_responses", "num_groups", "missing_sessions"})
#: counts kept across steps: the value after a step's last sub-step
RUNNING_COUNTS = frozenset({"prior_count", "jspo_steps", "num_cluster_priors"})


def sub_step_position(trainer: Any) -> tuple[int, int]:
    """``(index, count)`` of the sub-step a verl v1 trainer is in: its ``local_trigger_step``
    and ``parameter_sync_step`` (set by ``PPOTrainer.step``); ``(0, 1)`` for a trainer without
    sub-steps (legacy ``RayPPOTrainer``, other trainers)."""
    count = getattr(trainer, "parameter_sync_step", 1)
    index = getattr(trainer, "local_trigger_step", 0)
    if not isinstance(count, int) or not isinstance(index, int) or count <= 1:
        return 0, 1
    if not 0 <= index < count:
        raise ValueError(
            f"verl's trainer is in sub-step {index} of parameter_sync_step={count}; expected 0..{count - 1}"
        )
    return index, count


class SubStepMetrics:
    """The batch counts of the sub-steps seen so far in the current step, per estimator name
    (see module docstring)."""

    def __init__(self) -> None:
        self._totals: dict[str, dict[str, float]] = {}

    def fold(
        self, name: str, metrics: Mapping[str, float], index: int, count: int
    ) -> dict[str, float]:
        """The metrics of sub-step ``index`` of ``count`` to put into verl's per-sub-step dict.

        The first sub-step of a step starts the sums afresh, so a step that failed half-way
        leaves nothing behind for the next."""
        if count <= 1:
            return dict(metrics)
        if index == 0:
            self._totals[name] = {}
        totals = self._totals.setdefault(name, {})
        last = index == count - 1
        shown: dict[str, float] = {}
        for key, value in metrics.items():
            if key in BATCH_COUNTS:
                totals[key] = totals.get(key, 0.0) + float(value)
                if last:
                    shown[key] = totals[key]
            elif key in RUNNING_COUNTS:
                if last:
                    shown[key] = float(value)
            else:
                shown[key] = float(value)
        return shown
