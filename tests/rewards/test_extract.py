"""ebpo.rewards.extract: the final answer of a response, canonical forms, inputs as text."""

from __future__ import annotations

import decimal
import fractions
import math

import numpy as np
import pandas as pd
import pytest

from ebpo.rewards import extract_answer, normalize_answer
from ebpo.rewards.extract import (
    MISSING_SPELLINGS,
    TOO_LONG,
    brace_depth,
    final_answer,
    input_text,
    integer_key,
    is_missing_text,
)
from ebpo.utils.checks import short_repr


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("Answer: 42", "42"),
        ("**Answer:** 42", "42"),
        ("**Answer**: $42$.", "42"),
        ("Final answer: $17$.", "17"),
        ("\\boxed{\\frac{1}{\\sqrt{2}}}", "\\frac{1}{\\sqrt{2}}"),
        ("\\fbox{9}", "9"),
        ("text \\boxed {4} text", "4"),
        ("\\boxed{1} then \\boxed{2}", "2"),
        ("Answer: $\\boxed{5}$", "5"),
        ("Answer:\n", None),
        ("Answer:\n42", "42"),
        ("Answer: 5\nI hope that is the right answer:", "5"),
        ("\\boxed{unclosed", None),
        ("no markers at all", None),
    ],
)
def test_extract_answer(response, expected):
    assert extract_answer(response) == expected


def test_a_box_that_does_not_close_within_the_cap_is_too_long_not_missing():
    # closes, but only after the cap: the scan stops at the cap
    assert final_answer("\\boxed{" + "x" * 50 + "}", 10) is TOO_LONG
    assert extract_answer("\\boxed{" + "x" * 50 + "}", max_answer_chars=10) is None
    assert final_answer("\\boxed{" + "x" * 50 + "}", 60) == "x" * 50
    assert (
        final_answer("\\boxed{xx", 10) is None
    )  # never closes, within the cap: truncated response


@pytest.mark.parametrize(
    ("answer", "key"),
    [
        ("$\\dfrac{1}{2}$.", "\\frac{1}{2}"),
        ("\\left( 1,\\, 2 \\right)", "(1,2)"),
        ("  \\tfrac 3 4 ", "\\frac34"),
        ("\\displaystyle x + 1", "x+1"),
    ],
)
def test_normalize_answer(answer, key):
    assert normalize_answer(answer) == key


def test_integer_key_compares_values_digit_by_digit():
    assert integer_key("+0012") == integer_key("12") == (False, "12")
    assert integer_key("-0") == integer_key("0") == (False, "")
    assert integer_key("-12") != integer_key("12")
    assert integer_key("\u0663") == integer_key("3")  # Arabic-Indic three, as int() reads it
    assert integer_key("9" * 5000) == (False, "9" * 5000)  # beyond int()'s 4,300-digit limit


def test_brace_depth():
    assert brace_depth("a{b{c}}{d}") == 2
    assert brace_depth("no braces") == 0


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Answer: 1", ("Answer: 1", None)),
        (27.0, ("27", None)),
        (np.int64(-4), ("-4", None)),
        (decimal.Decimal("0.5"), ("0.5", None)),
        (fractions.Fraction(1, 2), ("1/2", None)),
        (None, ("", "missing")),
        (math.nan, ("", "missing")),
        (pd.NA, ("", "missing")),
        (10**5000, ("", "too_long")),  # str() would refuse it
        (True, ("", "bad_input")),
        (b"1", ("", "bad_input")),
        (["1"], ("", "bad_input")),
        (1 + 2j, ("", "bad_input")),
    ],
    ids=lambda value: short_repr(value, 24),
)
def test_input_text(value, expected):
    assert input_text(value, 512) == expected


# ------------------------------------------------------------- missing ground truths as text
def test_every_documented_missing_spelling_is_missing():
    # Issue #21 item 4: the list in the module docstring, in any case, wrapped, with invisibles.
    for spelling in MISSING_SPELLINGS:
        variants = [
            spelling,
            f"$\\text{{{spelling}}}$",
            f"\u200b {spelling}\ufeff",
            f'"{spelling}"',
        ]
        for text in [*variants, spelling.upper(), spelling.lower()]:
            assert is_missing_text(text), text


@pytest.mark.parametrize(
    "answer",
    [
        "Na",
        "nA",
        "undefined",
        "\\infty",
        "inf",
        "\\{\\}",
        "\\emptyset",
        "none of the above",
        "0",
        "nano",
        "n",
        "N/A/B",
        "[1]",
        "1.#INF",
        "nan" * 100,
    ],
)
def test_answers_that_look_like_missing_values_are_answers(answer):
    assert not is_missing_text(answer)
