"""Training orders of labelled rows (EBPO spec, "Curriculum / clustered sampling"; Prop 3.8):
:data:`ORDERS`, :func:`order_indices`, quantile :func:`difficulty_tiers` and :func:`is_contiguous`.

Labels come from :mod:`ebpo.curriculum.topics` and :mod:`ebpo.curriculum.difficulty`;
:mod:`ebpo.curriculum.dataset_order` finds them in a dataset's columns.
"""

from __future__ import annotations

import bisect
import math
import numbers
from collections.abc import Hashable, Sequence
from decimal import Decimal
from typing import Any

import numpy as np

from ebpo.utils.checks import check_int, check_positive_int, is_missing

__all__ = ["ORDERS", "difficulty_tiers", "is_contiguous", "order_indices"]

ORDERS = ("shuffle", "topic", "difficulty", "topic_then_difficulty")


def order_indices(
    n: int,
    order: str,
    *,
    topic: Sequence | None = None,
    difficulty: Sequence[Any] | None = None,
    seed: int = 0,
) -> list[int]:
    """A permutation of ``range(n)``: the order in which to visit the rows (spec, "Curriculum").

    * ``shuffle`` — uniformly random;
    * ``topic`` — contiguous blocks, one per topic label (blocks in sorted label order, the paper's
      "sorted by topic"), rows shuffled inside a block;
    * ``difficulty`` — ascending ``difficulty`` (easy -> hard; higher = harder), ties shuffled;
      difficulties are real numbers (int, float, Decimal, numpy numbers; integers of any size
      compare exactly), every one finite: a boolean, a string (even ``"1"``), a missing value or
      a NaN is refused with a ValueError naming the row and the value;
    * ``topic_then_difficulty`` — topic blocks, easy -> hard inside each block.

    The same ``seed`` gives the same permutation.
    """
    n = check_int("n", n, low=0)
    if order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(ORDERS)}; got {order!r}")
    seed = check_int("seed", seed, low=0)
    rng = np.random.default_rng(seed)
    # A random tie-break for every row; every ordering sorts by (keys..., tie) so rows with equal
    # keys come in a seeded random order.
    tie = rng.permutation(n)
    if order == "shuffle":
        return [int(i) for i in tie]
    keys: list[np.ndarray] = []
    if order in ("topic", "topic_then_difficulty"):
        keys.append(_topic_codes(_require(topic, "topic", order), n))
    if order in ("difficulty", "topic_then_difficulty"):
        keys.append(_difficulty_codes(_require(difficulty, "difficulty", order), n))
    rank = np.empty(n, dtype=np.int64)
    rank[tie] = np.arange(n)
    # np.lexsort sorts by the LAST key first.
    perm = np.lexsort([rank, *reversed(keys)])
    return [int(i) for i in perm]


def difficulty_tiers(difficulty: Sequence[Any], num_tiers: int) -> list[int]:
    """Quantile tiers ``0`` (easiest) .. ``num_tiers - 1`` (hardest) of a difficulty column.

    A row's tier is ``floor(num_tiers * (rows strictly easier) / n)``: equal difficulties share a
    tier, tiers never decrease with difficulty, and with distinct values every tier holds
    ``n / num_tiers`` rows up to one. Pass rates over k samples take only k + 1 values, so with
    many ties some tiers may come out empty.
    """
    num_tiers = check_positive_int("num_tiers", num_tiers)
    values = _difficulty_values(difficulty, None)
    n = len(values)
    ordered = sorted(values)  # exact comparisons, as in order_indices
    return [bisect.bisect_left(ordered, value) * num_tiers // n for value in values]


def is_contiguous(labels: Sequence[Hashable]) -> bool:
    """Whether every label's rows form one contiguous run (what topic blocks guarantee)."""
    seen: set = set()
    previous: object = object()
    for label in labels:
        if label != previous:
            if label in seen:
                return False
            seen.add(label)
            previous = label
    return True


def _require(values: Sequence | None, name: str, order: str) -> Sequence:
    if values is None:
        raise ValueError(f"order={order!r} needs {name}= (one label per row); got None")
    return values


def _topic_codes(topic: Sequence, n: int) -> np.ndarray:
    """Integer code per row such that codes follow the sorted order of the distinct labels."""
    labels = list(topic)
    if len(labels) != n:
        raise ValueError(f"topic must have one label per row ({n}); got {len(labels)}")
    missing = [i for i, label in enumerate(labels) if is_missing(label)]
    if missing:
        raise ValueError(
            f"topic has {len(missing)} missing label(s) (first at row {missing[0]}); label every row "
            "(ebpo data label) or use order='shuffle'"
        )
    try:
        hash(tuple(labels))
    except TypeError as error:
        raise ValueError(f"topic labels must be hashable (str or int); {error}") from None
    distinct = sorted(set(labels), key=_label_sort_key)
    code = {label: i for i, label in enumerate(distinct)}
    return np.array([code[label] for label in labels], dtype=np.int64)


def _label_sort_key(label: Hashable) -> tuple:
    # Numbers sort numerically and before strings; anything else by its text, so mixed columns
    # (e.g. cluster ids read back as strings next to ints) still order deterministically.
    # Numbers compare exactly (no float(): an integer past 1e308 would overflow it).
    if isinstance(label, bool | int | float | np.integer | np.floating):
        return (0, label.item() if isinstance(label, np.generic) else label, "")
    return (1, 0, str(label))


def _difficulty_codes(difficulty: Sequence[Any], n: int | None) -> np.ndarray:
    """Integer code per row following the order of the difficulties (equal values share a code),
    compared exactly: Python compares integers of any size with floats without rounding, so a
    difficulty of ``10**400`` sorts after ``1e308`` instead of overflowing a float."""
    values = _difficulty_values(difficulty, n)
    code = {value: i for i, value in enumerate(sorted(set(values)))}
    return np.array([code[value] for value in values], dtype=np.int64)


def _difficulty_values(difficulty: Sequence[Any], n: int | None) -> list[Any]:
    """The difficulties as Python numbers, checked: real numbers only (not booleans, not text:
    ``"1"`` is refused, not read as 1), every one finite."""
    values = list(difficulty)
    if n is not None and len(values) != n:
        raise ValueError(f"difficulty must have one value per row ({n}); got {len(values)}")
    out: list[Any] = []
    missing: list[int] = []
    for i, value in enumerate(values):
        if isinstance(value, np.generic):
            value = value.item()
        if is_missing(value):
            missing.append(i)
        elif isinstance(value, bool) or not isinstance(value, numbers.Real | Decimal):
            kind = "a boolean" if isinstance(value, bool) else f"a {type(value).__name__}"
            raise ValueError(
                f"difficulty must be numbers (higher = harder); row {i} holds {value!r}, "
                f"{kind}. Convert level strings such as 'Level 3' with difficulty_from_levels, "
                "or write numeric labels with `ebpo data label`"
            )
        elif not _is_finite(value):
            missing.append(i)
        out.append(value)
    if missing:
        first = missing[0]
        raise ValueError(
            f"difficulty has {len(missing)} missing or non-finite value(s) (first at row {first}): "
            f"{values[first]!r}; fill them or drop those rows"
        )
    return out


def _is_finite(value: Any) -> bool:
    if isinstance(value, int):
        return True  # any size: no float conversion, which overflows past 1e308
    if isinstance(value, Decimal):
        return value.is_finite()
    return math.isfinite(value)
