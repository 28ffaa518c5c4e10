"""``ebpo data label`` / ``ebpo data order`` and the user's files (issue #21): rows come out value
for value, a replaced file keeps its mode and its symbolic link, hard links are reported, and a
full disk is one line with the old file intact."""

from __future__ import annotations

import errno
import json
import os

import pytest

from ebpo.cli import main


def run(argv: list[str]) -> int:
    # Through ebpo.cli.main: it turns a ValueError into one line on stderr and exit code 2.
    return main(["data", *argv])


# ------------------------------------------------------------- value for value (issue #21, item 3)
ISSUE_ROWS = [
    {
        "id": 9007199254740993,
        "answer": 1,
        "topic": "b",
        "level": "Level 2",
        "n": 12345678901234567891,
    },
    {"id": None, "answer": None, "topic": "a", "level": "Level 1", "n": None},
    {"id": 7, "answer": "1", "topic": "a", "level": 3, "n": 1, "flag": True},
]


@pytest.mark.parametrize("command", [["order", "--order", "topic"], ["label", "--topic", "none"]])
def test_integers_next_to_a_null_come_out_as_they_went_in(tmp_path, command):
    """The pandas frame wrote 9007199254740992.0, 1.2345678901234567e+19 and 1.0."""
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in ISSUE_ROWS))
    out = tmp_path / "out.jsonl"
    assert run([command[0], str(source), *command[1:], "-o", str(out)]) == 0
    text = out.read_text()
    assert "9007199254740993," in text and "12345678901234567891" in text
    assert "9007199254740992.0" not in text and "e+19" not in text and '"answer": 1.0' not in text
    rows = [json.loads(line) for line in text.splitlines()]
    by_id = {r["id"]: r for r in rows}
    for original in ISSUE_ROWS:
        written = by_id[original["id"]]
        assert repr({k: written[k] for k in original}) == repr(original)  # types included
    if command[0] == "label":  # the new column: a number stays the number it is, text is parsed
        assert [r["difficulty"] for r in rows] == [2.0, 1.0, 3] and rows[2]["flag"] is True


def test_label_keeps_the_difficulty_and_topic_columns_it_reads_from(tmp_path):
    """A column label reads and writes back (difficulty, topic) keeps the user's numbers and nulls."""
    rows = [
        {"prompt": "a", "topic": 3, "difficulty": 9007199254740993},
        {"prompt": "b", "topic": 1, "difficulty": None},
        {"prompt": "c", "topic": " Algebra ", "difficulty": "Level 2"},
    ]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.jsonl"
    assert run(["label", str(source), "-o", str(out)]) == 0
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["topic"] for r in written] == [3, 1, "Algebra"]
    assert repr([r["difficulty"] for r in written]) == repr([9007199254740993, None, 2.0])


def test_parquet_int64_with_nulls_keeps_its_type_through_label_and_order(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.table(
        {
            "id": pa.array([9007199254740993, None, 3], pa.int64()),
            "answer": pa.array([1, None, 2], pa.int32()),
            "topic": ["b", "a", "a"],
            "level": ["Level 2", "Level 1", "Level 3"],
        }
    )
    source = tmp_path / "in.parquet"
    pq.write_table(table, source)
    assert run(["label", str(source), "--in-place", "--topic-column", "topic"]) == 0
    assert run(["order", str(source), "--in-place", "--order", "difficulty"]) == 0
    back = pq.read_table(source)
    assert (
        back.schema.field("id").type == pa.int64()
        and back.schema.field("answer").type == pa.int32()
    )
    assert back["id"].to_pylist() == [None, 9007199254740993, 3]
    assert back["answer"].to_pylist() == [None, 1, 2]
    assert back["difficulty"].to_pylist() == [1.0, 2.0, 3.0]


def test_order_by_a_difficulty_past_the_float_range(tmp_path):
    """1 followed by 400 zeros: float() overflowed (a traceback). Python ints compare exactly."""
    huge = int("1" + "0" * 400)
    rows = [
        {"p": "a", "difficulty": huge},
        {"p": "b", "difficulty": 1e308},
        {"p": "c", "difficulty": 2},
    ]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.jsonl"
    assert run(["order", str(source), "--order", "difficulty", "-o", str(out)]) == 0
    assert [json.loads(line)["p"] for line in out.read_text().splitlines()] == ["c", "b", "a"]
    assert f'"difficulty": {huge}' in out.read_text()
    assert run(["label", str(source), "-o", str(out), "--topic", "none", "--tiers", "3"]) == 0
    assert [json.loads(line)["difficulty_tier"] for line in out.read_text().splitlines()] == [
        2,
        1,
        0,
    ]


# ------------------------------------------------- modes, links, a full disk (issue #21, items 10-11)
GOOD_ROWS = "".join(
    json.dumps({"prompt": p, "answer": "1", "topic": t, "difficulty": d}) + "\n"
    for p, t, d in [("a", "y", 2), ("b", "x", 1), ("c", "y", 3)]
)


def test_in_place_keeps_the_mode_and_writes_through_a_symlink(tmp_path, capsys):
    """--in-place turned 0644 into 0600 and replaced a symlinked input by a regular file."""
    real = tmp_path / "real"
    real.mkdir()
    target = real / "data.jsonl"
    target.write_text(GOOD_ROWS)
    target.chmod(0o644)
    link = tmp_path / "data.jsonl"
    link.symlink_to(target)
    assert run(["order", str(link), "--order", "topic", "--in-place"]) == 0
    assert link.is_symlink() and [
        json.loads(x)["topic"] for x in target.read_text().splitlines()
    ] == [
        "x",
        "y",
        "y",
    ]
    assert oct(target.stat().st_mode & 0o777) == oct(0o644)
    assert sorted(p.name for p in real.iterdir()) == ["data.jsonl"]
    assert "hard link" not in capsys.readouterr().err


def test_in_place_on_a_hard_linked_file_says_what_happens(tmp_path, capsys):
    source = tmp_path / "in.jsonl"
    source.write_text(GOOD_ROWS)
    other = tmp_path / "other.jsonl"
    os.link(source, other)
    assert run(["order", str(source), "--order", "topic", "--in-place"]) == 0
    err = capsys.readouterr().err.strip()
    assert err == (
        f"note: {str(source)!r} had 1 other hard link(s); they keep the previous content "
        "(the new file replaced this name only)"
    )
    assert other.read_text() == GOOD_ROWS and source.read_text() != GOOD_ROWS


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_a_new_output_gets_the_umask_mode(tmp_path, mask):
    source = tmp_path / "in.jsonl"
    source.write_text(GOOD_ROWS)
    saved = os.umask(mask)
    try:
        for name in ("out.jsonl", "out.parquet"):
            assert run(["order", str(source), "--order", "topic", "-o", str(tmp_path / name)]) == 0
            assert (tmp_path / name).stat().st_mode & 0o777 == 0o666 & ~mask
    finally:
        os.umask(saved)


def _disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize(
    ("command", "source_name", "out_name"),
    [
        (["order", "--order", "topic"], "in.jsonl", "out.jsonl"),
        (["order", "--order", "topic"], "in.jsonl", "out.parquet"),
        (["order", "--order", "topic", "--in-place"], "in.jsonl", None),
        (["order", "--order", "difficulty", "--in-place"], "in.parquet", None),
        (["label", "--topic", "none"], "in.jsonl", "out.jsonl"),
        (["label"], "in.parquet", "out.parquet"),
        (["label", "--in-place"], "in.jsonl", None),
        (["label", "--in-place", "--tiers", "2"], "in.parquet", None),
    ],
)
def test_a_full_disk_is_one_line_and_leaves_the_old_file(
    tmp_path, capsys, monkeypatch, command, source_name, out_name
):
    """ENOSPC, injected where a full disk shows at the latest (fsync before the rename); the real
    thing, on a full tmpfs, is in tests/hostile/test_files.py."""
    source = tmp_path / source_name
    (tmp_path / "rows.jsonl").write_text(GOOD_ROWS)
    if source_name.endswith(".parquet"):
        assert run(["label", str(tmp_path / "rows.jsonl"), "-o", str(source)]) == 0
    else:
        source.write_text(GOOD_ROWS)
    out = tmp_path / out_name if out_name else source
    if out_name:
        out.write_bytes(b"precious")
    before = out.read_bytes()
    names = sorted(p.name for p in tmp_path.iterdir())
    capsys.readouterr()
    monkeypatch.setattr(os, "fsync", _disk_full)
    argv = [command[0], str(source), *command[1:]] + (["-o", str(out)] if out_name else [])
    assert run(argv) == 2
    err = capsys.readouterr().err
    assert err == (
        f"ebpo data {command[0]}: error: cannot write {str(out)!r}: No space left on device; "
        "the previous file, if any, is unchanged\n"
    )
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == names
