"""Answer extraction and normalisation: the final answer of a response (the later of its last DAPO
``Answer: ...`` line and its last ``\\boxed{...}``), the canonical form compared by the fast path,
the integer key, and the conversion of a response or ground truth (text, number or missing value)
to text. Everything here runs in linear time on any string and never calls math-verify.

**Missing ground truths written as text** (:func:`is_missing_text`). A missing
value that went through ``str()``, JSON, a CSV or a spreadsheet arrives as text, and scoring it
would reward a policy for writing the same text (``score_math("Answer: None", "None")`` was 1.0).
A ground truth is missing when, after removing whitespace and invisible characters (zero-width
space / joiner / non-joiner, word joiner, BOM, soft hyphen, NBSP and every other Unicode space,
control and format character, Hangul and Braille blank fillers), NFKC normalisation (full-width
letters), at most four wrappers (``$...$``, ``\\(...\\)``, ``\\[...\\]``, ``\\text{...}``,
``\\mathrm{...}`` and the other text-font commands, surrounding quotes) and a trailing period, it
is (case-insensitive unless said otherwise):

* empty;
* ``nan`` with an optional sign and ``q``/``s`` prefix or payload (``-nan``, ``+NaN``, ``sNaN``,
  ``-nan(ind)``), or the C runtime's ``1.#IND``, ``-1.#IND``, ``1.#QNAN``, ``-1.#QNAN``;
* ``None`` (Python), ``null`` / ``NULL`` (JSON, SQL), ``NaT`` and ``<NA>`` (pandas);
* ``NA`` or ``na`` (R, CSV) — **case-sensitive**: ``Na`` (sodium) is an answer;
* ``N/A``, ``#N/A``, ``#N/A N/A``, ``#NA`` (spreadsheets; pandas reads all of the above as
  missing), and the spreadsheet errors ``#NULL!``, ``#DIV/0!``, ``#VALUE!``, ``#REF!``,
  ``#NAME?``, ``#NUM!``;
* an empty container or string written out: ``[]``, ``{}``, ``()``, ``""``, ``''``.

Not missing, because they are real answers: ``undefined``, ``\\infty`` / ``inf``, ``\\{\\}`` and
``\\emptyset`` (the empty set), ``Na``, ``none of the above``, ``no solution``. A genuine answer
"none" cannot be told from a stringified ``None``: it counts as missing (0, counted in
``reward_stats()["missing_ground_truth"]``, logged once); write it as ``none of them``.
"""

from __future__ import annotations

import decimal
import functools
import numbers
import re
import unicodedata
from typing import Any, Final

from ebpo.utils.checks import is_missing

__all__ = [
    "INTEGER",
    "MAX_ANSWER_CHARS",
    "MAX_BRACE_DEPTH",
    "MISSING_SPELLINGS",
    "TOO_LONG",
    "brace_depth",
    "canonical_form",
    "extract_answer",
    "final_answer",
    "input_text",
    "integer_key",
    "is_missing_text",
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
#: What a missing value becomes as text (see the module docstring): compared case-insensitively,
#: after invisible characters and wrappers are removed; "NA" only as "NA" or "na". A "nan" may
#: also carry a sign, a q/s prefix or a payload: :data:`_NAN`.
MISSING_SPELLINGS = (
    "",
    "nan",
    "None",
    "null",
    "NaT",
    "<NA>",
    "NA",
    "N/A",
    "#N/A",
    "#N/A N/A",
    "#NA",
    "1.#IND",
    "1.#QNAN",
    "#NULL!",
    "#DIV/0!",
    "#VALUE!",
    "#REF!",
    "#NAME?",
    "#NUM!",
    "[]",
    "{}",
    "()",
    '""',
    "''",
)
_CASE_SENSITIVE_MISSING = frozenset({"NA", "na"})  # not "Na": sodium
_MISSING_KEYS = frozenset(
    "".join(t.split()).lower() for t in MISSING_SPELLINGS if t not in _CASE_SENSITIVE_MISSING
)
_NAN = re.compile(r"[+\-\u2212]?(?:[qs]?nan(?:\([0-9a-z_]*\))?|1\.#(?:ind|qnan|snan)0*)")
_TEXT_WRAPPER = re.compile(
    r"\\(?:text|textrm|textnormal|textit|textbf|textsf|texttt|mathrm|mathit|mathbf|mathsf|mathtt"
    r"|mbox|operatorname)\{(.*)\}",
    re.DOTALL,
)
# Characters that show nothing: besides spaces, controls (Cc) and format characters (Cf: zero-width
# space/joiners, BOM, soft hyphen, bidi marks...), these letters and marks that render blank.
_BLANK_LETTERS = frozenset("\u034f\u115f\u1160\u17b4\u17b5\u2800\u3164\uffa0")
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})
# The longest text checked for a missing spelling: the spellings are short, so longer text is an
# answer (and the check stays cheap on a megabyte of it).
_MISSING_SCAN_CHARS = 256


def _visible(text: str, limit: int) -> str | None:
    """``text`` without invisible characters, or None once more than ``limit`` visible ones are
    found (then it is an answer, not a missing spelling; the scan stops there)."""
    kept: list[str] = []
    for ch in text:
        if (
            ch.isspace()
            or ch in _BLANK_LETTERS
            or unicodedata.category(ch) in _INVISIBLE_CATEGORIES
        ):
            continue
        kept.append(ch)
        if len(kept) > limit:
            return None
    return "".join(kept)


def is_missing_text(text: str) -> bool:
    """Whether the ground truth ``text`` spells a missing value (the list and the rules are in the
    module docstring): empty or invisible only, ``nan``, ``None``, ``null``, ``N/A``, ``[]``...
    Linear time; stops early on long text."""
    if len(text) <= _MISSING_SCAN_CHARS:
        return _is_missing_short(text)
    visible = _visible(text, _MISSING_SCAN_CHARS)
    return visible is not None and _is_missing_short(visible)


@functools.lru_cache(maxsize=4096)  # ground truths repeat G times per prompt
def _is_missing_short(text: str) -> bool:
    key = _visible(unicodedata.normalize("NFKC", text), _MISSING_SCAN_CHARS)
    if key is None:
        return False
    for _ in range(4):  # at most four wrappers, e.g. $\text{"nan"}$
        previous = key
        key = strip_math_delimiters(key)
        wrapped = _TEXT_WRAPPER.fullmatch(key)
        if wrapped:
            key = wrapped.group(1)
        elif len(key) >= 2 and key[0] == key[-1] and key[0] in "\"'`":
            key = key[1:-1]
        if key == previous:
            break
    if key in _CASE_SENSITIVE_MISSING:
        return True
    key = key.lower()
    return key in _MISSING_KEYS or _NAN.fullmatch(key) is not None


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
