"""Curriculum orders of a whole dataset: its topic / difficulty columns found (a top-level column,
or verl's ``extra_info`` dict) and handed to :func:`ebpo.curriculum.order_indices`; and the column
picking ``ebpo data label`` uses (the first of several candidate columns, complete or not).

Reads a list of dicts, a pandas ``DataFrame``, a Hugging Face ``Dataset`` or the table behind
verl's ``RLHFDataset`` without importing any of those libraries; used by ``ebpo data`` and by the
verl sampler (``ebpo.integrations.verl.curriculum_sampler``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ebpo.curriculum.order import ORDERS, order_indices
from ebpo.utils.checks import is_missing

__all__ = [
    "DIFFICULTY_KEYS",
    "TOPIC_KEYS",
    "column_has_any",
    "column_is_complete",
    "column_names",
    "column_values",
    "curriculum_order",
    "dataset_column",
    "is_blank_or_missing",
    "pick_column",
    "present_columns",
]

#: Where the labels are looked for when no key is given: a top-level column, then verl's
#: ``extra_info`` dict.
TOPIC_KEYS = ("topic", "extra_info.topic")
DIFFICULTY_KEYS = ("difficulty", "extra_info.difficulty")


def dataset_column(data_source: Any, key: str) -> list | None:
    """Column ``key`` of a dataset, or None if it has none. ``key`` may be dotted
    (``extra_info.topic``). Reads the table behind verl's ``RLHFDataset`` (``.dataframe``), a
    Hugging Face ``Dataset``, a pandas ``DataFrame`` or a list of dicts, without calling the
    dataset's ``__getitem__`` (which tokenises in verl)."""
    head, _, rest = key.partition(".")
    column = _top_level_column(data_source, head)
    if column is None:
        return None
    for part in rest.split(".") if rest else ():
        if not all(isinstance(cell, Mapping) and part in cell for cell in column):
            return None
        column = [cell[part] for cell in column]
    return column


def curriculum_order(
    data_source: Any,
    order: str,
    *,
    seed: int = 0,
    topic_key: str | None = None,
    difficulty_key: str | None = None,
) -> list[int]:
    """:func:`ebpo.curriculum.order_indices` over a dataset's own topic / difficulty columns
    (``topic_key`` / ``difficulty_key``, else the first of :data:`TOPIC_KEYS` /
    :data:`DIFFICULTY_KEYS` it has)."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(ORDERS)}; got {order!r}")
    n = len(data_source)
    topic = difficulty = None
    if order in ("topic", "topic_then_difficulty"):
        topic = _find_column(data_source, topic_key, TOPIC_KEYS, "topic", order)
    if order in ("difficulty", "topic_then_difficulty"):
        difficulty = _find_column(data_source, difficulty_key, DIFFICULTY_KEYS, "difficulty", order)
    return order_indices(n, order, topic=topic, difficulty=difficulty, seed=seed)


def _top_level_column(data_source: Any, name: str) -> list | None:
    table = getattr(data_source, "dataframe", None)  # verl RLHFDataset
    if table is None:
        table = data_source
    names = getattr(table, "column_names", None)  # datasets.Dataset
    if names is None and hasattr(table, "columns"):  # pandas.DataFrame
        names = list(table.columns)
    if names is not None:
        return list(table[name]) if name in names else None
    if isinstance(table, Sequence) and all(isinstance(row, Mapping) for row in table):
        if not all(name in row for row in table):
            return None
        return [row[name] for row in table]
    return None


def _find_column(
    data_source: Any, key: str | None, defaults: Sequence[str], what: str, order: str
) -> list:
    keys = (key,) if key else defaults
    for candidate in keys:
        column = dataset_column(data_source, candidate)
        if column is not None:
            return column
    raise ValueError(
        f"order={order!r} needs a {what} column; the dataset has none of {', '.join(map(repr, keys))} "
        f"(write one with `ebpo data label`, or name it: --{what}-column, data.curriculum.{what}_key)"
    )


# ------------------------------------------------------------------------------ column picking
def column_values(data_source: Any, name: str) -> list:
    """:func:`dataset_column`; a missing column raises ValueError naming the dataset's columns."""
    column = dataset_column(data_source, name)
    if column is None:
        raise ValueError(
            f"the dataset has no column {name!r}; its columns are {column_names(data_source)}"
        )
    return column


def present_columns(data_source: Any, explicit: str | None, defaults: Sequence[str]) -> list[str]:
    """Those of ``[explicit]`` (or of ``defaults`` when no column is named) the dataset has."""
    names = [explicit] if explicit else list(defaults)
    return [n for n in names if dataset_column(data_source, n) is not None]


def pick_column(data_source: Any, explicit: str | None, defaults: Sequence[str], what: str) -> str:
    """The first of :func:`present_columns`; ValueError naming ``what`` if there is none."""
    names = present_columns(data_source, explicit, defaults)
    if not names:
        wanted = explicit or " or ".join(defaults)
        raise ValueError(
            f"the dataset has no {what} column ({wanted}); its columns are {column_names(data_source)}"
        )
    return names[0]


def is_blank_or_missing(value: Any) -> bool:
    """:func:`ebpo.utils.checks.is_missing`, or blank text: ebpo.data's unified schema writes ""
    for "no topic / no difficulty"."""
    if isinstance(value, str):
        return not value.strip()
    return is_missing(value)


def column_is_complete(data_source: Any, name: str) -> bool:
    """Whether the dataset has column ``name`` with a value on every row."""
    column = dataset_column(data_source, name)
    return column is not None and all(not is_blank_or_missing(v) for v in column)


def column_has_any(data_source: Any, name: str) -> bool:
    """Whether the dataset has column ``name`` with a value on at least one row."""
    column = dataset_column(data_source, name)
    return column is not None and any(not is_blank_or_missing(v) for v in column)


def column_names(data_source: Any) -> list[str]:
    """The dataset's top-level column names, for messages (a list of dicts: every key any row has)."""
    table = getattr(data_source, "dataframe", None)
    if table is None:
        table = data_source
    names = getattr(table, "column_names", None)
    if names is None and hasattr(table, "columns"):
        names = table.columns
    if names is not None:
        return list(names)
    rows = table if isinstance(table, Sequence) else []
    return list(dict.fromkeys(key for row in rows if isinstance(row, Mapping) for key in row))
