"""Reading three columns — a group key, a reward and a step — from one file, in chunks.

Every format yields :class:`Chunk` s of at most a block of rows, so a file of any size is read
with bounded memory; every value is checked, and the first bad one ends the read with a
``ValueError`` naming the file and the line (``path: line N``; Parquet has rows, not lines:
``path: row N``, counting from 1).

* **JSON lines** (verl's rollout dumps, tables): pyarrow's JSON reader parses the three fields in
  C++ and skips every other field (a verl row also carries the prompt and the response text);
  Python's ``json`` is four to six times slower. When pyarrow refuses a file, the same file is
  read again line by line with Python (:func:`python_json_chunks`, which implements the rules
  below exactly) to find the first offending line and say what is wrong with it. A key column
  whose values are neither strings nor integers (chat messages) is read by Python throughout.
* **CSV**: Python's ``csv`` module (it knows each row's line, quoted line breaks included).
* **Parquet**: pyarrow, batch by batch.

The rules, the same for every format: each of the three columns is present and not null; the
reward is a finite number (a boolean is not a number); the step is an integer (a Parquet column
of floats holding integral values is accepted, as pandas writes an integer column with gaps);
the key is a string, an integer, or (JSON lines, Parquet) any nested value, compared by its JSON
text; within one JSON-lines file every key has the kind the first one has.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ebpo.analysis.replay.rows import (
    CHUNK_ROWS,
    INT64_MAX,
    KEY_KINDS,
    Chunk,
    Columns,
    check_reward,
    check_step,
    json_key,
    key_kind,
    make_chunk,
)
from ebpo.utils.checks import short_repr
from ebpo.utils.structured_input import unique_keys

__all__ = [
    "CHUNK_ROWS",
    "FORMATS",
    "INT64_MAX",
    "Chunk",
    "Columns",
    "InputFile",
    "json_key",
    "input_file",
    "python_json_chunks",
]

#: bytes per block of pyarrow's JSON reader; a line longer than a block is retried with more
JSON_BLOCK_BYTES = 16 << 20
MAX_JSON_BLOCK_BYTES = 1 << 30
#: file suffix (lower case) -> format
FORMATS = {".jsonl": "jsonl", ".csv": "csv", ".parquet": "parquet"}


# ------------------------------------------------------------------------------ files
class InputFile:
    """One input file of a known format (:data:`FORMATS`)."""

    def __init__(self, path: Path, fmt: str) -> None:
        self.path = path
        self.format = fmt

    def where(self, row: int) -> str:
        """``"path: line N"`` of row ``row`` (0-based; blank lines are not rows), or
        ``"path: row N"`` (1-based) for Parquet."""
        if self.format == "parquet":
            return f"{self.path}: row {row + 1}"
        if self.format == "csv":
            for index, line, _ in _csv_rows(self.path):
                if index == row:
                    return f"{self.path}: line {line}"
        else:
            for index, (line, _) in enumerate(_json_lines(self.path)):
                if index == row:
                    return f"{self.path}: line {line}"
        return f"{self.path}: row {row + 1}"

    def first_row(self, names: tuple[str, ...]) -> dict[str, Any]:
        """The first row's values of the columns ``names`` that it has (JSON lines: every field
        of the first object). ValueError for a file without rows or a first row that is not
        readable."""
        if self.format == "parquet":
            batch = next(_parquet_batches(self.path, names, 1), None)
            return {} if batch is None else {k: v[0] for k, v in batch.to_pydict().items()}
        if self.format == "csv":
            for _, _, row in _csv_rows(self.path):
                return {k: v for k, v in row.items() if k in names}
        else:
            for line, text in _json_lines(self.path):
                return _json_object(text, f"{self.path}: line {line}")
        raise ValueError(f"{self.path}: holds no rows")

    def first_step(self, columns: Columns) -> int:
        """The step of the file's first row (checked like every step)."""
        row = self.first_row(columns.names())
        if columns.step not in row:
            what = "field" if self.format == "jsonl" else "column"
            raise ValueError(f"{self.where(0)}: no {columns.step!r} {what}")
        value = row[columns.step]
        if self.format == "csv":
            value = _csv_integer(value, columns.step, self.where(0))
        elif self.format == "parquet" and isinstance(value, float) and value.is_integer():
            value = int(value)  # a float column of integral steps (see the module doc)
        return check_step(value, columns.step, self.where(0))

    def chunks(self, columns: Columns, *, kind: str = "") -> Iterator[Chunk]:
        """The file's rows in :class:`Chunk` s (see the module doc). ``kind`` (JSON lines only):
        ``"string"`` requires every key to be a string (verl's uid and prompt)."""
        if self.format == "parquet":
            return _parquet_chunks(self.path, columns)
        if self.format == "csv":
            return _csv_chunks(self.path, columns)
        return _json_chunks(self, columns, kind)


def input_file(path: Path) -> InputFile:
    """The :class:`InputFile` of ``path`` by its suffix; ValueError for another suffix."""
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(
            f"{str(path)!r} is not a table this command reads: expected a file ending in "
            f"{', '.join(FORMATS)}"
        )
    return InputFile(path, fmt)


# ------------------------------------------------------------------------------ JSON lines
def _json_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of every non-blank line, decoded as UTF-8 (ValueError naming the
    line otherwise). Lines end at ``\\n`` only, as in JSON lines."""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(
                    f"{path}: line {number}: not UTF-8 text ({error.reason} at byte {error.start})"
                ) from None


def _json_object(text: str, where: str) -> dict[str, Any]:
    try:
        value = json.loads(text, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{where}: not valid JSON ({error.msg} at column {error.colno}); expected one JSON "
            "object per line (JSON lines)"
        ) from None
    except (ValueError, RecursionError) as error:  # a duplicate field; digits beyond the limit
        raise ValueError(f"{where}: cannot be read ({error or 'nested too deeply'})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{where}: a JSON {type(value).__name__}, expected an object per line")
    return value


def python_json_chunks(path: Path, columns: Columns, expected_kind: str = "") -> Iterator[Chunk]:
    """The rows of a JSON-lines file read with Python's ``json`` line by line: the reference
    implementation of the rules (module doc), and the reader that names the line pyarrow refused.
    ``expected_kind``: the kind of key (:func:`key_kind`) required; empty: the first key's."""
    keys: list[Any] = []
    rewards: list[float] = []
    steps: list[int] = []
    start = 0
    for row, (line, text) in enumerate(_json_lines(path), start=1):
        where = f"{path}: line {line}"
        record = _json_object(text, where)
        for name in columns.names():
            if name not in record:
                raise ValueError(f"{where}: no {name!r} field (fields: {sorted(record)[:8]})")
        key = record[columns.key]
        if key is None:
            raise ValueError(f"{where}: {columns.key!r} is null")
        kind = key_kind(key)
        expected = expected_kind or kind
        if kind != expected:
            raise ValueError(
                f"{where}: {columns.key!r} is {KEY_KINDS[kind]} ({short_repr(key)}), expected "
                f"{KEY_KINDS[expected]} as in the file's first row"
            )
        expected_kind = expected
        if kind == "integer" and not -INT64_MAX - 1 <= key <= INT64_MAX:
            raise ValueError(f"{where}: {columns.key!r} does not fit 64 bits: {short_repr(key)}")
        keys.append(json_key(key) if kind == "json" else key)
        rewards.append(check_reward(record[columns.reward], columns.reward, where))
        steps.append(check_step(record[columns.step], columns.step, where))
        if len(keys) == CHUNK_ROWS:
            yield make_chunk(keys, rewards, steps, start)
            keys, rewards, steps, start = [], [], [], row
    if keys:
        yield make_chunk(keys, rewards, steps, start)


def _json_chunks(file: InputFile, columns: Columns, kind: str) -> Iterator[Chunk]:
    import pyarrow as pa  # optional heavy dependency (ebpo[data])
    import pyarrow.json as pj  # optional heavy dependency (ebpo[data])

    if not kind:
        kind = key_kind(file.first_row(columns.names()).get(columns.key))
    if kind == "json":  # nested keys have no fixed Arrow type: Python reads them
        yield from python_json_chunks(file.path, columns, kind)
        return
    key_type = pa.string() if kind == "string" else pa.int64()
    schema = pa.schema(
        [(columns.key, key_type), (columns.reward, pa.float64()), (columns.step, pa.int64())]
    )
    block = JSON_BLOCK_BYTES
    start = 0  # rows yielded so far
    while True:
        try:
            reader = pj.open_json(
                file.path,
                read_options=pj.ReadOptions(block_size=block, use_threads=True),
                parse_options=pj.ParseOptions(
                    explicit_schema=schema, unexpected_field_behavior="ignore"
                ),
            )
            for batch in reader:
                if batch.num_rows:
                    yield _checked_chunk(file, columns, batch, start)
                start += batch.num_rows
            return
        except pa.ArrowInvalid as error:
            if "straddl" in str(error):  # a line longer than a block
                if start == 0 and block < MAX_JSON_BLOCK_BYTES:
                    block *= 8  # nothing yielded yet: read bigger blocks
                    continue
                yield from _rows_from(python_json_chunks(file.path, columns, kind), start)
                return
            if "Empty JSON file" in str(error):
                raise ValueError(f"{file.path}: holds no rows") from None
            # pyarrow's messages name no line: read the file again with Python to find it
            for _ in python_json_chunks(file.path, columns, kind):
                pass
            raise ValueError(f"{file.path}: cannot be read as JSON lines ({error})") from None


def _rows_from(chunks: Iterator[Chunk], start: int) -> Iterator[Chunk]:
    """The rows of ``chunks`` from row ``start`` on."""
    for chunk in chunks:
        end = chunk.start + len(chunk.steps)
        if end <= start:
            continue
        skip = max(start - chunk.start, 0)
        yield Chunk(
            chunk.keys.slice(skip), chunk.rewards[skip:], chunk.steps[skip:], chunk.start + skip
        )


def _checked_chunk(file: InputFile, columns: Columns, batch: Any, start: int) -> Chunk:
    """A chunk of pyarrow's columns after the checks pyarrow does not make (nulls: a missing or
    null field; non-finite rewards), each naming the row's line."""
    arrays = dict(zip(batch.schema.names, batch.columns, strict=True))
    for name in columns.names():
        column = arrays[name]
        if column.null_count:
            row = _first_true(column.is_null())
            raise ValueError(f"{file.where(start + row)}: no {name!r} field, or it is null")
    rewards = arrays[columns.reward].to_numpy()
    _check_finite(rewards, columns.reward, lambda row: file.where(start + row))
    steps = arrays[columns.step].to_numpy()
    return Chunk(arrays[columns.key], rewards, steps, start)


def _first_true(mask: Any) -> int:
    values = np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)
    return int(np.flatnonzero(values)[0])


def _check_finite(values: np.ndarray, name: str, where: Any) -> None:
    bad = ~np.isfinite(values)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        check_reward(float(values[row]), name, where(row))


# ------------------------------------------------------------------------------ CSV
def _csv_rows(path: Path) -> Iterator[tuple[int, int, dict[str, str]]]:
    """``(row index, line, row)`` of a CSV file with a header line; ``line`` is the line the row
    ends on (its only line unless a quoted value holds a line break). A UTF-8 byte-order mark is
    skipped; a header naming a column twice is refused (JSON lines refuses a repeated field)."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            reader = csv.DictReader(handle)
            _check_header(path, reader.fieldnames)
            for index, row in enumerate(reader):
                if None in row:
                    raise ValueError(
                        f"{path}: line {reader.line_num}: more values than the header has columns"
                    )
                yield index, reader.line_num, row
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text ({error.reason})") from None
    except csv.Error as error:
        raise ValueError(f"{path}: not a readable CSV file ({error})") from None


def _check_header(path: Path, names: Any) -> None:
    """A header whose columns are all different (a second column of one name would silently
    replace the first one's values)."""
    seen: set[str] = set()
    for name in names or ():
        if name in seen:
            raise ValueError(
                f"{path}: line 1: column {name!r} appears twice in the header; rename or drop one"
            )
        seen.add(name)


def _csv_chunks(path: Path, columns: Columns) -> Iterator[Chunk]:
    keys: list[str] = []
    rewards: list[float] = []
    steps: list[int] = []
    start = 0
    for index, line, row in _csv_rows(path):
        where = f"{path}: line {line}"
        for name in columns.names():
            if name not in row:
                raise ValueError(f"{path}: no column {name!r} (columns: {sorted(row)[:12]})")
            if row[name] in (None, ""):
                raise ValueError(f"{where}: no {name!r} value")
        keys.append(row[columns.key])
        reward = _csv_number(row[columns.reward], columns.reward, where)
        rewards.append(check_reward(reward, columns.reward, where))
        step = _csv_integer(row[columns.step], columns.step, where)
        steps.append(check_step(step, columns.step, where))
        if len(keys) == CHUNK_ROWS:
            yield make_chunk(keys, rewards, steps, start)
            keys, rewards, steps, start = [], [], [], index + 1
    if keys:
        yield make_chunk(keys, rewards, steps, start)


#: what a CSV cell may hold for a number: plain ASCII decimal, as a JSON number (an optional
#: sign, digits, a fraction, an exponent), or a spelling of NaN / infinity, which
#: :func:`check_reward` then names; Python's ``float`` and ``int`` would also take ``1_000``,
#: other scripts' digits (``"\u0663"``) and surrounding white space of any kind
CSV_NUMBER = re.compile(
    r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:nan|inf|infinity)",
    re.ASCII | re.IGNORECASE,
)
CSV_INTEGER = re.compile(r"[+-]?\d+", re.ASCII)


def _csv_number(text: str, name: str, where: str) -> float:
    """The cell as a float if it is a plain decimal number (:data:`CSV_NUMBER`; NaN and infinity
    go on to :func:`check_reward`, which names them); ValueError otherwise."""
    if not CSV_NUMBER.fullmatch(text):
        raise ValueError(
            f"{where}: {name!r} is not a number in plain decimal digits: {short_repr(text)}"
        )
    return float(text)


def _csv_integer(text: str, name: str, where: str) -> int:
    """The cell as an int if it is ASCII decimal digits with an optional sign (checked by
    :func:`check_step`); ValueError otherwise."""
    # a bound on the digits, for Python's int() refuses more than 4,300 (a ValueError)
    if not CSV_INTEGER.fullmatch(text) or len(text) > 40:
        raise ValueError(
            f"{where}: {name!r} must be an integer step in plain decimal digits, got {short_repr(text)}"
        )
    return int(text)


# ------------------------------------------------------------------------------ Parquet
def _parquet_batches(path: Path, names: tuple[str, ...], rows: int) -> Iterator[Any]:
    import pyarrow as pa  # optional heavy dependency (ebpo[data])
    import pyarrow.parquet as pq  # optional heavy dependency (ebpo[data])

    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as error:
        raise ValueError(f"{path}: not a readable Parquet file ({error})") from None
    present = set(parquet.schema_arrow.names)
    for name in names:
        if name not in present:
            raise ValueError(f"{path}: no column {name!r} (columns: {sorted(present)[:12]})")
    try:
        yield from parquet.iter_batches(batch_size=rows, columns=list(names))
    except (pa.ArrowException, OSError) as error:
        raise ValueError(f"{path}: not a readable Parquet file ({error})") from None


def _parquet_chunks(path: Path, columns: Columns) -> Iterator[Chunk]:
    import pyarrow as pa  # optional heavy dependency (ebpo[data])

    start = 0
    for batch in _parquet_batches(path, columns.names(), CHUNK_ROWS):
        arrays = dict(zip(batch.schema.names, batch.columns, strict=True))

        def where(row: int, start: int = start) -> str:
            return f"{path}: row {start + row + 1}"

        for name in columns.names():
            if arrays[name].null_count:
                row = _first_true(arrays[name].is_null())
                raise ValueError(f"{where(row)}: {name!r} is null")
        reward, step = arrays[columns.reward], arrays[columns.step]
        if not (pa.types.is_integer(reward.type) or pa.types.is_floating(reward.type)):
            raise ValueError(f"{path}: column {columns.reward!r} holds {reward.type}, not numbers")
        rewards = reward.to_numpy(zero_copy_only=False).astype(np.float64)
        _check_finite(rewards, columns.reward, where)
        if pa.types.is_integer(step.type):
            values = step.to_numpy(zero_copy_only=False)
            if values.dtype == np.uint64 and (values > INT64_MAX).any():  # would wrap to < 0
                row = int(np.flatnonzero(values > INT64_MAX)[0])
                check_step(int(values[row]), columns.step, where(row))
            steps = values.astype(np.int64)
        elif pa.types.is_floating(step.type):
            values = step.to_numpy(zero_copy_only=False)
            bad = ~np.isfinite(values) | (values != np.round(values))
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                check_step(float(values[row]), columns.step, where(row))
            steps = values.astype(np.int64)
        else:
            raise ValueError(f"{path}: column {columns.step!r} holds {step.type}, not integers")
        keys = arrays[columns.key]
        if not (pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type)) and not (
            pa.types.is_integer(keys.type)
        ):
            keys = pa.array([json_key(value) for value in keys.to_pylist()], pa.string())
        yield Chunk(keys, rewards, steps, start)
        start += batch.num_rows
