"""ebpo.utils.files: output-path checks and atomic writes."""

from __future__ import annotations

import json
import math

import pytest

from ebpo.utils.files import (
    atomic_path,
    atomic_write,
    check_output_path,
    read_json,
    same_path,
    write_json,
)


def test_check_output_path_accepts_new_file_and_new_nested_dir(tmp_path):
    assert check_output_path(tmp_path / "out.jsonl", "--output") == tmp_path / "out.jsonl"
    assert (
        check_output_path(tmp_path / "a" / "b", "--output-dir", kind="dir") == tmp_path / "a" / "b"
    )
    assert list(tmp_path.iterdir()) == []  # nothing created


@pytest.mark.parametrize(
    ("target", "kind", "match"),
    [
        ("d", "file", "is a directory, expected a file path"),
        ("f", "dir", "is a file, expected a directory"),
        ("f/out", "file", "which is not a directory"),
        ("", "file", "must be a non-empty path"),
    ],
)
def test_check_output_path_refuses(tmp_path, target, kind, match):
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match=match) as info:
        check_output_path(str(tmp_path / target) if target else "", "--output", kind=kind)
    assert "--output" in str(info.value)


def test_check_output_path_refuses_the_input_itself(tmp_path):
    source = tmp_path / "data.jsonl"
    source.write_text("{}\n")
    (tmp_path / "link.jsonl").symlink_to(source)
    for spelling in (source, tmp_path / "." / "data.jsonl", tmp_path / "link.jsonl"):
        with pytest.raises(ValueError, match="is the input file itself"):
            check_output_path(spelling, "-o", inputs=[source])
    assert same_path(source, tmp_path / "link.jsonl")


def test_check_output_path_below_dev_null():
    with pytest.raises(ValueError, match="not a directory"):
        check_output_path("/dev/null/out.json", "--out")


def test_atomic_write_keeps_old_content_on_error(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_write(path) as f:
        f.write("half of the new")
        raise RuntimeError("boom")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]  # no temporary file left


def test_atomic_path_renames_on_success_and_creates_parents(tmp_path):
    path = tmp_path / "sub" / "f.bin"
    with atomic_path(path) as tmp:
        assert tmp.parent == path.parent and tmp != path
        tmp.write_bytes(b"\x00\x01")
        assert not path.exists()
    assert path.read_bytes() == b"\x00\x01"
    assert [p.name for p in path.parent.iterdir()] == ["f.bin"]


def test_write_json_refuses_nan_unless_allowed(tmp_path):
    path = tmp_path / "s.json"
    with pytest.raises(ValueError):
        write_json(path, {"mean": math.nan})
    assert not path.exists()
    write_json(path, {"mean": math.nan}, allow_nan=True)
    assert math.isnan(read_json(path)["mean"])
    write_json(path, {"a": [1, 2]})
    assert json.loads(path.read_text()) == {"a": [1, 2]}
