"""The rules every row of a replay's input obeys, whatever its format (module doc of
:mod:`ebpo.analysis.replay.readers`): the three columns read (:class:`Columns`), a block of checked
rows (:class:`Chunk`), and the checks of a reward, a step and a group key, each naming the row's
place (``path: line N``) in its error.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ebpo.utils.checks import is_integer, is_real, short_repr

__all__ = [
    "CHUNK_ROWS",
    "INT64_MAX",
    "KEY_KINDS",
    "Chunk",
    "Columns",
    "check_reward",
    "check_step",
    "json_key",
    "key_kind",
    "make_chunk",
]

#: rows per chunk of the CSV and Parquet readers and of the Python JSON reader
CHUNK_ROWS = 65_536
INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class Columns:
    """The names of the three columns read from a file."""

    key: str
    reward: str
    step: str

    def names(self) -> tuple[str, str, str]:
        return self.key, self.reward, self.step


@dataclass(frozen=True)
class Chunk:
    """Consecutive rows of one file: ``keys`` (a pyarrow array without nulls), ``rewards``
    (float64, finite), ``steps`` (int64); ``start`` is the index of the first row in the file
    (rows count from 0; blank lines are not rows)."""

    keys: Any
    rewards: np.ndarray
    steps: np.ndarray
    start: int


def json_key(value: Any) -> str:
    """A key that is neither a string nor an integer (chat messages, a float) as its JSON text,
    object fields sorted: two keys are the same group when their texts are equal."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


#: the kinds of key a JSON-lines file may hold (all its keys have one), as messages name them
KEY_KINDS = {"string": "a string", "integer": "an integer", "json": "a list, object or float"}


def key_kind(value: Any) -> str:
    """``"string"``, ``"integer"`` or ``"json"`` (anything else: compared by its JSON text)."""
    if isinstance(value, str):
        return "string"
    return "integer" if is_integer(value) else "json"


def check_reward(value: Any, name: str, where: str) -> float:
    """``value`` as a float if it is a finite number, else ValueError naming ``where``."""
    if value is None:
        raise ValueError(f"{where}: {name!r} is null, expected a number")
    if not is_real(value):
        raise ValueError(f"{where}: {name!r} is not a number: {short_repr(value)}")
    number = float(value)
    if math.isnan(number):
        raise ValueError(f"{where}: {name!r} is NaN (a failed reward call?); fix or drop that row")
    if math.isinf(number):
        raise ValueError(f"{where}: {name!r} is infinite ({number}), expected a finite number")
    return number


def check_step(value: Any, name: str, where: str) -> int:
    """``value`` as an int if it is an integer that fits 64 bits, else ValueError."""
    if value is None:
        raise ValueError(f"{where}: {name!r} is null, expected an integer step")
    if not is_integer(value):
        raise ValueError(f"{where}: {name!r} must be an integer step, got {short_repr(value)}")
    if not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise ValueError(
            f"{where}: {name!r} must be an integer step that fits 64 bits (-2**63 to 2**63 - 1), "
            f"got {short_repr(value)}"
        )
    return int(value)


def make_chunk(keys: list[Any], rewards: list[float], steps: list[int], start: int) -> Chunk:
    """A :class:`Chunk` of Python lists."""
    import pyarrow as pa  # optional heavy dependency (ebpo[data])

    return Chunk(
        pa.array(keys), np.asarray(rewards, np.float64), np.asarray(steps, np.int64), start
    )
