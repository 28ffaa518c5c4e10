"""Answer extraction and normalisation: the final answer of a response (the later of its last DAPO
``Answer: ...`` line and its last ``\\boxed{...}``), the canonical form compared by the fast path,
the integer key, and the conversion of a response or ground truth (text, number or missing value)
to text. Everything here runs in linear time on any string and never calls math-verify.
"""

from __future__ import annotations

import decimal
import numbers
import re
import unicodedata
from typing import Any, Final

from ebpo.utils.checks import is_missing

__all__ = [
    "INTEGER",
    "MAX_ANSWER_CHARS",
    "MAX_BRACE_DEPTH",
    "MISSING_TEXTS",
    "TOO_LONG",
    "brace_depth",
    "canonical_form",
    "extract_answer",
    "final_answer",
    "input_text",
    "integer_key",
    "normalize_answer",
    "strip_math_delimiters",
]

#: Longest answer (characters) that is compared; longer ones score 0 without parsing.
MAX_ANSWER_CHARS = 512
#: Deepest brace nesting that is compared; deeper answers score 0 without parsing.
MAX_BRACE_DEPTH = 32

# "Answer: 42", also with Markdown bold ("**Answer:** 42", "**Answer**: 42") as chat models write
# it, and with the answer on the next line ("Answer:\n42"), which DAPO's own regex accepts too.
_ANSWER_LINE = re.compile(r"answer[ \t*]{0,8}:[ \t*]*(?:\n[ \t*]*)?([^\n]*)", re.IGNORECASE)
_BOX_MARKERS = ("\\boxed", "\\fbox")


class _TooLong:
    """Type of :data:`TOO_LONG`."""

    def __repr__(self) -> str:
        return "TOO_LONG"


#: What :func:`final_answer` returns for a box that does not close within the length cap.
TOO_LONG: Final = _TooLong()


def _last_answer_line(text: str) -> tuple[int, str] | None:
    last = None
    for match in _ANSWER_LINE.finditer(text):
        if match.group(1).strip(" \t*$."):
            last = match
    if last is None:
        return None
    return last.start(), last.group(1)


def _last_boxed(text: str, limit: int) -> tuple[int, str | _TooLong | None] | None:
    """Start of the last ``\\boxed``/``\\fbox`` and its brace-balanced content: None as content if
    the braces never close (truncated response), :data:`TOO_LONG` if they do not close within
    ``limit`` characters (the scan stops there, so the cost is bounded)."""
    start, marker = max((text.rfind(m), m) for m in _BOX_MARKERS)
    if start < 0:
        return None
    i = text.find("{", start)
    if i < 0 or text[start + len(marker) : i].strip():
        return None
    depth = 0
    end = min(len(text), i + limit + 2)
    for j in range(i, end):
        ch = text[j]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return start, text[i + 1 : j]
    return start, (TOO_LONG if end < len(text) else None)


def strip_math_delimiters(answer: str) -> str:
    """``answer`` without surrounding whitespace, one pair of ``$$``/``$``/``\\(...\\)``/
    ``\\[...\\]`` delimiters, Markdown bold stars and trailing periods."""
    answer = answer.strip().rstrip(".").rstrip("*").strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if (
            answer.startswith(left)
            and answer.endswith(right)
            and len(answer) >= len(left) + len(right)
        ):
            answer = answer[len(left) : len(answer) - len(right)].strip()
            break
    return answer.rstrip(".").strip()


def final_answer(response: str, max_chars: int) -> str | _TooLong | None:
    """The final answer of ``response`` (delimiters stripped), None if there is none, or
    :data:`TOO_LONG` if the last box does not close within ``max_chars`` characters."""
    if not isinstance(response, str) or not response:
        return None
    line = _last_answer_line(response)
    box = _last_boxed(response, max_chars)
    if box is not None and (line is None or box[0] >= line[0]):
        content = box[1]
        return content if not isinstance(content, str) else strip_math_delimiters(content)
    if line is None:
        return None
    answer = strip_math_delimiters(line[1])
    inner = _last_boxed(answer, max_chars)  # "Answer: $\\boxed{5}$" -> "5"
    if inner is not None and isinstance(inner[1], str):
        answer = strip_math_delimiters(inner[1])
    return answer or None


def extract_answer(response: str, *, max_answer_chars: int = MAX_ANSWER_CHARS) -> str | None:
    """The final answer of ``response``: the later of its last ``Answer: ...`` line (DAPO format)
    and its last ``\\boxed{...}``, without ``$`` delimiters or a trailing period; None if there is
    neither, or if the last box does not close (within ``max_answer_chars``). Linear time on any
    string."""
    answer = final_answer(response, max_answer_chars)
    return answer if isinstance(answer, str) else None


# ------------------------------------------------------------------------------ canonical forms
_SPACING = re.compile(r"\\[,;:! ]|\\(?:left|right|displaystyle)\b|\s+")
#: A plain integer (optional sign, decimal digits): such answers are compared by :func:`integer_key`.
INTEGER = re.compile(r"[+-]?\d+")


def canonical_form(text: str) -> str:
    """``text`` without whitespace, LaTeX spacing commands, ``\\left``/``\\right`` and a trailing
    period, with ``\\dfrac``/``\\tfrac`` -> ``\\frac``: none of them changes a value, so equal
    canonical forms let identical answers skip the parser."""
    text = _SPACING.sub("", text)
    return text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").rstrip(".")


def normalize_answer(answer: str) -> str:
    """A comparison key for extracted answers (used by maj@k voting): whitespace, LaTeX spacing
    and ``\\left``/``\\right`` removed, ``\\dfrac``/``\\tfrac`` -> ``\\frac``, no ``$`` or trailing period."""
    return canonical_form(strip_math_delimiters(answer))


def brace_depth(text: str) -> int:
    """The deepest nesting of ``{`` in ``text``."""
    depth = best = 0
    for ch in text:
        if ch == "{":
            depth += 1
            best = max(best, depth)
        elif ch == "}":
            depth -= 1
    return best


def integer_key(text: str) -> tuple[bool, str]:
    """``(negative, digits without leading zeros)`` of a string matching :data:`INTEGER`: equal keys
    <=> equal integers. Digit by digit, so no int() and no limit on the number of digits (Python
    refuses to convert more than 4,300); Unicode decimal digits count as their value, as in int()."""
    negative = text.startswith("-")
    digits = "".join(str(unicodedata.decimal(ch)) for ch in text.lstrip("+-")).lstrip("0")
    return (negative and bool(digits), digits)


# ---------------------------------------------------------------------------------- input text
#: Text a missing value turns into when a caller (or pandas' astype(str)) stringified it, lower
#: case; no math answer is "nan", and scoring "Answer: nan" as correct would reward the policy for
#: writing it.
MISSING_TEXTS = frozenset({"nan", "<na>"})


def input_text(value: Any, max_chars: int) -> tuple[str, str | None]:
    """A response or ground truth as text: ``(text, None)``, or ``("", problem)`` with problem
    ``"missing"`` (None, NaN, pandas.NA/NaT), ``"too_long"`` (an integer with more digits than
    ``max_chars``, which Python may even refuse to write out) or ``"bad_input"`` (bytes,
    containers, arbitrary objects: their str() is a repr, not an answer, and may raise).

    Numbers are accepted because datasets store answers as numbers: a float equal to an integer
    (27.0) is written as the integer, so it compares as one."""
    if isinstance(value, str):
        return str.__str__(value), None  # a plain str even for subclasses (numpy.str_, ...)
    if is_missing(value):
        return "", "missing"
    if isinstance(value, bool) or not isinstance(value, numbers.Real | decimal.Decimal):
        return "", "bad_input"  # (complex numbers too: no math answer here is complex-typed)
    try:
        if isinstance(value, numbers.Integral):
            value = int(value)
            # Over 4 bits per digit: such an int has more than max_chars digits; say so before
            # str() refuses it (> 4,300 digits) or, with that limit lifted, takes quadratic time.
            if value.bit_length() > 4 * (max_chars + 2):
                return "", "too_long"
            return str(value), None
        if not isinstance(value, numbers.Rational):  # float, numpy floats, Decimal
            number = float(value)
            if number.is_integer():
                return str(int(number)), None
        return str(value), None
    except ValueError:  # int -> str digit limit (e.g. a Fraction with a huge numerator)
        return "", "too_long"
    except Exception:  # a number type whose conversion raises
        return "", "bad_input"
