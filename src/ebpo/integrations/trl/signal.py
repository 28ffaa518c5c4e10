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
starts the count again. A run too short for that (fewer than :data:`PATIENCE` generation batches)
in which no batch had a signal is told so at its end (:meth:`NoSignalWatch.end_of_run`), and every
run logs the fraction of its generation batches without signal (``ebpo/no_signal_batch_frac``).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from ebpo.utils.checks import check_int, is_integer, is_real

__all__ = ["PATIENCE", "NoSignalWatch", "logger"]

#: generation batches in a row without any learning signal before the notice is given
PATIENCE = 5

logger = logging.getLogger(__name__)

_CONSEQUENCE = (
    "so every advantage is 0 and the policy does not change; the prompts are too hard (or too "
    "easy) for this model, or the reward function never scores an answer (TRL logs "
    "rewards/<function>/mean)"
)


class NoSignalWatch:
    """Counts the generation batches in which no group carried a learning signal."""

    def __init__(self, patience: int = PATIENCE) -> None:
        check_int("patience", patience, low=1)
        self.patience = patience
        self.streak = 0
        self.first_step = 0
        self.rewards: set[float] = set()
        self.notice: str | None = None
        #: generation batches seen, and those among them without any signal
        self.batches = 0
        self.batches_without_signal = 0

    @property
    def no_signal_batch_frac(self) -> float | None:
        """The fraction of the batches seen in which no group had a signal; None before any."""
        return self.batches_without_signal / self.batches if self.batches else None

    def update(self, step: int, zero_signal_group_frac: float, reward_mean: float) -> str | None:
        """Record one generation batch (``step``: the optimizer step it trains); return the notice
        when this batch completes a stretch of ``patience`` batches without signal, else None."""
        self.batches += 1
        if zero_signal_group_frac < 1.0:
            self.streak, self.rewards = 0, set()
            return None
        self.batches_without_signal += 1
        if self.streak == 0:
            self.first_step = step
        self.streak += 1
        self.rewards.add(round(float(reward_mean), 6))
        if self.streak != self.patience:
            return None
        self.notice = (
            f"no learning signal in {self.streak} generation batches in a row (from step "
            f"{self.first_step}): {self._what()}, {_CONSEQUENCE}"
        )
        return self.notice

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of the watch (JSON values), so a resumed run counts on."""
        return {
            "batches": self.batches,
            "batches_without_signal": self.batches_without_signal,
            "streak": self.streak,
            "first_step": self.first_step,
            "rewards": sorted(self.rewards),
            "notice": self.notice,
        }

    def load_state_dict(self, state: Any) -> None:
        """Restore :meth:`state_dict`; ValueError naming the entry that is not what it wrote
        (counts: integers >= 0, ``streak`` <= ``batches_without_signal`` <= ``batches``; ``rewards``:
        finite numbers; ``notice``: a string or null). Nothing changes on error."""
        if not isinstance(state, dict) or set(state) != set(self.state_dict()):
            raise ValueError(
                f"a no-signal watch state must have the keys {sorted(self.state_dict())}"
            )
        counts = ("batches", "batches_without_signal", "streak", "first_step")
        for key in counts:
            if not (is_integer(state[key]) and state[key] >= 0):
                raise ValueError(
                    f"no-signal watch {key} must be an integer >= 0, got {state[key]!r}"
                )
        if not state["streak"] <= state["batches_without_signal"] <= state["batches"]:
            raise ValueError(
                "no-signal watch: streak <= batches_without_signal <= batches must hold"
            )
        rewards = state["rewards"]
        if not isinstance(rewards, list) or not all(
            is_real(r) and math.isfinite(r) for r in rewards
        ):
            raise ValueError(
                f"no-signal watch rewards must be a list of finite numbers, got {rewards!r}"
            )
        if state["notice"] is not None and not isinstance(state["notice"], str):
            raise ValueError("no-signal watch notice must be a string or null")
        self.batches, self.batches_without_signal, self.streak, self.first_step = (
            int(state[key]) for key in counts
        )
        self.rewards = {float(r) for r in rewards}
        self.notice = state["notice"]

    def end_of_run(self) -> str | None:
        """At the end of a run: the notice when no generation batch of the run had a signal and
        the run was too short for :meth:`update`'s (fewer than ``patience`` batches); else None."""
        if not 0 < self.batches == self.batches_without_signal < self.patience:
            return None
        batches = (
            "the only generation batch"
            if self.batches == 1
            else f"any of the run's {self.batches} generation batches"
        )
        return (
            f"no learning signal in {batches} (the run ended before the {self.patience} in a row "
            f"that warn during training): {self._what()}, {_CONSEQUENCE}"
        )

    def _what(self) -> str:
        if self.rewards == {0.0}:
            return "every completion scored 0"
        return (
            "every group's completions got equal rewards (mean reward "
            + ", ".join(f"{r:g}" for r in sorted(self.rewards))
            + ")"
        )
