"""What an ``ebpo train`` job returns (and writes to ``results.json`` when it completes): one type,
built in one place whatever the run's end."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["TrainResult", "strip_problems"]


def strip_problems(evaluation: Mapping[str, Any]) -> dict[str, Any]:
    """An evaluation without its per-problem list (that stays in ``eval_*.json``)."""
    return {k: v for k, v in evaluation.items() if k != "problems"}


@dataclass(frozen=True)
class TrainResult:
    """The outcome of one job. ``before`` / ``after`` / ``validation`` are held-out Pass@1
    summaries without their per-problem lists; ``after`` and ``validation`` are None unless the
    run completed (``validation`` also unless asked for); ``no_signal`` is the trainer's notice
    that training went several steps without a learning signal, else None."""

    status: str
    run_dir: Path
    before: Mapping[str, Any]
    global_step: int
    warm_start_cached: bool | None
    wall_time_s: float
    after: Mapping[str, Any] | None = None
    validation: Mapping[str, Any] | None = None
    plots: Sequence[Path] = field(default_factory=tuple)
    no_signal: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON form, keys in the order ``results.json`` has always had."""
        return {
            "run_dir": str(self.run_dir),
            "metrics_path": str(self.run_dir / "metrics.jsonl"),
            "before": strip_problems(self.before),
            "global_step": self.global_step,
            "warm_start_cached": self.warm_start_cached,
            "status": self.status,
            "after": None if self.after is None else strip_problems(self.after),
            "validation": None if self.validation is None else strip_problems(self.validation),
            "wall_time_s": self.wall_time_s,
            "plots": [str(p) for p in self.plots],
            "no_signal": self.no_signal,
        }
