"""Count the estimators built while a piece of code runs (a trainer, verl's advantage calls)."""

from __future__ import annotations

from typing import Any

import pytest

from ebpo.estimators import AdvantageEstimator


def count_estimators(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """From now on, every estimator built appends its name to the list returned (every
    estimator's constructor runs :class:`AdvantageEstimator`'s exactly once)."""
    built: list[str] = []
    original = AdvantageEstimator.__init__

    def counted(self: AdvantageEstimator, **options: Any) -> None:
        built.append(type(self).name)
        original(self, **options)

    monkeypatch.setattr(AdvantageEstimator, "__init__", counted)
    return built
