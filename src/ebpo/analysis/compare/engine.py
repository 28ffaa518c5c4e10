"""``ebpo compare`` from the runs' paths to the report's content: read every run, pair them by
seed, check that they differ only in estimator and seed, choose the metrics, compute the paired
differences and count the intervals (each step in its module: :mod:`.runs`, :mod:`.pairing`,
:mod:`.differences`, :mod:`.report`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ebpo.analysis.compare.differences import compare_metric, count_intervals
from ebpo.analysis.compare.pairing import check_settings, choose_metrics, pair_runs
from ebpo.analysis.compare.report import report
from ebpo.analysis.compare.runs import Run, read_run

__all__ = ["compare_runs", "read_runs"]


def read_runs(arguments: Sequence[str]) -> list[Run]:
    """Every run ``arguments`` name (``[LABEL=]PATH``); ValueError for the first bad one."""
    if not arguments:
        raise ValueError("RUN: expected finished runs to compare, got none")
    return [read_run(argument) for argument in arguments]


def compare_runs(
    runs: Sequence[Run],
    *,
    baseline: str = "grpo",
    metrics: Sequence[str] = (),
    smooth: int = 1,
    ignore: Sequence[str] = (),
) -> dict[str, Any]:
    """The content of ``compare.json`` for ``runs`` (:mod:`ebpo.analysis.compare.report`)."""
    pairs = pair_runs(runs, baseline)
    paired = [run for estimator in pairs.runs.values() for run in estimator.values()]
    accepted = check_settings(paired, ignore)
    chosen, source = choose_metrics(pairs, metrics)
    comparisons = [
        compare_metric(pairs, estimator, metric, smooth)
        for metric in chosen
        for estimator in pairs.estimators
    ]
    multiplicity = count_intervals(comparisons)
    return report(
        pairs,
        comparisons,
        multiplicity,
        metrics=chosen,
        source=source,
        smooth=smooth,
        accepted=accepted,
    )
