"""Scoring: 1.0 if a response's final answer equals the ground truth, else 0.0, and how it was
decided (:class:`ScoreResult`).

Pipeline (each step is cheap and bounded; only the last one is expensive):

1. **Extraction** (:func:`~ebpo.rewards.extract.extract_answer`, linear time): the final answer
   is whichever comes LAST in the response of (a) a DAPO answer line ``Answer: ...`` (the
   DAPO-Math prompt asks for "The last line of your response should be of the form Answer:
   $Answer", Yu et al. 2025) and (b) the last ``\\boxed{...}`` / ``\\fbox{...}``
   (brace-balanced). ``Answer: \\boxed{5}`` thus yields ``5``. Surrounding ``$``, ``\\(...\\)``
   and a trailing period are stripped.
2. **Input caps**: an answer longer than ``max_answer_chars`` or with braces nested deeper than
   ``max_brace_depth`` scores 0 without parsing. Why: math-verify's regexes and the LaTeX parser
   are super-linear on pathological input (thousands of nested braces, a long ``$1+1+...$``) and
   Python's regex engine cannot be interrupted by a signal, so a time limit alone is not enough;
   real answers are short (the longest MATH-500 answer has 159 characters).
3. **Fast paths**: equal after whitespace/LaTeX-spacing normalisation → 1.0; two plain integers
   (every DAPO-Math-17K and AIME answer) → integer comparison. No sympy involved.
4. **math-verify** (Kydlíček et al., HuggingFace): both sides are parsed as LaTeX/expressions and
   compared mathematically (numbers within 1e-6 relative rounding, fractions, symbolic
   simplification, intervals, sets, tuples, equations ``x = 5`` vs ``5``), under the time limit
   of :mod:`ebpo.rewards.verify` (``timeout`` seconds for parse + verify). The limit measures
   verification only: the first such call of a process (or of a thread whose helper process has
   to start) first waits for math-verify to load — 0.3 s on an idle machine, seconds on a loaded
   one — and that wait is not counted, nor is an import sympy makes on first use.

A call that runs out of time scores 0 and is counted (:func:`~ebpo.rewards.stats.reward_stats`).
Nothing here raises on any response or ground truth; only bad options raise (ValueError).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tqdm.auto import tqdm

from ebpo.rewards.extract import (
    INTEGER,
    MAX_ANSWER_CHARS,
    MAX_BRACE_DEPTH,
    brace_depth,
    canonical_form,
    final_answer,
    input_text,
    integer_key,
    is_missing_text,
    strip_math_delimiters,
)
from ebpo.rewards.stats import count
from ebpo.rewards.verify import DEFAULT_TIMEOUT, check_timeout, verify_with_time_limit
from ebpo.utils.checks import check_positive_int, short_repr

__all__ = ["ScoreResult", "score_math", "score_math_batch", "score_math_detailed"]

# The package's logger name (not this module's): the warnings below are ebpo.rewards' own.
_LOG = logging.getLogger("ebpo.rewards")


@dataclass(frozen=True)
class ScoreResult:
    """Outcome of scoring one response: ``score`` in {0.0, 1.0}, ``status`` (one of
    :data:`~ebpo.rewards.stats.STATUSES`) and the extracted ``prediction`` (None if nothing was
    found)."""

    score: float
    status: str
    prediction: str | None


_WARNED: set[str] = set()
_UNSCORABLE_WARNINGS = {  # one per status of stats.UNSCORABLE
    "missing_ground_truth": (
        "a ground truth is missing (None, NaN, pandas.NA, empty, or text such as 'nan', 'None', "
        "'null', 'N/A', '[]': see ebpo.rewards.extract)"
    ),
    "bad_input": "a response or ground truth is neither text nor a number",
}


def _warn_once(status: str) -> None:
    """Say once per process, in the log, that some responses cannot be scored at all; the
    counters in reward_stats() say how many."""
    if status not in _UNSCORABLE_WARNINGS or status in _WARNED:
        return
    _WARNED.add(status)
    _LOG.warning(
        "%s: such responses score 0; reward_stats()[%r] counts them",
        _UNSCORABLE_WARNINGS[status],
        status,
    )


def score_math_detailed(
    response: str,
    ground_truth: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    max_answer_chars: int = MAX_ANSWER_CHARS,
    max_brace_depth: int = MAX_BRACE_DEPTH,
    isolation: str = "auto",
) -> ScoreResult:
    """Score one response and say how: see the module docstring for the pipeline.

    ``timeout``: seconds in (0, :data:`~ebpo.rewards.verify.MAX_TIMEOUT`]; anything else (NaN,
    inf, 1e10, a string) is a ValueError. ``isolation``: ``"auto"`` (in-process timer in the main
    thread, helper process elsewhere), ``"signal"`` (main thread only) or ``"process"`` (always a
    helper process; survives even computations that ignore signals, at the cost of a pipe round
    trip per parsed call).

    Inputs never raise: ``response`` and ``ground_truth`` are text or numbers (a float equal to an
    integer compares as the integer). A missing ground truth (None, NaN, pandas.NA, empty or
    invisible-only text, or the text of a stringified missing value: ``nan``, ``None``, ``null``,
    ``N/A``, ``NA``, ``[]``..., listed in :mod:`ebpo.rewards.extract`) scores 0 with status
    ``missing_ground_truth``; bytes, lists, dicts and other objects on either side score 0 with
    status ``bad_input``; an integer with more digits than ``max_answer_chars`` scores 0 with
    status ``too_long``. Each is counted in :func:`~ebpo.rewards.stats.reward_stats`, and the
    first missing ground truth / bad input of a process is logged as a warning. A missing
    response is ``no_answer``.
    """
    timeout = check_timeout(timeout)
    max_answer_chars = check_positive_int("max_answer_chars", max_answer_chars)
    max_brace_depth = check_positive_int("max_brace_depth", max_brace_depth)
    if not isinstance(isolation, str) or isolation not in ("auto", "signal", "process"):
        raise ValueError(
            f"isolation must be 'auto', 'signal' or 'process', got {short_repr(isolation)}"
        )
    gold, gold_problem = input_text(ground_truth, max_answer_chars)
    text, response_problem = input_text(response, max_answer_chars)
    if gold_problem == "missing" or (gold_problem is None and is_missing_text(gold)):
        result = ScoreResult(0.0, "missing_ground_truth", None)
    elif gold_problem is not None:
        result = ScoreResult(0.0, gold_problem, None)
    elif response_problem in ("bad_input", "too_long"):
        result = ScoreResult(0.0, response_problem, None)
    else:  # a missing response is "" here: no answer
        gold = strip_math_delimiters(gold)
        result = _score(text, gold, timeout, max_answer_chars, max_brace_depth, isolation)
    count("calls", result.status, *(("correct",) if result.score == 1.0 else ()))
    _warn_once(result.status)
    return result


def _score(
    response: str, gold: str, timeout: float, max_chars: int, max_depth: int, isolation: str
) -> ScoreResult:
    """Score a response against a non-empty ground truth (delimiters already stripped)."""
    prediction = final_answer(response, max_chars)
    if prediction is None:
        return ScoreResult(0.0, "no_answer", prediction)
    if not isinstance(prediction, str):  # TOO_LONG: the last box does not close within the cap
        return ScoreResult(0.0, "too_long", None)
    too_big = (
        len(prediction) > max_chars
        or len(gold) > max_chars
        or brace_depth(prediction) > max_depth
        or brace_depth(gold) > max_depth
    )
    if too_big:
        return ScoreResult(0.0, "too_long", prediction[:max_chars])
    if canonical_form(prediction) == canonical_form(gold):
        return ScoreResult(1.0, "exact", prediction)
    if INTEGER.fullmatch(prediction) and INTEGER.fullmatch(gold):
        return ScoreResult(
            float(integer_key(prediction) == integer_key(gold)), "integer", prediction
        )
    status = verify_with_time_limit(prediction, gold, timeout, isolation)
    return ScoreResult(1.0 if status == "verified" else 0.0, status, prediction)


def score_math(response: str, ground_truth: str, *, timeout: float = DEFAULT_TIMEOUT) -> float:
    """1.0 if the final answer of ``response`` (DAPO ``Answer:`` line or last ``\\boxed{}``)
    equals ``ground_truth`` mathematically (math-verify), else 0.0. Never raises on any response or
    ground truth (see :func:`score_math_detailed` for what cannot be scored: it scores 0 and is
    counted) and never takes much longer than ``timeout`` seconds; timeouts score 0 and are
    counted in :func:`~ebpo.rewards.stats.reward_stats`. A ``timeout`` outside
    (0, :data:`~ebpo.rewards.verify.MAX_TIMEOUT`] is a ValueError."""
    return score_math_detailed(response, ground_truth, timeout=timeout).score


def score_math_batch(
    responses: Sequence[str],
    ground_truths: Sequence[str],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    num_workers: int = 1,
    progress: bool = False,
) -> list[ScoreResult]:
    """Score many responses. ``num_workers > 1`` spreads the math-verify calls over that many
    helper processes (threads hand them out), which pays off when thousands of responses need the
    parser. ``progress`` shows a tqdm bar."""
    if len(responses) != len(ground_truths):
        raise ValueError(
            f"responses and ground_truths must have the same length, got {len(responses)} and {len(ground_truths)}"
        )
    timeout = check_timeout(timeout)
    num_workers = check_positive_int("num_workers", num_workers)
    pairs = list(zip(responses, ground_truths, strict=True))
    bar = tqdm(total=len(pairs), desc="scoring", unit="response", disable=not progress)

    def one(pair: tuple[str, str]) -> ScoreResult:
        result = score_math_detailed(pair[0], pair[1], timeout=timeout)
        bar.update(1)
        return result

    with bar:
        if num_workers == 1 or len(pairs) < 2:
            return [one(pair) for pair in pairs]
        with ThreadPoolExecutor(max_workers=num_workers) as pool:
            return list(pool.map(one, pairs))
