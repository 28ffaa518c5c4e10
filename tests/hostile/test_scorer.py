"""Hostile inputs to the math scorer (issue #11 items 8, 9; issue #21 item 4). The LLM-labelling
client's cases are in ``test_secrets.py``, the scorer under concurrency in
``test_scorer_concurrency.py``.

* ``SCORE_CASES``: responses and ground truths that must never raise. Each scores what
  ``ebpo.rewards`` documents (``score_math_detailed``: a missing ground truth is
  ``missing_ground_truth``, a value that is neither text nor a number ``bad_input``, an integer
  too long to write ``too_long``; all score 0) and adds one to the counter of its status. Checked
  through ``score_math_detailed``, the verl adapter ``compute_score`` and the TRL reward
  (``ebpo.integrations.verl.reward``, ``ebpo.integrations.trl.reward``).
* ``OPTION_CASES``: bad options (``timeout`` NaN/inf/1e10/strings..., caps, isolation, workers):
  a ValueError naming the option, raised before anything is counted.
* ``MISSING_CASES`` / ``NOT_MISSING_CASES``: ground truths that spell a missing value after
  ``str()``, JSON, CSV or a spreadsheet (``None``, ``null``, ``N/A``, ``-nan``, ``\\text{nan}``,
  ``[]``, invisible characters only...) score 0 with status ``missing_ground_truth`` even against
  the same text as the answer; real answers that look alike (``Na``, ``undefined``, the empty set,
  ``none of the above``) are still compared.
"""

from __future__ import annotations

import decimal
import fractions
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pytest

from ebpo.integrations.trl.reward import make_trl_reward
from ebpo.integrations.verl.reward import compute_score
from ebpo.rewards import (
    MAX_TIMEOUT,
    reset_reward_stats,
    reward_stats,
    score_math,
    score_math_batch,
    score_math_detailed,
)
from tests.hostile.harness import ApiCase, check_api_error, ids

UNSCORABLE = ("missing_ground_truth", "bad_input")


@dataclass(frozen=True)
class ScoreCase:
    """``score_math_detailed(response, ground_truth, **options)`` must return ``score`` with
    ``status`` (and count it) without raising."""

    id: str
    response: Any
    ground_truth: Any
    status: str
    score: float = 0.0
    options: dict[str, Any] = field(default_factory=dict)


class StrRaises:
    def __str__(self) -> str:
        raise RuntimeError("__str__ refuses")

    def __repr__(self) -> str:
        raise RuntimeError("__repr__ refuses")


NESTED = "{" * 5000 + "1" + "}" * 5000
LONG_INT = "1" * 5000  # more digits than int() / str() accept (4,300)

SCORE_CASES = [
    # huge responses: linear-time extraction, caps before the parser
    ScoreCase("megabyte-then-answer", "x" * 1_000_000 + "\nAnswer: 3", "3", "exact", 1.0),
    ScoreCase("megabyte-no-marker", "$1+" * 300_000, "3", "no_answer"),
    ScoreCase("megabyte-answer-line", "Answer: " + "1+" * 300_000 + "1", "3", "too_long"),
    ScoreCase("unclosed-megabyte-box", "\\boxed{" + "x" * 1_000_000, "3", "too_long"),
    ScoreCase("many-answer-lines", "Answer: 1\n" * 100_000 + "Answer: 2", "2", "exact", 1.0),
    # deeply nested braces
    ScoreCase("nested-box-5000", f"\\boxed{{{NESTED}}}", "1", "too_long"),
    ScoreCase("nested-answer-40", "Answer: " + "{" * 40 + "1" + "}" * 40, "1", "too_long"),
    ScoreCase("nested-gold-100", "Answer: 1", "{" * 100 + "1" + "}" * 100, "too_long"),
    ScoreCase("long-gold", "Answer: 1", "1+" * 1000 + "1", "too_long"),
    # unicode
    ScoreCase(
        "arabic-indic-digit", "Answer: \u0663", "3", "integer", 1.0
    ),  # int() reads it as 3 too
    ScoreCase("fullwidth-digit", "Answer: \uff13", "3", "integer", 1.0),
    ScoreCase("cjk-text-around", "\u7b54\u6848\u662f Answer: 3", "3", "exact", 1.0),
    ScoreCase("emoji-answer", "Answer: \U0001f600", "1", "rejected"),
    ScoreCase("lone-surrogate-answer", "Answer: \ud800", "1", "rejected"),
    ScoreCase("lone-surrogate-gold", "Answer: 1", "\ud800", "rejected"),
    ScoreCase("zero-width-space", "Answer: \u200b5", "5", "rejected"),
    # control characters
    ScoreCase("crlf-lines", "\r\nAnswer: 5\r\n", "5", "exact", 1.0),
    ScoreCase("ansi-escapes", "Answer:\x1b[31m5\x1b[0m", "5", "rejected"),
    ScoreCase("backspace", "Answer: x\x08", "x", "rejected"),
    # (a NUL-only ground truth is invisible: missing, issue #21 item 4; it used to be "rejected")
    ScoreCase("nul-gold", "Answer: 1", "\x00", "missing_ground_truth"),
    # bytes, containers and other objects: their str() is a repr, not an answer
    ScoreCase(
        "bytes-response", b"Answer: 1", "1", "bad_input"
    ),  # used to score 1.0 via "b'Answer: 1'"
    ScoreCase("bytearray-response", bytearray(b"Answer: 1"), "1", "bad_input"),
    ScoreCase("bytes-gold", "Answer: 1", b"1", "bad_input"),
    ScoreCase("list-response", ["Answer: 1"], "1", "bad_input"),
    ScoreCase("list-gold", "Answer: 1", ["1"], "bad_input"),  # used to score 1.0 via "['1']"
    ScoreCase("tuple-gold", "Answer: 1", ("1",), "bad_input"),
    ScoreCase("dict-gold", "Answer: 1", {"ground_truth": "1"}, "bad_input"),
    ScoreCase("set-gold", "Answer: 1", {1}, "bad_input"),
    ScoreCase("ndarray-gold", "Answer: 1", np.array(["1"]), "bad_input"),
    ScoreCase("object-gold", "Answer: 1", object(), "bad_input"),
    ScoreCase("str-raises-gold", "Answer: 1", StrRaises(), "bad_input"),
    ScoreCase("str-raises-response", StrRaises(), "1", "bad_input"),
    ScoreCase("bool-gold", "Answer: True", True, "bad_input"),
    ScoreCase("complex-gold", "Answer: 1", 1 + 2j, "bad_input"),
    # NaN / inf / numbers as responses: a missing response has no answer
    ScoreCase("nan-response", math.nan, "1", "no_answer"),
    ScoreCase("inf-response", math.inf, "1", "no_answer"),
    ScoreCase("none-response", None, "1", "no_answer"),
    ScoreCase("pd-na-response", pd.NA, "1", "no_answer"),
    ScoreCase("empty-response", "", "1", "no_answer"),
    ScoreCase("int-response", 3, "3", "no_answer"),  # the text "3" has no Answer: line or box
    ScoreCase("huge-int-response", 10**5000, "1", "too_long"),
    # missing ground truths: 0, counted (a NaN ground truth used to make "Answer: nan" score 1.0)
    ScoreCase("none-gold", "Answer: 1", None, "missing_ground_truth"),
    ScoreCase("nan-gold", "Answer: nan", math.nan, "missing_ground_truth"),
    ScoreCase("numpy-nan-gold", "Answer: nan", np.float64("nan"), "missing_ground_truth"),
    ScoreCase("float32-nan-gold", "Answer: nan", np.float32("nan"), "missing_ground_truth"),
    ScoreCase("pd-na-gold", "Answer: <NA>", pd.NA, "missing_ground_truth"),
    ScoreCase("pd-nat-gold", "Answer: NaT", pd.NaT, "missing_ground_truth"),
    ScoreCase("decimal-nan-gold", "Answer: NaN", decimal.Decimal("NaN"), "missing_ground_truth"),
    ScoreCase("empty-gold", "Answer: 1", "", "missing_ground_truth"),
    ScoreCase("blank-gold", "Answer: 1", " \t\n", "missing_ground_truth"),
    ScoreCase("delimiters-only-gold", "\\boxed{}", "$ $", "missing_ground_truth"),
    ScoreCase("nan-text-gold", "Answer: nan", "nan", "missing_ground_truth"),  # a stringified NaN
    ScoreCase("na-text-gold", "Answer: <NA>", "<NA>", "missing_ground_truth"),
    *(
        ScoreCase(f"missing-{name}", f"Answer: {gold}", gold, "missing_ground_truth")
        for name, gold in {
            # issue #21 item 4: each scored 1.0 against the same text as the answer
            "None": "None",
            "none": "none",
            "NONE": "NONE",
            "null": "null",
            "NULL": "NULL",
            "NA": "NA",
            "na": "na",
            "N/A": "N/A",
            "n/a": "n/a",
            "excel-N/A": "#N/A",
            "excel-N/A-N/A": "#N/A N/A",
            "hash-NA": "#NA",
            "NaT": "NaT",
            "NAN": "NAN",
            "minus-nan": "-nan",
            "plus-NaN": "+NaN",
            "unicode-minus-nan": "\u2212nan",
            "sNaN": "sNaN",
            "nan-payload": "-nan(ind)",
            "msvc-ind": "-1.#IND",
            "msvc-qnan": "1.#QNAN",
            "text-nan": "\\text{nan}",
            "mathrm-NULL": "\\mathrm{NULL}",
            "dollar-text-N/A": "$\\text{N/A}$",
            "paren-None": "\\(None\\)",
            "double-quoted-None": '"None"',
            "single-quoted-nan": "'nan'",
            "nested-wrappers": '$\\text{"null"}$',
            "trailing-period": "N/A.",
            "empty-list": "[]",
            "empty-list-spaced": "[ ]",
            "empty-dict": "{}",
            "empty-tuple": "()",
            "empty-double-quotes": '""',
            "empty-single-quotes": "''",
            "div0": "#DIV/0!",
            "value-error": "#VALUE!",
            "ref-error": "#REF!",
            "name-error": "#NAME?",
            "num-error": "#NUM!",
            "null-error": "#NULL!",
            "fullwidth-NaN": "\uff2e\uff41\uff2e",
            "zero-width-space": "\u200b",
            "zero-width-non-joiner": "\u200c",
            "zero-width-joiner": "\u200d",
            "word-joiner": "\u2060",
            "bom": "\ufeff",
            "nbsp": "\xa0",
            "narrow-nbsp": "\u202f",
            "ideographic-space": "\u3000",
            "soft-hyphen": "\xad",
            "left-to-right-mark": "\u200e",
            "hangul-filler": "\u3164",
            "braille-blank": "\u2800",
            "invisible-mix": " \u200b\ufeff\xa0\u2060 \t",
            "bom-then-null": "\ufeffnull",  # a CSV's byte order mark before the first cell
            "zero-width-inside-NA": "N\u200bA",
            "zero-width-around-None": "\u200bNone\u200b",
            "megabyte-of-zero-width": "\u200b" * 1_000_000,
        }.items()
    ),
    # look-alikes that are real answers: compared as usual
    ScoreCase("sodium-Na", "Answer: Na", "Na", "exact", 1.0),
    ScoreCase("none-of-the-above", "Answer: none of the above", "none of the above", "exact", 1.0),
    ScoreCase("undefined", "Answer: undefined", "undefined", "exact", 1.0),
    ScoreCase("empty-set-braces", "Answer: \\{\\}", "\\{\\}", "exact", 1.0),
    ScoreCase("empty-set", "Answer: \\emptyset", "\\emptyset", "exact", 1.0),
    ScoreCase("infinity-text", "Answer: inf", "inf", "exact", 1.0),
    ScoreCase("no-solution", "Answer: no solution", "\\text{no solution}", "verified", 1.0),
    ScoreCase("zero-gold", "Answer: 0", "0", "exact", 1.0),
    ScoreCase("nano", "Answer: nano", "nano", "exact", 1.0),
    ScoreCase("long-gold-with-nan", "Answer: 1", "nan" * 100, "rejected"),
    # ground truths of other numeric types: compared by value
    ScoreCase("float-integer-gold", "Answer: 27", 27.0, "exact", 1.0),
    ScoreCase("negative-zero-gold", "Answer: 0", -0.0, "exact", 1.0),
    ScoreCase("numpy-int-gold", "Answer: 27", np.int64(27), "exact", 1.0),
    ScoreCase("numpy-float-gold", "Answer: 1/2", np.float32(0.5), "verified", 1.0),
    ScoreCase("fraction-gold", "Answer: \\frac{1}{2}", fractions.Fraction(1, 2), "verified", 1.0),
    ScoreCase("decimal-gold", "Answer: 0.5", decimal.Decimal("0.5"), "exact", 1.0),
    ScoreCase("inf-gold", "Answer: \\infty", math.inf, "verified", 1.0),
    ScoreCase("huge-int-gold", "Answer: 1", 10**5000, "too_long"),  # str() would refuse it
    ScoreCase("huge-negative-int-gold", "Answer: 1", -(10**5000), "too_long"),
    ScoreCase("huge-fraction-gold", "Answer: 1", fractions.Fraction(10**5000, 3), "too_long"),
    # integers beyond Python's int/str limit, when the caller lifts the length cap
    ScoreCase(
        "long-ints-equal",
        f"Answer: 000{LONG_INT}",
        LONG_INT,
        "integer",
        1.0,
        {"max_answer_chars": 20_000},
    ),
    ScoreCase(
        "long-ints-differ",
        f"Answer: {LONG_INT}",
        "2" * 5000,
        "integer",
        0.0,
        {"max_answer_chars": 20_000},
    ),
    ScoreCase(
        "long-answer-small-cap", "Answer: 12", "12", "too_long", 0.0, {"max_answer_chars": 1}
    ),
]


def _score_with(entry: str, case: ScoreCase) -> tuple[float, float | None]:
    """(score, unscorable flag or None) through one public entry point."""
    if entry == "score_math_detailed":
        result = score_math_detailed(case.response, case.ground_truth, **case.options)
        assert result.status == case.status, (
            f"{case.id}: status {result.status!r}, expected {case.status!r}"
        )
        return result.score, None
    if entry == "verl":
        out = compute_score("hostile", case.response, case.ground_truth, extra_info=None)
        return out["score"], out["unscorable"]
    logged: dict[str, float] = {}
    out = make_trl_reward()(
        prompts=["p"],
        completions=[case.response],
        answer=[case.ground_truth],
        log_metric=lambda name, value: logged.__setitem__(name, value),
    )
    return out[0], logged["math_reward/unscorable"]


# The adapters take no options; TRL reads a list completion as a chat (its last message), so list
# responses are checked through score_math_detailed and verl only.
SCORE_PARAMS = [
    pytest.param(case, entry, id=f"{case.id}-{entry}")
    for case in SCORE_CASES
    for entry in ("score_math_detailed", "verl", "trl")
    if entry == "score_math_detailed"
    or (not case.options and not (entry == "trl" and isinstance(case.response, list)))
]
ids(SCORE_CASES)  # no duplicate ids


@pytest.mark.parametrize(("case", "entry"), SCORE_PARAMS)
def test_hostile_scorer_input_scores_as_documented(case, entry):
    reset_reward_stats()
    score, unscorable = _score_with(entry, case)
    assert score == case.score, f"{case.id}: score {score}, expected {case.score}"
    if unscorable is not None:
        assert unscorable == float(case.status in UNSCORABLE)
    stats = reward_stats()
    assert stats["calls"] == 1 and stats[case.status] == 1, f"{case.id}: counters {stats}"


class _Counters:
    """reward_stats() as a state_dict: a rejected call must not count anything."""

    def state_dict(self) -> dict[str, int]:
        return reward_stats()


BAD_TIMEOUTS = {
    "nan": math.nan,
    "inf": math.inf,
    "-inf": -math.inf,
    "1e10": 1e10,
    "above-max": MAX_TIMEOUT + 1,
    "zero": 0,
    "negative": -1.0,
    "tiny-negative": -1e-300,
    "numpy-nan": np.float64("nan"),
    "str": "5",
    "none": None,
    "bool": True,
    "list": [5],
    "complex": 1 + 0j,
    "decimal": decimal.Decimal("5"),
    "int-10**400": 10**400,
}
TIMEOUT_CALLS: dict[str, Callable[[Any], Any]] = {
    "score_math": lambda t: score_math("Answer: \\frac{1}{2}", "0.5", timeout=t),
    "batch": lambda t: score_math_batch(["Answer: 1"], ["1"], timeout=t),
    "trl": lambda t: make_trl_reward(timeout=t),
    "verl": lambda t: compute_score("m", "Answer: 1", "1", timeout=t),
}
TIMEOUT_MESSAGE = r"^timeout must be a number of seconds in \(0, 3600\]"


def _option_case(name: str, call: Callable[[], Any], match: str) -> ApiCase:
    return ApiCase(name, call, ValueError, match)


OPTION_CASES = [
    _option_case(
        f"timeout-{label}-{entry}", lambda call=call, value=value: call(value), TIMEOUT_MESSAGE
    )
    for label, value in BAD_TIMEOUTS.items()
    for entry, call in TIMEOUT_CALLS.items()
] + [
    _option_case(
        "max-answer-chars-zero",
        lambda: score_math_detailed("a", "1", max_answer_chars=0),
        "^max_answer_chars must be",
    ),
    _option_case(
        "max-answer-chars-float",
        lambda: score_math_detailed("a", "1", max_answer_chars=5.0),
        "^max_answer_chars must be",
    ),
    _option_case(
        "max-answer-chars-str",
        lambda: score_math_detailed("a", "1", max_answer_chars="512"),
        "^max_answer_chars must be",
    ),
    _option_case(
        "max-brace-depth-negative",
        lambda: score_math_detailed("a", "1", max_brace_depth=-1),
        "^max_brace_depth must be",
    ),
    _option_case(
        "max-brace-depth-bool",
        lambda: score_math_detailed("a", "1", max_brace_depth=True),
        "^max_brace_depth must be",
    ),
    _option_case(
        "isolation-thread",
        lambda: score_math_detailed("a", "1", isolation="thread"),
        "^isolation must be",
    ),
    _option_case(
        "isolation-none",
        lambda: score_math_detailed("a", "1", isolation=None),
        "^isolation must be",
    ),
    _option_case(
        "isolation-list",
        lambda: score_math_detailed("a", "1", isolation=["auto"]),
        "^isolation must be",
    ),
    _option_case(
        "batch-workers-zero",
        lambda: score_math_batch(["a"], ["1"], num_workers=0),
        "^num_workers must be",
    ),
    _option_case(
        "batch-workers-str",
        lambda: score_math_batch(["a"], ["1"], num_workers="2"),
        "^num_workers must be",
    ),
    _option_case(
        "trl-workers-float", lambda: make_trl_reward(num_workers=1.5), "^num_workers must be"
    ),
    _option_case(
        "batch-length-mismatch", lambda: score_math_batch(["a"], ["1", "2"]), "same length"
    ),
]


@pytest.mark.parametrize("case", OPTION_CASES, ids=ids(OPTION_CASES))
def test_bad_scorer_option_is_a_value_error(case):
    check_api_error(case, unchanged=[_Counters()])
