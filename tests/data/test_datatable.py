"""ebpo.data.datatable: rows reordered and extended without converting the user's values
(issue #21, item 3)."""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ebpo.curriculum import curriculum_order, dataset_column
from ebpo.data.datatable import DataTable

#: The values of the issue (an integer column with one null was written as floats), and every
#: kind of JSON value next to them. Compared by ``repr`` of what ``json.loads`` gives back, so
#: ``1`` and ``1.0`` differ.
ROWS = [
    {
        "id": 9007199254740993,
        "big": 12345678901234567891,
        "answer": 1,
        "neg": -9223372036854775809,
        "f": 0.1,
        "whole_float": 1.0,
        "tiny": 5e-324,
        "negzero": -0.0,
        "text": "1",
        "numberish": "007",
        "exp": "1e3",
        "flag": True,
        "nested": {"ids": [9007199254740993, None, 2.5], "deep": {"ok": False, "s": "00"}},
        "unicode": "héllo — 𝔼[R] ∑ 日本 \u200b",
        "empty": "",
        "list": [],
        "obj": {},
    },
    {
        "id": None,
        "big": None,
        "answer": None,
        "neg": 0,
        "f": None,
        "whole_float": 2.0,
        "tiny": 0.0,
        "negzero": 0.0,
        "text": "true",
        "numberish": "null",
        "exp": "NaN",
        "flag": False,
        "nested": None,
        "unicode": "",
        "empty": None,
        "list": [1, "1", 1.0, None, True],
        "obj": {"a": None},
    },
    {"id": 3, "answer": "x", "only_here": {"k": [1]}},  # a row with other keys
]


def _jsonl(rows) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def _parsed(path) -> str:
    return repr([json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()])


def test_jsonl_rows_come_out_value_for_value_reordered_and_labelled(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text(_jsonl(ROWS), encoding="utf-8")
    table = DataTable.read(source)
    assert table.column_names[:3] == ["id", "big", "answer"] and "only_here" in table.column_names
    assert table["id"] == [9007199254740993, None, 3] and table["only_here"] == [
        None,
        None,
        {"k": [1]},
    ]
    table.set_column("topic", ["b", "a", "c"])
    out = tmp_path / "out.jsonl"
    table.take([2, 0, 1]).write(out)
    expected = [dict(ROWS[i], topic=t) for i, t in ((2, "c"), (0, "b"), (1, "a"))]
    assert _parsed(out) == repr(expected)
    # byte for byte, apart from the added key: the same serialiser wrote the input
    lines = out.read_text(encoding="utf-8").splitlines()
    assert '"id": 9007199254740993, "big": 12345678901234567891, "answer": 1,' in lines[1]
    assert '"answer": null' in lines[2] and "9007199254740992.0" not in out.read_text()


def test_the_old_way_lost_the_values(tmp_path):
    """What the pandas frame did (the regression this module replaces)."""
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame([{"id": 9007199254740993, "answer": 1}, {"id": None, "answer": None}])
    assert frame["id"].tolist()[0] == 9007199254740992.0 and frame["answer"].tolist()[0] == 1.0


def test_a_column_set_on_json_rows_replaces_in_place_and_keeps_the_key_order(tmp_path):
    table = DataTable.from_rows([{"a": 1, "topic": 2, "b": 3}])
    table.set_column("topic", ["x"])
    assert table.records() == [{"a": 1, "topic": "x", "b": 3}]
    records = table.records()
    records[0]["a"] = "changed"  # records are copies
    assert table["a"] == [1]
    with pytest.raises(ValueError, match=r"column 'c' needs one value per row \(1\), got 2"):
        table.set_column("c", [1, 2])
    with pytest.raises(KeyError):
        table["nope"]


def _parquet(tmp_path):
    table = pa.table(
        {
            "id": pa.array([9007199254740993, None, 3], pa.int64()),
            "small": pa.array([1, None, 2], pa.int32()),
            "u64": pa.array([12345678901234567891, 0, None], pa.uint64()),
            "f": pa.array([0.1, math.nan, None], pa.float64()),
            "f32": pa.array([0.5, None, 1.25], pa.float32()),
            "topic": ["b", "a", "a"],
            "chat": [[{"role": "user", "content": "hi"}], [], None],
            "flag": [True, None, False],
            "text": ["1", "007", "日本"],
        },
        metadata={b"origin": b"test"},
    )
    path = tmp_path / "in.parquet"
    pq.write_table(table, path)
    return path, table


def test_parquet_keeps_its_arrow_types_when_reordered_and_extended(tmp_path):
    path, original = _parquet(tmp_path)
    table = DataTable.read(path)
    table.set_column("difficulty", [2, 1, 3])
    table.set_column("small", [1, None, 2])  # equal to the stored column: kept as int32
    out = tmp_path / "out.parquet"
    table.take([1, 2, 0]).write(out)
    back = pq.read_table(out)
    for field in original.schema:
        assert back.schema.field(field.name).type == field.type, field.name
    assert back.schema.field("difficulty").type == pa.int64()
    assert back.schema.metadata[b"origin"] == b"test"
    rows = back.to_pylist()
    assert [r["id"] for r in rows] == [None, 3, 9007199254740993]
    assert [r["u64"] for r in rows] == [0, None, 12345678901234567891]
    assert math.isnan(rows[0]["f"]) and rows[1]["f"] is None  # NaN stays NaN, null stays null
    assert rows[2]["chat"] == [{"role": "user", "content": "hi"}] and rows[1]["chat"] is None
    assert [r["flag"] for r in rows] == [None, False, True]


def test_a_replaced_parquet_column_keeps_its_type_when_the_values_fit(tmp_path):
    path, _ = _parquet(tmp_path)
    table = DataTable.read(path)
    table.set_column("small", [7, 8, None])
    table.set_column("topic", [1, 2, 3])  # strings replaced by numbers: a new type
    out = tmp_path / "out.parquet"
    table.write(out)
    back = pq.read_table(out)
    assert back.schema.field("small").type == pa.int32() and back["small"].to_pylist() == [
        7,
        8,
        None,
    ]
    assert back["topic"].to_pylist() == [1, 2, 3]


def test_between_formats(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text(_jsonl([{"id": 9007199254740993, "n": 1}, {"id": None, "n": None}]))
    DataTable.read(source).write(tmp_path / "out.parquet")
    back = pq.read_table(tmp_path / "out.parquet")
    assert back.schema.field("id").type == pa.int64()
    assert back.to_pylist() == [{"id": 9007199254740993, "n": 1}, {"id": None, "n": None}]
    DataTable.read(tmp_path / "out.parquet").write(tmp_path / "again.jsonl")
    assert (tmp_path / "again.jsonl").read_text() == source.read_text()


@pytest.mark.parametrize(
    ("rows", "match"),
    [
        (
            [{"v": 12345678901234567891}, {"v": -1}],
            r"column 'v': .*int",
        ),  # beyond int64 with a sign
        ([{"v": 1}, {"v": "s"}], r"column 'v': Could not convert 's'"),
        ([{"v": 9007199254740993}, {"v": 0.5}], r"column 'v': .*exactly representable"),
    ],
)
def test_json_rows_parquet_cannot_type_are_refused_in_one_line(tmp_path, rows, match):
    out = tmp_path / "out.parquet"
    out.write_bytes(b"precious")
    with pytest.raises(ValueError, match=r"^cannot store these rows as Parquet \(" + match):
        DataTable.from_rows(rows).write(out)
    assert out.read_bytes() == b"precious" and [p.name for p in tmp_path.iterdir()] == [
        "out.parquet"
    ]


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_no_nan_or_infinity_in_json_lines(tmp_path, value):
    """JSON has no NaN: neither null (another value) nor NaN (other readers reject it)."""
    table = DataTable.from_rows([{"a": 1}, {"a": 2, "score": {"x": value}}]).take([1, 0])
    out = tmp_path / "out.jsonl"
    with pytest.raises(
        ValueError,
        match=r"^input row 1 \(counting from 0\), column 'score': \{'x': -?(nan|inf)\} cannot be "
        r"stored in JSON .*; fix that row or write \.parquet$",
    ):
        table.write(out)
    assert not out.exists()
    table.write(tmp_path / "out.parquet")  # Parquet keeps them
    back = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert repr(back[0]["score"]["x"]) == repr(value)


def test_a_data_table_is_a_dataset_for_the_curriculum(tmp_path):
    table = DataTable.from_rows(
        [
            {"topic": "b", "difficulty": 10**400, "extra_info": {"topic": "y"}},
            {"topic": "a", "difficulty": 1e308, "extra_info": {"topic": "x"}},
            {"topic": "a", "difficulty": 2**53 + 1, "extra_info": {"topic": "x"}},
            {"topic": "c", "difficulty": float(2**53), "extra_info": {"topic": "z"}},
        ]
    )
    assert dataset_column(table, "extra_info.topic") == ["y", "x", "x", "z"]
    assert curriculum_order(table, "difficulty") == [3, 2, 1, 0]  # exact: 2**53 < 2**53 + 1
    assert dataset_column(table, "missing") is None


def test_read_errors_name_the_file(tmp_path):
    with pytest.raises(ValueError, match=r"input file '[^']*none\.jsonl' does not exist"):
        DataTable.read(tmp_path / "none.jsonl")
    (tmp_path / "dir.parquet").mkdir()
    with pytest.raises(ValueError, match=r"is not a regular file"):
        DataTable.read(tmp_path / "dir.parquet")
    pq.write_table(pa.table({"a": pa.array([], pa.int64())}), tmp_path / "empty.parquet")
    with pytest.raises(ValueError, match=r"empty\.parquet' has no rows"):
        DataTable.read(tmp_path / "empty.parquet")
    (tmp_path / "huge.jsonl").write_text('{"a": 1}\n{"a": ' + "1" * 5000 + "}\n")
    with pytest.raises(
        ValueError, match=r"huge\.jsonl: line 2: cannot be read \(Exceeds the limit"
    ):
        DataTable.read(tmp_path / "huge.jsonl")
    with pytest.raises(ValueError, match="limit must be a positive number"):
        DataTable.read(tmp_path / "huge.jsonl", limit=0)
    with pytest.raises(ValueError, match="must end in one of"):
        DataTable.read(tmp_path / "x.csv")
    path, _ = _parquet(tmp_path)
    assert len(DataTable.read(path, limit=2)) == 2
    with pytest.raises(ValueError, match="exactly one"):
        DataTable()


def test_records_of_deeply_nested_rows_are_copies(tmp_path):
    deep = json.loads("[" * 900 + "]" * 900)
    table = DataTable.from_rows([{"v": deep, "n": 9007199254740993, "x": math.nan}])
    records = table.records()
    assert records[0]["n"] == 9007199254740993 and math.isnan(records[0]["x"])
    assert records[0]["v"] == deep and records[0]["v"] is not deep
