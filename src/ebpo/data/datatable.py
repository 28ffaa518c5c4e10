"""A data file's rows kept as stored, for the commands that edit it: ``ebpo data order`` reorders
the rows, ``ebpo data label`` adds columns, and every value the user wrote comes out as it went in.

* JSON lines and JSON arrays stay the objects ``json`` parsed: integers of any size stay exact
  (``9007199254740993``, ``12345678901234567891``), ``1`` stays ``1`` next to a ``null``, strings
  that look like numbers stay strings, nested values, booleans and unicode stay as they were;
* Parquet stays its Arrow table: rows reordered with ``take``, columns appended, every column
  keeps its Arrow type (an ``int64`` column with nulls stays one) and the schema's metadata.

No pandas frame in between: a frame turns an integer column with one null into floats and
writes ``9007199254740993`` as ``9007199254740992.0``.

Between the two formats: Parquet to JSON lines writes Arrow's Python values; JSON to Parquet
types each column by Arrow's inference and refuses, in one line, a column that has no Parquet
type (mixed numbers and strings, an integer beyond 64 bits). JSON has no NaN or infinity: a row
holding one (Python's ``json`` reads ``NaN`` and ``-Infinity``) is refused, naming the row and the
column, rather than written as ``null`` (another value) or as ``NaN`` (which other readers reject);
Parquet keeps them.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ebpo.data.tables import (
    check_write_suffix,
    json_line,
    local_input_path,
    read_file_rows,
    read_parquet_table,
)
from ebpo.utils.files import atomic_path, atomic_write

__all__ = ["DataTable"]


class DataTable:
    """The rows of a data file as stored (see the module doc): JSON rows or an Arrow table.

    Reads like the datasets :func:`ebpo.curriculum.dataset_column` knows: ``column_names``,
    ``table[name]`` (a column as Python values; ``None`` where a JSON row lacks the key) and
    ``len(table)``.
    """

    def __init__(
        self,
        *,
        rows: list[dict[str, Any]] | None = None,
        arrow: Any = None,
        origin: list[int] | None = None,
    ) -> None:
        if (rows is None) == (arrow is None):
            raise ValueError("DataTable needs rows= or arrow= (exactly one)")
        self._rows = rows
        self._arrow = arrow
        n = len(rows) if rows is not None else arrow.num_rows
        self._origin = list(range(n)) if origin is None else origin

    # ------------------------------------------------------------------------------ reading
    @classmethod
    def read(cls, source: str | os.PathLike[str], *, limit: int | None = None) -> DataTable:
        """The rows of a local ``.jsonl`` / ``.json`` / ``.parquet`` file (the first ``limit``).

        Raises ValueError naming the file: missing, not a regular file, empty, a line that is not
        a JSON object (with its line number), not Parquet."""
        path = local_input_path(source, limit)
        suffix = path.suffix.lower()
        if suffix != ".parquet":
            return cls.from_rows(read_file_rows(path).rows[:limit])
        if not path.is_file():
            raise ValueError(f"input file {str(path)!r} is not a regular file")
        table = read_parquet_table(path, what="input file")
        if table.num_rows == 0:
            raise ValueError(f"input file {str(path)!r} has no rows")
        return cls(arrow=table.slice(0, limit) if limit else table)

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping[str, Any]]) -> DataTable:
        """A table of rows (dicts), e.g. those :func:`ebpo.data.load_dataset` returns."""
        return cls(rows=[dict(row) for row in rows])

    def __len__(self) -> int:
        return len(self._origin)

    @property
    def column_names(self) -> list[str]:
        """Every column, in the order first seen (a JSON row may lack some)."""
        if self._arrow is not None:
            return list(self._arrow.column_names)
        assert self._rows is not None
        return list(dict.fromkeys(key for row in self._rows for key in row))

    def __getitem__(self, name: str) -> list:
        if self._arrow is not None:
            return self._arrow.column(name).to_pylist()
        assert self._rows is not None
        if not any(name in row for row in self._rows):
            raise KeyError(name)
        return [row.get(name) for row in self._rows]

    def records(self) -> list[dict[str, Any]]:
        """Every row as a fresh dict (a copy: a function given the rows cannot change them)."""
        if self._arrow is not None:
            return self._arrow.to_pylist()
        try:
            return copy.deepcopy(self._rows) or []
        except RecursionError:  # deeply nested JSON (deepcopy takes two frames a level; json one)
            return json.loads(json.dumps(self._rows))

    # ------------------------------------------------------------------------------ editing
    def take(self, indices: Sequence[int]) -> DataTable:
        """The rows in the order of ``indices`` (a permutation, or any selection)."""
        origin = [self._origin[i] for i in indices]
        if self._arrow is not None:
            import pyarrow as pa  # optional heavy dependency (ebpo[data])

            return DataTable(arrow=self._arrow.take(pa.array(indices, pa.int64())), origin=origin)
        assert self._rows is not None
        return DataTable(rows=[dict(self._rows[i]) for i in indices], origin=origin)

    def set_column(self, name: str, values: Sequence[Any]) -> None:
        """Add column ``name`` (one value per row), or replace the column of that name. A
        replaced Parquet column that comes out equal keeps its Arrow type; a changed one keeps it
        when the new values fit. Every other column stays as it was."""
        values = [_plain(v) for v in values]
        if len(values) != len(self):
            raise ValueError(
                f"column {name!r} needs one value per row ({len(self)}), got {len(values)}"
            )
        if self._rows is not None:
            for row, value in zip(self._rows, values, strict=True):
                row[name] = value
            return
        import pyarrow as pa  # optional heavy dependency (ebpo[data])

        names = self._arrow.column_names
        if name not in names:
            self._arrow = self._arrow.append_column(name, _arrow_array(name, values))
            return
        old = self._arrow.column(name)
        if old.to_pylist() == values:
            return
        try:
            array = pa.array(values, type=old.type)
        except (pa.ArrowException, OverflowError, TypeError, ValueError):
            array = _arrow_array(name, values)
        self._arrow = self._arrow.set_column(names.index(name), name, array)

    # ------------------------------------------------------------------------------ writing
    def write(self, destination: str | os.PathLike[str]) -> Path:
        """Write the rows as ``.jsonl`` (one object per line, UTF-8) or ``.parquet``, by suffix,
        atomically (:mod:`ebpo.utils.files`). Every row is converted before the file is opened:
        a row that cannot be stored raises ValueError naming it by its position in the input,
        and ``destination`` stays as it was."""
        path = Path(destination).expanduser()
        if check_write_suffix(destination, "destination") == ".jsonl":
            rows = self._arrow.to_pylist() if self._arrow is not None else self._rows
            assert rows is not None
            lines = [json_line(row, at) for row, at in zip(rows, self._origin, strict=True)]
            with atomic_write(path) as handle:
                handle.writelines(lines)
            return path
        import pyarrow as pa  # optional heavy dependency (ebpo[data])
        import pyarrow.parquet as pq  # optional heavy dependency (ebpo[data])

        table = self._arrow if self._arrow is not None else self._rows_to_arrow()
        try:
            with atomic_path(path) as tmp:
                pq.write_table(table, tmp)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as error:
            raise ValueError(
                f"cannot store these rows as Parquet ({error}); write .jsonl instead"
            ) from None
        return path

    def _rows_to_arrow(self) -> Any:
        import pyarrow as pa  # optional heavy dependency (ebpo[data])

        assert self._rows is not None
        names = self.column_names
        return pa.table({n: _arrow_array(n, [row.get(n) for row in self._rows]) for n in names})


def _arrow_array(name: str, values: list) -> Any:
    import pyarrow as pa  # optional heavy dependency (ebpo[data])

    try:
        return pa.array(values)
    except (pa.ArrowException, OverflowError, TypeError, ValueError) as error:
        raise ValueError(
            f"cannot store these rows as Parquet (column {name!r}: {error}); write .jsonl instead"
        ) from None


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python number it holds (labels computed with numpy)."""
    return value.item() if isinstance(value, np.generic) else value
