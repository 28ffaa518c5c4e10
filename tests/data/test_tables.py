"""ebpo.data.tables: the rows and frame views of JSON lines, JSON and Parquet files, and their
atomic writers."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from ebpo.data.tables import (
    FileRows,
    check_write_suffix,
    read_file_rows,
    read_parquet_table,
    read_rows,
    read_table,
    write_rows,
    write_table,
)
from tests.data.conftest import fixture


def test_rows_and_frame_views_read_the_same_parquet_file():
    path = fixture("olympiadbench")  # nested list column (final_answer)
    rows = read_rows(path)
    frame = read_table(path)
    assert len(rows) == len(frame) and list(frame.columns) == list(rows[0])
    assert [list(v) for v in frame["final_answer"]] == [r["final_answer"] for r in rows]
    # the frame view is what pandas itself reads, dtypes included
    pd.testing.assert_frame_equal(frame, pd.read_parquet(path))


def test_frame_view_keeps_pandas_attrs_and_limits_rows(tmp_path):
    frame = pd.DataFrame({"prompt": ["a", "b", "c"], "answer": ["1", "2", "3"]})
    frame.attrs = {"origin": "test"}
    frame.to_parquet(tmp_path / "t.parquet")
    back = read_table(tmp_path / "t.parquet", limit=2)
    assert back.attrs == {"origin": "test"} and back["prompt"].tolist() == ["a", "b"]
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in frame.to_dict(orient="records")))
    assert read_table(jsonl)["answer"].tolist() == ["1", "2", "3"]
    with pytest.raises(ValueError, match="limit must be a positive number of rows, got 0"):
        read_table(jsonl, limit=0)


def test_read_table_errors_name_the_input_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"input file '[^']*none\.jsonl' does not exist"):
        read_table(tmp_path / "none.jsonl")
    (tmp_path / "bad.parquet").write_text("PAR1 but not really")
    with pytest.raises(
        ValueError, match=r"input file '[^']*bad\.parquet' is not a readable Parquet file"
    ):
        read_table(tmp_path / "bad.parquet")
    (tmp_path / "dir.parquet").mkdir()
    with pytest.raises(ValueError, match=r"input file '[^']*dir\.parquet' is not a regular file"):
        read_table(tmp_path / "dir.parquet")
    pd.DataFrame({"prompt": pd.Series([], dtype=str)}).to_parquet(tmp_path / "empty.parquet")
    with pytest.raises(ValueError, match=r"input file '[^']*empty\.parquet' has no rows"):
        read_table(tmp_path / "empty.parquet")
    (tmp_path / "bad.jsonl").write_text('{"prompt": "a"}\n{oops\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl: line 2: not valid JSON"):
        read_table(tmp_path / "bad.jsonl")
    with pytest.raises(ValueError, match="must end in one of"):
        read_table(tmp_path / "x.csv")


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        (
            "a.jsonl",
            '{"p": 1}\n{"p": 1, "q": 2, "p": 3}\n',
            r"a\.jsonl: line 2: key 'p' appears twice",
        ),
        ("b.json", '[{"p": {"x": 1, "x": 1}}]', r"b\.json: key 'x' appears twice in one object$"),
        ("c.json", '{"p": 1}\n{"q": 1, "q": 1}\n', r"c\.json: line 2: key 'q' appears twice"),
    ],
)
def test_a_key_twice_in_one_row_is_refused(tmp_path, name, text, message):
    """Issue 46 item 9: the last value won; every other JSON reader refuses it (structured_input)."""
    (tmp_path / name).write_text(text)
    with pytest.raises(ValueError, match=message):
        read_rows(tmp_path / name)


def test_one_parquet_reader_names_the_file_as_asked(tmp_path):
    path = tmp_path / "x.parquet"
    path.write_text("not parquet")
    with pytest.raises(
        ValueError, match=r"^data file '[^']*x\.parquet' is not a readable Parquet file"
    ):
        read_parquet_table(path)
    with pytest.raises(
        ValueError, match=r"^input file '[^']*x\.parquet' is not a readable Parquet file"
    ):
        read_parquet_table(path, what="input file")
    with pytest.raises(
        ValueError, match=r"data file '[^']*x\.parquet' is not a readable Parquet file"
    ):
        read_rows(path)


def test_file_rows_say_where_each_row_came_from(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2}\n')
    found = read_file_rows(path)
    assert found.rows == [{"a": 1}, {"a": 2}] and found.lines == [1, 3]
    assert found.where(1) == f"{path}: line 3"
    assert FileRows(path, [{"a": 1}]).where(0) == f"{path}: row 0"
    with pytest.raises(ValueError, match="must end in"):
        read_rows(tmp_path / "x.csv")


def test_write_table_jsonl_turns_nan_and_numpy_values_into_json(tmp_path):
    frame = pd.DataFrame(
        {
            "v": [1.5, math.nan],
            "arr": [np.array([1, 2]), np.array([3])],
            "n": [np.int64(4), np.int64(5)],
        }
    )
    write_table(frame, tmp_path / "out.jsonl")
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert lines == [{"v": 1.5, "arr": [1, 2], "n": 4}, {"v": None, "arr": [3], "n": 5}]
    write_table(frame[["v", "n"]], tmp_path / "out.parquet")
    back = read_table(tmp_path / "out.parquet")
    assert back["n"].tolist() == [4, 5] and math.isnan(back["v"][1])


def test_write_table_names_the_unwritable_row_and_keeps_the_old_file(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text("precious\n")
    frame = pd.DataFrame({"d": [1.0, -math.inf, 2.0]}, index=[7, 8, 9])
    with pytest.raises(
        ValueError,
        match=r"input row 8 \(counting from 0\), column 'd': -inf cannot be stored in JSON",
    ):
        write_table(frame, out)
    assert out.read_text() == "precious\n"
    mixed = pd.DataFrame({"v": [1, "s"]})
    with pytest.raises(ValueError, match="cannot store these rows as Parquet"):
        write_table(mixed, tmp_path / "out.parquet")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]


def test_write_suffixes(tmp_path):
    assert check_write_suffix("a/b.JSONL") == ".jsonl"
    assert check_write_suffix(tmp_path / "b.parquet", "--output") == ".parquet"
    with pytest.raises(
        ValueError, match=r"^--output must end in \.jsonl or \.parquet; got 'x\.csv'$"
    ):
        check_write_suffix("x.csv", "--output")
    with pytest.raises(ValueError, match=r"^path must end in \.jsonl or \.parquet"):
        write_rows([{"a": 1}], tmp_path / "x.json")
    with pytest.raises(ValueError, match=r"^destination must end in \.jsonl or \.parquet"):
        write_table(pd.DataFrame({"a": [1]}), tmp_path / "x.csv")
    assert not list(tmp_path.iterdir())


def test_write_rows_is_atomic(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text("precious\n")
    with pytest.raises(TypeError):
        write_rows([{"prompt": "a", "answer": "1"}, {"prompt": object(), "answer": "2"}], path)
    assert path.read_text() == "precious\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]


def test_json_lines_end_at_newlines_only(tmp_path):
    """str.splitlines() cut a line at a U+2028, U+0085 or \\x1c inside a string (valid JSON, and
    what json.dumps(ensure_ascii=False) writes): "Unterminated string"."""
    rows = [{"prompt": "a\u2028b\u0085c\x1cd\u2029", "answer": "1"}, {"prompt": "x", "answer": "2"}]
    path = tmp_path / "r.jsonl"
    path.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\r\n" for r in rows), encoding="utf-8"
    )
    found = read_file_rows(path)
    assert found.rows == rows and found.lines == [1, 2]


@pytest.mark.parametrize(
    ("name", "text", "match"),
    [
        (
            "deep.jsonl",
            '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}\n",
            r"line 1: cannot be read \(nested too deeply\)",
        ),
        (
            "deep.json",
            '[{"a": ' + "[" * 100_000 + "]" * 100_000 + "}]",
            r"deep\.json: cannot be read \(nested too deeply\)",
        ),
        (
            "digits.jsonl",
            '{"a": 1}\n{"a": ' + "1" * 5000 + "}\n",
            r"line 2: cannot be read \(Exceeds the limit \(4300 digits\)",
        ),
    ],
)
def test_unreadable_json_names_the_file_and_line(tmp_path, name, text, match):
    """A RecursionError (a traceback) and Python's integer digit limit (no file named)."""
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        read_rows(path)
