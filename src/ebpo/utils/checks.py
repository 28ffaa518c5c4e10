"""Argument checks shared by every layer: each raises a ``ValueError`` that names the argument,
what was expected and what it got (the project's convention for bad input).

Pure standard library, so the core (``ebpo.estimators``) may use it too. A check returns the value
it accepted (converted to a plain Python type) so that a caller can write
``self.steps = check_int("steps", steps, low=1)``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import Any, TypeGuard

__all__ = [
    "check_choice",
    "check_int",
    "check_ints",
    "check_positive",
    "check_positive_int",
    "is_integer",
    "is_missing",
    "is_real",
    "short_repr",
]


def is_integer(value: Any) -> TypeGuard[int]:
    """An integer (Python or numpy), not a bool (to mypy, an ``int`` from here on)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value: Any) -> TypeGuard[float]:
    """A real number (Python or numpy), not a bool (to mypy, a ``float`` from here on)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_missing(value: Any) -> bool:
    """A missing value: ``None``, a NaN number (float, numpy, Decimal) or pandas' ``NA`` / ``NaT``.

    Text is never missing here (an empty string is a value); callers that treat blank text as
    missing say so themselves.
    """
    if value is None or type(value).__name__ in ("NAType", "NaTType"):
        return True
    try:
        return isinstance(value, numbers.Number) and bool(value != value)
    except Exception:  # a number type whose comparison misbehaves: not a NaN we can recognise
        return False


def check_choice(argument: str, value: Any, choices: Iterable[Any]) -> Any:
    """``value`` if it is one of ``choices``."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{argument} must be one of {list(choices)}, got {value!r}")
    return value


def check_int(argument: str, value: Any, low: int | None = None) -> int:
    """``value`` as an ``int`` if it is an integer (not a bool) and at least ``low``."""
    if not is_integer(value) or (low is not None and value < low):
        bound = "" if low is None else f" >= {low}"
        raise ValueError(f"{argument} must be an integer{bound}, got {value!r}")
    return int(value)


def check_positive_int(argument: str, value: Any) -> int:
    """``value`` as an ``int`` if it is an integer >= 1."""
    if not is_integer(value) or value < 1:
        raise ValueError(f"{argument} must be a positive integer, got {value!r}")
    return int(value)


def check_ints(argument: str, values: Iterable[Any], low: int) -> tuple[int, ...]:
    """A non-empty sequence of distinct integers, each at least ``low``."""
    values = list(values)
    if not values or any(not is_integer(v) or v < low for v in values):
        raise ValueError(f"{argument} must be non-empty integers >= {low}, got {values}")
    if len(set(values)) != len(values):
        raise ValueError(f"{argument} has duplicates: {values}")
    return tuple(int(v) for v in values)


def check_positive(argument: str, value: Any) -> float:
    """``value`` as a ``float`` if it is a finite real number > 0."""
    if not is_real(value) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{argument} must be a positive finite number, got {value!r}")
    return float(value)


def short_repr(value: Any, limit: int = 60) -> str:
    """repr() for an error message: at most ``limit`` characters, and never raising itself."""
    try:
        text = repr(value)
    except Exception:  # a user's object whose repr misbehaves: name its type instead
        return f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
