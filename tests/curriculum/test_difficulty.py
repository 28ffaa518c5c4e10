"""Difficulty labels (EBPO-diff): levels and 1 - pass rate, higher = harder."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ebpo import curriculum
from ebpo.curriculum import order_indices


def test_difficulty_from_levels_and_pass_rates():
    levels = curriculum.difficulty_from_levels(["Level 3", 4, "Level ?", None, "level 1", 2.5])
    assert levels[:2] == [3.0, 4.0] and levels[4:] == [1.0, 2.5]
    assert math.isnan(levels[2]) and math.isnan(levels[3])
    assert curriculum.difficulty_from_pass_rates([1.0, 0.25, 0]) == [0.0, 0.75, 1.0]
    with pytest.raises(ValueError, match=r"pass_rates\[1\]"):
        curriculum.difficulty_from_pass_rates([0.5, 1.5])


def test_estimate_pass_rates_averages_scores_and_orders_easy_first():
    # a fake "model": problem p passes p of its 16 samples
    rates = curriculum.estimate_pass_rates(
        [16, 4, 0, 8], lambda p: [1.0] * p + [0.0] * (16 - p), progress=False
    )
    assert rates == [1.0, 0.25, 0.0, 0.5]
    difficulty = curriculum.difficulty_from_pass_rates(rates)
    assert order_indices(4, "difficulty", difficulty=difficulty) == [0, 3, 1, 2]
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        curriculum.estimate_pass_rates([1], lambda p: [2.0], progress=False)
    with pytest.raises(ValueError, match="no scores"):
        curriculum.estimate_pass_rates([1], lambda p: [], progress=False)


def test_levels_accept_numpy_numbers_and_missing_values_and_refuse_bools():
    assert curriculum.difficulty_from_levels([np.int64(2), np.float32(3.5)]) == [2.0, 3.5]
    levels = curriculum.difficulty_from_levels([float("nan"), "Competition"])
    assert all(math.isnan(v) for v in levels)
    with pytest.raises(
        ValueError, match="levels must be numbers or strings like 'Level 3'; got True"
    ):
        curriculum.difficulty_from_levels([True])


@pytest.mark.parametrize(
    ("level", "kind"),
    [([7], "a list"), ({"a": 1}, "a mapping"), ((3,), "a tuple"), (np.array([2]), "an array")],
)
def test_a_level_is_one_scalar(level, kind):
    """Issue 46 item 9: [7] became 7.0 and {"a": 1} 1.0, the digits of their text."""
    with pytest.raises(
        ValueError, match=rf"^row 1 \(counting from 0\), column 'lv': the level .* is {kind}"
    ):
        curriculum.difficulty_from_levels(["Level 1", level], "lv")
    with pytest.raises(ValueError, match=r"^row 0 \(counting from 0\): the level"):
        curriculum.difficulty_from_levels([level])


def test_pass_rates_from_records():
    records = [
        {"problem_id": "b", "score": 1.0},
        {"problem_id": "a", "score": 0.0},
        {"problem_id": "b", "score": 0.0},
    ]
    assert curriculum.pass_rates_from_records(records, ["a", "b"]) == [0.0, 0.5]
    with pytest.raises(ValueError, match="no sample for problem 'c'"):
        curriculum.pass_rates_from_records(records, ["a", "c"])
    with pytest.raises(ValueError, match="must be a 0/1 correctness score"):
        curriculum.pass_rates_from_records([{"problem_id": "a", "score": 2.0}], ["a"])


def test_levels_too_large_for_a_float_stay_exact_integers():
    """float(10**400) raised OverflowError; "Level 1000…0" became inf."""
    huge = 10**400
    levels = curriculum.difficulty_from_levels([huge, f"Level {huge}", 3, "Level 2.5"])
    assert levels[0] == huge and isinstance(levels[0], int)
    assert levels[1] == huge and isinstance(levels[1], int)
    assert levels[2:] == [3.0, 2.5]
    assert order_indices(4, "difficulty", difficulty=levels)[:2] == [3, 2]
    # more digits than Python turns into an int: a float (inf), refused later as non-finite
    assert curriculum.difficulty_from_levels(["Level " + "9" * 5000]) == [math.inf]
