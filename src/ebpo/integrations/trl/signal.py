"""Runs that cannot learn, said in one line.

When every completion of every group gets the same reward as the others of its group (a tiny or
untrained model whose answers all score 0, or prompts the model always solves), every
group-relative estimator gives every completion advantage 0, and so does EBPO once its batch
normalisation removes the penalty shared by the whole batch (docs/estimators.md, "The
batch-normalisation caveat"). The policy-gradient loss is then 0 and the policy does not move:
the run trains nothing, while TRL's logs only show a loss of 0.

:class:`NoSignalWatch` reads the estimator's ``zero_signal_group_frac`` (the fraction of groups it
gives no signal) once per generation batch and, after :data:`PATIENCE` batches in a row without any
signal, returns a one-line notice; :class:`ebpo.integrations.trl.EBPOTrainer` logs it as a warning
on the main process (logger ``ebpo.integrations.trl.signal``) and keeps it as
``trainer.no_signal_notice``. The notice is given once per such stretch; a batch with a signal
starts the count again.
"""

from __future__ import annotations

import logging

from ebpo.utils.checks import check_int

__all__ = ["PATIENCE", "NoSignalWatch", "logger"]

#: generation batches in a row without any learning signal before the notice is given
PATIENCE = 5

logger = logging.getLogger(__name__)


class NoSignalWatch:
    """Counts consecutive generation batches in which no group carried a learning signal."""

    def __init__(self, patience: int = PATIENCE) -> None:
        check_int("patience", patience, low=1)
        self.patience = patience
        self.streak = 0
        self.first_step = 0
        self.rewards: set[float] = set()
        self.notice: str | None = None

    def update(self, step: int, zero_signal_group_frac: float, reward_mean: float) -> str | None:
        """Record one generation batch (``step``: the optimizer step it trains); return the notice
        when this batch completes a stretch of ``patience`` batches without signal, else None."""
        if zero_signal_group_frac < 1.0:
            self.streak, self.rewards = 0, set()
            return None
        if self.streak == 0:
            self.first_step = step
        self.streak += 1
        self.rewards.add(round(float(reward_mean), 6))
        if self.streak != self.patience:
            return None
        if self.rewards == {0.0}:
            what = "every completion scored 0"
        else:
            what = (
                "every group's completions got equal rewards (mean reward "
                + ", ".join(f"{r:g}" for r in sorted(self.rewards))
                + ")"
            )
        self.notice = (
            f"no learning signal in {self.streak} generation batches in a row (from step "
            f"{self.first_step}): {what}, so every advantage is 0 and the policy does not change; "
            "the prompts are too hard (or too easy) for this model, or the reward function never "
            "scores an answer (TRL logs rewards/<function>/mean)"
        )
        return self.notice
