"""ebpo.rewards.score: equivalence, fast paths, input caps, odd inputs, batches."""

from __future__ import annotations

import decimal
import fractions
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ebpo.rewards import (
    MAX_ANSWER_CHARS,
    MAX_TIMEOUT,
    ScoreResult,
    extract_answer,
    reset_reward_stats,
    reward_stats,
    score_math,
    score_math_batch,
    score_math_detailed,
    timer,
)
from ebpo.rewards import score as score_module
from ebpo.rewards.extract import strip_math_delimiters

# (response, ground truth) pairs that are mathematically equal ...
EQUIVALENT = [
    ("Step 1 ...\nAnswer: 34", "34"),
    ("The sum is 12.\nanswer:   012", "12"),
    ("so the result is $\\boxed{\\frac{1}{2}}$.", "0.5"),
    ("Answer: 1/2", "\\frac{1}{2}"),
    ("Answer: $\\dfrac{3}{4}$", "\\frac34"),
    ("Answer: 0.75", "\\frac{3}{4}"),
    ("Answer: 34.0", "34"),
    ("Answer: 1,000", "1000"),
    ("Answer: $2\\sqrt{3}$", "\\sqrt{12}"),
    ("Answer: (x+1)^2", "x^2+2x+1"),
    ("Answer: x = 5", "5"),
    ("Answer: $(1, 2]$", "(1,2]"),
    ("\\boxed{[1,2)}", "[1, 2)"),
    ("Answer: \\{2, 1\\}", "\\{1,2\\}"),
    ("Answer: 3, 2", "2, 3"),
    ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)"),
    ("Answer: (3, \\pi/2)", "\\left( 3, \\frac{\\pi}{2} \\right)"),
    ("Answer: 90^\\circ", "90"),
    ("Answer: \\boxed{7}", "7"),
    ("We get \\boxed{ 5 } and then Answer: 6", "6"),  # the later marker wins
    ("Answer: 5\n... on reflection \\boxed{6}", "6"),
]
# ... and pairs that are not.
NOT_EQUIVALENT = [
    ("Answer: 35", "34"),
    ("Answer: 0.333", "\\frac{1}{3}"),
    ("Answer: 12.0001", "12"),
    ("\\boxed{\\frac{1}{3}}", "0.5"),
    ("Answer: (1, 2)", "(1,2]"),
    ("Answer: \\{1, 2, 3\\}", "\\{1,2\\}"),
    ("Answer: x^2+1", "x^2-1"),
    ("Answer: \\pi", "3.14"),
    ("Answer: 6\n... on reflection \\boxed{5}", "6"),
    ("I cannot solve this.", "6"),
    ("\\boxed{6", "6"),  # unterminated box: no answer
    ("", "6"),
]


def _reference(response: str, gold: str) -> float:
    """Slow obvious reference: our extraction, then math-verify on both sides, no fast paths."""
    from math_verify import parse, verify

    prediction = extract_answer(response)
    if prediction is None:
        return 0.0
    gold = strip_math_delimiters(gold)
    return float(verify(parse(f"${gold}$"), parse(f"${prediction}$")))


@pytest.mark.parametrize(("response", "gold"), EQUIVALENT)
def test_equivalent_answers_score_one(response, gold):
    assert score_math(response, gold) == 1.0


@pytest.mark.parametrize(("response", "gold"), NOT_EQUIVALENT)
def test_non_equivalent_answers_score_zero(response, gold):
    assert score_math(response, gold) == 0.0


def test_fast_paths_agree_with_plain_math_verify():
    for response, gold in EQUIVALENT + NOT_EQUIVALENT:
        result = score_math_detailed(response, gold)
        if result.status in ("exact", "integer"):
            assert result.score == _reference(response, gold), (response, gold)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=200), st.text(max_size=30))
def test_never_raises_and_returns_binary(response, gold):
    assert score_math(response, gold, timeout=1.0) in (0.0, 1.0)


@settings(max_examples=40, deadline=None)
@given(st.text(alphabet="\\{}$^_()[],.0123456789xboxedfracAnswer: \n", max_size=120))
def test_never_raises_on_latexish_garbage(response):
    assert score_math(response, "1", timeout=1.0) in (0.0, 1.0)


def test_non_string_inputs_are_coerced():
    assert score_math("Answer: 27", 27.0) == 1.0
    assert score_math(None, "3") == 0.0  # type: ignore[arg-type]


# --------------------------------------------------------------------------------- input caps
@pytest.fixture
def verified(monkeypatch):
    """The texts that reach math-verify (``timer._verify_unguarded``), as (prediction, gold)."""
    calls = []
    real = timer._verify_unguarded

    def recording(prediction, gold):
        calls.append((prediction, gold))
        return real(prediction, gold)

    monkeypatch.setattr(timer, "_verify_unguarded", recording)
    return calls


def test_megabyte_response_is_fast(verified):
    # fast: decided without math-verify, whose regexes are super-linear in the text they get
    response = "x" * 1_000_000 + " so \\boxed{3}"
    assert score_math_detailed(response, "3") == ScoreResult(1.0, "exact", "3")
    garbage = "$1+" * 300_000  # the kind of input on which math-verify's regexes are super-linear
    assert score_math_detailed(garbage, "3").status == "no_answer"
    assert verified == []
    # an answer that needs math-verify reaches it, at most the answer's cap long
    assert score_math("x" * 1_000_000 + " so \\boxed{\\frac{6}{2}}", "3") == 1.0
    assert len(verified) == 1 and len(verified[0][0]) <= MAX_ANSWER_CHARS


def test_deeply_nested_braces_rejected_without_parsing(verified):
    for depth in (40, 5_000, 200_000):
        response = "\\boxed{" + "{" * depth + "1" + "}" * depth + "}"
        result = score_math_detailed(response, "1")
        assert result.score == 0.0 and result.status == "too_long"
    assert verified == []  # nothing was parsed


@pytest.mark.slow  # starts a second helper process
def test_batch_with_workers_matches_sequential():
    pairs = EQUIVALENT[:8] + NOT_EQUIVALENT[:6]
    responses, golds = zip(*pairs, strict=True)
    sequential = [r.score for r in score_math_batch(responses, golds)]
    parallel = [r.score for r in score_math_batch(responses, golds, num_workers=2)]
    assert sequential == parallel == [score_math(r, g) for r, g in pairs]


def test_bad_arguments():
    with pytest.raises(ValueError, match="timeout"):
        score_math("Answer: 1", "1", timeout=0)
    with pytest.raises(ValueError, match="isolation"):
        score_math_detailed("Answer: 1", "1", isolation="thread")
    with pytest.raises(ValueError, match="same length"):
        score_math_batch(["a"], ["1", "2"])


@pytest.mark.parametrize(
    "timeout",
    [math.nan, math.inf, -math.inf, 1e10, MAX_TIMEOUT * 1.01, 0, -1.0, "5", None, True, 10**400],
    ids=lambda value: repr(value)[:12],
)
def test_timeout_must_be_finite_positive_and_at_most_an_hour(timeout):
    # nan / inf / 1e10 used to be accepted and scored every parsed answer 0 (setitimer failed).
    calls = [
        lambda: score_math("Answer: \\frac{1}{2}", "0.5", timeout=timeout),
        lambda: score_math_batch(["Answer: 1"], ["1"], timeout=timeout),
    ]
    for call in calls:
        with pytest.raises(
            ValueError, match=r"^timeout must be a number of seconds in \(0, 3600\]"
        ):
            call()


def test_largest_timeout_is_accepted():
    assert score_math("Answer: \\frac{1}{2}", "0.5", timeout=MAX_TIMEOUT) == 1.0


# ------------------------------------------------------------------------------- odd inputs
@pytest.mark.parametrize(
    "ground_truth",
    [
        None,
        math.nan,
        np.float32("nan"),
        pd.NA,
        pd.NaT,
        decimal.Decimal("NaN"),
        "",
        "   ",
        "$ $",
        "nan",
        "NaN",
        "<NA>",
    ],
    ids=repr,
)
def test_missing_ground_truth_scores_zero_and_is_counted(ground_truth):
    # A pandas missing value used to become the text "nan", and "Answer: nan" scored 1.0.
    reset_reward_stats()
    for response in ("Answer: nan", "Answer: <NA>", "\\boxed{}", "Answer: 1"):
        result = score_math_detailed(response, ground_truth)
        assert (result.score, result.status) == (0.0, "missing_ground_truth"), response
    assert reward_stats()["missing_ground_truth"] == 4 and reward_stats()["calls"] == 4


class _StrRaises:
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


UNUSABLE_INPUTS = [
    ("Answer: 1", 10**5000, "too_long"),  # str() refuses ints of more than 4,300 digits
    ("Answer: 1", -(10**5000), "too_long"),
    (10**5000, "1", "too_long"),
    ("Answer: 1", fractions.Fraction(10**5000, 3), "too_long"),
    ("Answer: 1", _StrRaises(), "bad_input"),
    (_StrRaises(), "1", "bad_input"),
    (b"Answer: 1", "1", "bad_input"),
    ("Answer: 1", ["1"], "bad_input"),
]
UNUSABLE_IDS = [
    "huge-int-gold",
    "huge-negative-gold",
    "huge-int-response",
    "huge-fraction",
    "str-raises-gold",
    "str-raises-response",
    "bytes",
    "list-gold",
]


@pytest.mark.parametrize(("response", "ground_truth", "status"), UNUSABLE_INPUTS, ids=UNUSABLE_IDS)
def test_unusable_inputs_score_zero_and_never_raise(response, ground_truth, status):
    reset_reward_stats()
    result = score_math_detailed(response, ground_truth)
    assert (result.score, result.status) == (0.0, status)
    assert reward_stats()[status] == 1


def test_integers_longer_than_pythons_str_limit_compare_digit_by_digit():
    # With a raised max_answer_chars the integer fast path used int(), which refuses > 4,300 digits.
    long_ones = "1" * 5000
    kwargs = {"max_answer_chars": 20_000}
    assert score_math_detailed(f"Answer: {long_ones}", "2" * 5000, **kwargs) == ScoreResult(
        0.0, "integer", long_ones
    )
    assert score_math_detailed(f"Answer: +000{long_ones}", long_ones, **kwargs).score == 1.0
    assert score_math_detailed("Answer: -0", "0").score == 1.0
    assert score_math_detailed("Answer: -7", "7").score == 0.0


def test_unscorable_pairs_are_logged_once(monkeypatch, caplog):
    monkeypatch.setattr(score_module, "_WARNED", set())
    with caplog.at_level("WARNING", logger="ebpo.rewards"):
        for _ in range(3):
            score_math("Answer: nan", math.nan)
            score_math(b"Answer: 1", "1")
    messages = [r.getMessage() for r in caplog.records if r.name == "ebpo.rewards"]
    assert len(messages) == 2
    assert "missing_ground_truth" in messages[0] and "bad_input" in messages[1]


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("max_answer_chars", 0),
        ("max_answer_chars", 1.5),
        ("max_brace_depth", -1),
        ("max_brace_depth", True),
        ("isolation", None),
    ],
)
def test_bad_scoring_options_name_the_option(option, value):
    with pytest.raises(ValueError, match=f"^{option} must be"):
        score_math_detailed("Answer: 1", "1", **{option: value})
