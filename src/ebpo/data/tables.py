"""Data files: JSON lines, JSON and Parquet tables read and written with errors that name the file.

Two views of the same files:

* rows — ``list[dict]`` (:func:`read_rows`, :func:`write_rows`), what :func:`ebpo.data.load_dataset`
  normalises; nested columns (message lists, structs) come back as lists and dicts;
* frames — a pandas ``DataFrame`` with every column kept as stored (:func:`read_table`,
  :func:`write_table`). A frame converts values (an integer column with a null becomes float):
  ``ebpo data label`` / ``ebpo data order`` edit files through :mod:`ebpo.data.datatable`
  instead, which keeps every value as it was read.

Both read Parquet through one reader (:func:`read_parquet_table`) and JSON through one parser
(:func:`read_file_rows`). Every writer is atomic (:mod:`ebpo.utils.files`): an error leaves the
previous file, if any, as it was.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ebpo.utils.checks import short_repr
from ebpo.utils.files import atomic_path, atomic_write
from ebpo.utils.structured_input import RepeatedKeyError, unique_keys

__all__ = [
    "READ_SUFFIXES",
    "WRITE_SUFFIXES",
    "FileRows",
    "check_write_suffix",
    "read_file_rows",
    "read_parquet_table",
    "read_rows",
    "json_line",
    "local_input_path",
    "read_table",
    "write_rows",
    "write_table",
]

#: Suffixes of the files the readers accept (lower case; ``.JSONL`` is read too).
READ_SUFFIXES = (".jsonl", ".json", ".parquet")
#: Suffixes of the files the writers write.
WRITE_SUFFIXES = (".jsonl", ".parquet")


# ------------------------------------------------------------------------------------- rows
@dataclass(frozen=True)
class FileRows:
    """Rows of a local file and where each came from, for error messages."""

    path: Path
    rows: list[dict[str, Any]]
    lines: list[int] | None = None  # 1-based line of each row of a JSON-lines file

    def where(self, index: int) -> str:
        """``"<path>: line <n>"`` for JSON lines, ``"<path>: row <index>"`` otherwise."""
        if self.lines is not None:
            return f"{self.path}: line {self.lines[index]}"
        return f"{self.path}: row {index}"


def read_rows(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Raw rows of a local ``.jsonl``/``.json``/``.parquet`` file (nested columns such as message
    lists and structs come back as lists and dicts).

    ``.jsonl``: one JSON object per line (blank lines skipped); ``.json``: a JSON array of objects,
    or JSON lines. Raises ValueError naming the file and the line (or row) for a missing file, an
    empty file, a line that is not JSON, a row that is not an object, a key given twice in one
    object (as :mod:`ebpo.utils.structured_input`), or a file that is not Parquet.
    """
    return read_file_rows(path).rows


def read_file_rows(path: str | os.PathLike[str]) -> FileRows:
    """:func:`read_rows` with the line (or row) each row came from, for error messages."""
    path = Path(path).expanduser()
    suffix = path.suffix.lower()
    if suffix not in READ_SUFFIXES:
        raise ValueError(f"data file must end in one of {READ_SUFFIXES}, got {str(path)!r}")
    if path.is_dir():
        raise ValueError(f"data file {str(path)!r} is a directory, expected a {suffix} file")
    if not path.exists():
        raise ValueError(f"data file {str(path)!r} does not exist")
    if not path.is_file():
        raise ValueError(f"data file {str(path)!r} is not a regular file (a device or a pipe?)")
    parquet = suffix == ".parquet"
    found = (
        FileRows(path, read_parquet_table(path).to_pylist()) if parquet else _read_json_rows(path)
    )
    if not found.rows:
        raise ValueError(f"data file {str(path)!r} is empty: it holds no rows")
    return found


def read_parquet_table(path: Path, *, what: str = "data file") -> Any:
    """The ``pyarrow.Table`` of a Parquet file, the one Parquet reader of both views.

    A file pyarrow cannot read raises ValueError ``"<what> '<path>' is not a readable Parquet
    file: <reason>"``."""
    import pyarrow as pa  # optional heavy dependency (ebpo[data])
    import pyarrow.parquet as pq  # optional heavy dependency (ebpo[data])

    try:
        return pq.read_table(path)
    except (pa.ArrowException, OSError) as error:
        raise ValueError(f"{what} {str(path)!r} is not a readable Parquet file: {error}") from None


def _read_json_rows(path: Path) -> FileRows:
    try:
        text = path.read_text(encoding="utf-8-sig")  # -sig: tolerate a byte-order mark
    except UnicodeDecodeError as error:
        raise ValueError(
            f"data file {str(path)!r} is not UTF-8 text ({error.reason} at byte {error.start})"
        ) from None
    if path.suffix.lower() == ".json" and text.lstrip().startswith("["):  # a JSON array of objects
        try:
            items = json.loads(text, object_pairs_hook=unique_keys)
        except RepeatedKeyError as error:  # as every JSON reader of ebpo (structured_input)
            raise ValueError(f"{path}: {error}") from None
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: line {error.lineno}: not valid JSON ({error.msg})") from None
        except ValueError as error:  # an integer beyond Python's digit limit (4300 by default)
            raise ValueError(f"{path}: cannot be read ({error})") from None
        except RecursionError:
            raise ValueError(f"{path}: cannot be read (nested too deeply)") from None
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise ValueError(
                    f"{path}: item {i} of the array is a JSON {_json_kind(item)}, "
                    "expected an object (one per row)"
                )
        return FileRows(path, items)
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    # Lines end at "\n" only (JSON lines): str.splitlines() would also cut a line at a U+2028,
    # U+0085 or \x1c-\x1e inside a string, which JSON allows unescaped.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line, object_pairs_hook=unique_keys)
        except RepeatedKeyError as error:  # as every JSON reader of ebpo (structured_input)
            raise ValueError(f"{path}: line {number}: {error}") from None
        except json.JSONDecodeError as error:
            raise ValueError(
                f"{path}: line {number}: not valid JSON ({error.msg} at column {error.colno})"
            ) from None
        except ValueError as error:  # an integer beyond Python's digit limit (4300 by default)
            raise ValueError(f"{path}: line {number}: cannot be read ({error})") from None
        except RecursionError:
            raise ValueError(f"{path}: line {number}: cannot be read (nested too deeply)") from None
        if not isinstance(value, dict):
            raise ValueError(
                f"{path}: line {number} is a JSON {_json_kind(value)}, "
                "expected an object (one per line)"
            )
        rows.append(value)
        lines.append(number)
    return FileRows(path, rows, lines)


def _json_kind(value: Any) -> str:
    names = {
        list: "array",
        str: "string",
        bool: "boolean",
        int: "number",
        float: "number",
        type(None): "null",
    }
    return names.get(type(value), type(value).__name__)


def check_write_suffix(path: str | os.PathLike[str], argument: str = "path") -> str:
    """The lower-case suffix of ``path`` if it is one of :data:`WRITE_SUFFIXES`; otherwise a
    ValueError naming ``argument`` (e.g. ``--output``)."""
    suffix = Path(path).suffix.lower()
    if suffix not in WRITE_SUFFIXES:
        raise ValueError(f"{argument} must end in .jsonl or .parquet; got {str(path)!r}")
    return suffix


def write_rows(rows: Iterable[Mapping[str, Any]], path: str | os.PathLike[str]) -> Path:
    """Write rows to ``.jsonl`` (one JSON object per line, UTF-8) or ``.parquet``, atomically
    (:mod:`ebpo.utils.files`): an error leaves the previous file, if any, as it was."""
    path = Path(path)
    suffix = check_write_suffix(path)
    rows = list(rows)
    if suffix == ".jsonl":
        # Every line is built before the file is opened: an unwritable row fails first.
        text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        with atomic_write(path) as handle:
            handle.write(text)
    else:
        import datasets  # optional heavy dependency (ebpo[data])

        table = datasets.Dataset.from_list(rows)
        with atomic_path(path) as tmp:
            table.to_parquet(str(tmp))
    return path


# ----------------------------------------------------------------------------------- frames


def local_input_path(
    source: str | os.PathLike[str],
    limit: int | None,
    *,
    missing: type[Exception] = ValueError,
) -> Path:
    """``source`` as a path, after the checks every local table reader makes: ``limit`` is None or
    >= 1, the suffix is one we read, the file exists (else ``missing`` naming it)."""
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be a positive number of rows, got {limit}")
    path = Path(source).expanduser()
    if path.suffix.lower() not in READ_SUFFIXES:
        raise ValueError(f"data file must end in one of {READ_SUFFIXES}, got {str(path)!r}")
    if not path.exists():
        raise missing(f"input file {str(path)!r} does not exist")
    return path


def read_table(source: str | os.PathLike[str], *, limit: int | None = None) -> Any:
    """A pandas DataFrame of a local .jsonl/.json/.parquet file, every column kept as stored
    (the first ``limit`` rows if given). A missing file raises FileNotFoundError; an empty input,
    a line that is not a JSON object or a file that is not Parquet raise ValueError naming the
    file."""
    import pandas as pd  # optional heavy dependency (ebpo[data])

    path = local_input_path(source, limit, missing=FileNotFoundError)
    suffix = path.suffix.lower()
    # JSON through the rows reader: its errors name the file and the line.
    frame = _read_parquet_frame(path) if suffix == ".parquet" else pd.DataFrame(read_rows(path))
    if len(frame) == 0:
        raise ValueError(f"input file {str(path)!r} has no rows")
    return frame.head(limit).reset_index(drop=True) if limit else frame


def _read_parquet_frame(path: Path) -> Any:
    """The frame view of :func:`read_parquet_table`: what ``pandas.read_parquet`` returns."""
    if not path.is_file():
        raise ValueError(f"input file {str(path)!r} is not a regular file")
    table = read_parquet_table(path, what="input file")
    frame = table.to_pandas()
    attrs = (table.schema.metadata or {}).get(b"PANDAS_ATTRS")
    if attrs:  # DataFrame.attrs that pandas stored with the file
        frame.attrs = json.loads(attrs)
    return frame


def write_table(frame: Any, destination: str | os.PathLike[str]) -> None:
    """Write a DataFrame as JSONL (one object per line; NaN -> null) or Parquet, by suffix.

    Every row is converted first, then the file is written through a temporary file in the same
    directory and renamed (:mod:`ebpo.utils.files`): a row that cannot be stored raises ValueError
    naming it (by the frame's index: its position in the input), and leaves ``destination`` as it
    was."""
    path = Path(destination).expanduser()
    suffix = check_write_suffix(destination, "destination")
    if suffix == ".parquet":
        try:
            with atomic_path(path) as tmp:
                frame.to_parquet(tmp, index=False)
        except (TypeError, ValueError) as error:  # pyarrow's ArrowTypeError / ArrowInvalid
            raise ValueError(
                f"cannot store these rows as Parquet ({error}); write .jsonl instead"
            ) from None
        return
    records = frame.to_dict(orient="records")
    lines = [
        json_line(record, row, convert=_clean)
        for row, record in zip(frame.index, records, strict=True)
    ]
    with atomic_write(path) as handle:
        handle.writelines(lines)


def json_line(
    record: Mapping[str, Any], at: Any, *, convert: Callable[[Any], Any] = lambda value: value
) -> str:
    """``record`` as one JSONL line (with its newline), after ``convert`` (e.g. NaN → None for a
    frame; the identity keeps a row as it was read). numpy values become the Python values they
    hold; a lone surrogate is written escaped. A value JSON cannot hold raises ValueError naming
    row ``at`` (counting from 0) and the column."""

    def default(value: Any) -> Any:
        if isinstance(value, np.ndarray):
            return convert(value.tolist())
        if isinstance(value, np.generic):
            return convert(value.item())
        raise TypeError(f"cannot write {type(value).__name__} to JSON")

    try:
        line = json.dumps(convert(record), ensure_ascii=False, allow_nan=False, default=default)
        if not line.isascii():
            try:
                line.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate ("\ud800" read from an escape): escape it
                line = json.dumps(convert(record), allow_nan=False, default=default)
        return line + "\n"
    except (TypeError, ValueError):
        for column, value in record.items():
            try:
                json.dumps(convert(value), allow_nan=False, default=default)
            except (TypeError, ValueError) as error:
                raise ValueError(
                    f"input row {at} (counting from 0), column {column!r}: {short_repr(value, 80)} cannot "
                    f"be stored in JSON ({error}); fix that row or write .parquet"
                ) from None
        raise


def _clean(value: Any) -> Any:
    """NaN -> None, through lists and dicts (JSON has no NaN)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    return value
