"""Difficulty labels, higher = harder (EBPO-diff): a dataset's level column, or ``1 - pass rate`` of
a model over k samples (paper: 16 samples at temperature 1.0)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ebpo.utils.checks import is_missing, short_repr

__all__ = [
    "difficulty_from_levels",
    "difficulty_from_pass_rates",
    "estimate_pass_rates",
    "pass_rates_from_records",
]

_LEVEL_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")


def difficulty_from_levels(levels: Sequence[Any], column: str | None = None) -> list[float]:
    """A dataset's level column as numbers (higher = harder): ``"Level 3"`` -> 3.0, ``4`` -> 4.0.

    Values with no number in them (MATH has a few ``"Level ?"``) become NaN, so the caller can see
    and decide; orderings reject NaN. An integer too large for a float (``10**400``, or the digits
    of ``"Level 1000…"``) stays an exact int. A level is one scalar: a list, a mapping or an
    array (``[7]``, ``{"a": 1}``: not a level, whatever digits its text holds) and a boolean raise
    ValueError naming the row (counting from 0) and ``column`` when given.
    """
    out: list[float] = []
    for row, level in enumerate(levels):
        if isinstance(level, Collection) and not isinstance(level, (str, bytes)):
            where = f"row {row} (counting from 0)" + (f", column {column!r}" if column else "")
            kind = (
                "a mapping"
                if isinstance(level, Mapping)
                else "an array"
                if hasattr(level, "shape")
                else f"a {type(level).__name__}"
            )
            raise ValueError(
                f"{where}: the level {short_repr(level, 40)} is {kind}; a level is one number or a text "
                "such as 'Level 3'"
            )
        if is_missing(level):
            out.append(math.nan)
        elif isinstance(level, bool):
            raise ValueError(f"levels must be numbers or strings like 'Level 3'; got {level!r}")
        elif isinstance(level, int | float | np.integer | np.floating):
            out.append(_as_float(level.item() if isinstance(level, np.generic) else level))
        else:
            match = _LEVEL_NUMBER.search(str(level))
            out.append(_as_float(_parse_number(match.group())) if match else math.nan)
    return out


def _parse_number(text: str) -> int | float:
    if "." not in text and len(text) <= 4000:  # int() refuses more than 4300 digits
        return int(text)
    return float(text)


def _as_float(value: int | float) -> float:
    """``float(value)``, except for an integer past the float range (``10**400``), which stays an
    exact int: the orderings compare numbers exactly, and a float would overflow."""
    try:
        return float(value)
    except OverflowError:
        return value


def difficulty_from_pass_rates(pass_rates: Sequence[float]) -> list[float]:
    """Difficulty = 1 - pass rate (EBPO-diff: the base model's pass rate over 16 samples)."""
    out: list[float] = []
    for i, rate in enumerate(pass_rates):
        rate = float(rate)
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"pass_rates must lie in [0, 1]; pass_rates[{i}] = {rate}")
        out.append(1.0 - rate)
    return out


def estimate_pass_rates(
    problems: Sequence[Any],
    score_fn: Callable[[Any], Sequence[float]],
    *,
    progress: bool = True,
) -> list[float]:
    """Empirical pass rate of each problem: the mean of the rewards ``score_fn(problem)`` returns
    for its k samples (spec: k = 16 at temperature 1.0). Rewards must lie in [0, 1]."""
    rates: list[float] = []
    bar = tqdm(problems, desc="pass rate", unit="problem", disable=not progress)
    for i, problem in enumerate(bar):
        scores = [float(s) for s in score_fn(problem)]
        if not scores:
            raise ValueError(
                f"score_fn returned no scores for problem #{i}; expected one per sample"
            )
        if any(not 0.0 <= s <= 1.0 for s in scores):
            raise ValueError(f"score_fn must return rewards in [0, 1]; problem #{i} got {scores}")
        rates.append(sum(scores) / len(scores))
    return rates


def pass_rates_from_records(
    records: Sequence[Mapping[str, Any]],
    problem_ids: Sequence[str],
    *,
    id_key: str = "problem_id",
    score_key: str = "score",
) -> list[float]:
    """Pass rate of each of ``problem_ids`` from per-sample records (``ebpo.evaluation.
    sample_and_score`` writes ``problem_id`` and ``score`` per sample)."""
    totals: dict[str, list[float]] = {str(i): [] for i in problem_ids}
    for record in records:
        key = str(record[id_key])
        if key in totals:
            totals[key].append(float(record[score_key]))
    empty = [key for key, scores in totals.items() if not scores]
    if empty:
        raise ValueError(
            f"records hold no sample for problem {empty[0]!r} ({len(empty)} problems without samples)"
        )
    rates = [sum(s) / len(s) for s in (totals[str(i)] for i in problem_ids)]
    if any(not 0.0 <= r <= 1.0 for r in rates):
        raise ValueError(
            f"{score_key!r} must be a 0/1 correctness score; got pass rates outside [0, 1]"
        )
    return rates
