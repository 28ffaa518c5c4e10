"""ebpo.utils.files: output-path checks and atomic writes."""

from __future__ import annotations

import errno
import json
import math
import os
import stat

import pytest

from ebpo.utils.files import (
    atomic_path,
    atomic_write,
    check_output_path,
    hard_links,
    read_json,
    resolve_target,
    same_path,
    storage_error,
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


# ---------------------------------------------------------------- what the new file keeps (issue #21)
@pytest.fixture
def umask():
    """Set the process umask for a test and restore it afterwards."""
    saved = os.umask(0o022)
    os.umask(saved)
    yield lambda value: os.umask(value)
    os.umask(saved)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o600, 0o664, 0o755, 0o444])
@pytest.mark.parametrize("writer", ["atomic_write", "atomic_path", "write_json"])
def test_a_replaced_file_keeps_its_mode(tmp_path, mode, writer):
    """The old temporary file came from mkstemp: every replaced file became 0600."""
    path = tmp_path / "f.json"
    path.write_text("old")
    path.chmod(mode)
    if writer == "atomic_write":
        with atomic_write(path) as f:
            f.write("new")
    elif writer == "atomic_path":
        with atomic_path(path) as tmp:
            tmp.write_text("new")
    else:
        write_json(path, "new")
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert "new" in path.read_text()


@pytest.mark.parametrize(("mask", "expected"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_a_new_file_gets_the_mode_of_the_umask(tmp_path, umask, mask, expected):
    umask(mask)
    with atomic_write(tmp_path / "a.txt") as f:
        f.write("x")
    with atomic_path(tmp_path / "b.bin") as tmp:
        tmp.write_bytes(b"x")
    write_json(tmp_path / "c.json", {})
    for name in ("a.txt", "b.bin", "c.json"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == expected, name


def test_a_write_to_a_symlink_replaces_its_target_and_keeps_the_link(tmp_path):
    """The old rename replaced the link by a regular file and left its target as it was."""
    real_dir = tmp_path / "real"
    real_dir.mkdir()
    target = real_dir / "data.jsonl"
    target.write_text("old")
    target.chmod(0o640)
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    chain = tmp_path / "chain.jsonl"
    chain.symlink_to(link)  # a link to a link
    with atomic_write(chain) as f:
        f.write("new")
    assert chain.is_symlink() and link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o640
    # the temporary file lived beside the target: nothing left in either directory
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chain.jsonl", "link.jsonl", "real"]
    assert [p.name for p in real_dir.iterdir()] == ["data.jsonl"]
    assert resolve_target(chain) == target.resolve()


def test_a_write_to_a_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "link.txt"
    link.symlink_to(tmp_path / "missing.txt")
    write_json(link, [1])
    assert link.is_symlink() and json.loads((tmp_path / "missing.txt").read_text()) == [1]


def test_hard_links_keep_the_old_content_and_are_counted(tmp_path):
    """Documented: an atomic rename gives the name a new inode; the file's other names keep the
    old content. hard_links() lets a command say so."""
    path = tmp_path / "f.txt"
    path.write_text("old")
    other = tmp_path / "other.txt"
    os.link(path, other)
    assert hard_links(path) == 1 and hard_links(tmp_path / "none") == 0
    with atomic_write(path) as f:
        f.write("new")
    assert path.read_text() == "new" and other.read_text() == "old"
    assert hard_links(path) == 0 and hard_links(other) == 0


def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("writer", ["atomic_write", "atomic_path", "write_json"])
def test_a_full_disk_names_the_file_and_leaves_the_old_one(tmp_path, monkeypatch, writer):
    path = tmp_path / "f.json"
    path.write_text("old")
    monkeypatch.setattr(os, "fsync", _enospc)  # where a full disk shows at the latest
    with pytest.raises(OSError) as info:
        if writer == "atomic_write":
            with atomic_write(path) as f:
                f.write("new")
        elif writer == "atomic_path":
            with atomic_path(path) as tmp:
                tmp.write_text("new")
        else:
            write_json(path, "new")
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(path)
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["f.json"]
    failure = storage_error(info.value)
    assert isinstance(failure, ValueError)
    assert str(failure) == (
        f"cannot write {str(path)!r}: No space left on device; the previous file, if any, is "
        "unchanged"
    )


def test_a_full_disk_during_the_write_itself_is_named_too(tmp_path):
    """An ENOSPC raised by the writer inside the block (a failed write names no file)."""
    path = tmp_path / "f.bin"
    with pytest.raises(OSError) as info, atomic_path(path):
        raise OSError(errno.ENOSPC, "No space left on device")
    assert info.value.filename == str(path) and not path.exists()
    assert list(tmp_path.iterdir()) == []


def test_other_errors_are_left_as_they_are(tmp_path):
    with pytest.raises(FileNotFoundError) as info, atomic_path(tmp_path / "f.bin"):
        open(tmp_path / "elsewhere.txt")  # noqa: SIM115 (raises)
    assert info.value.filename == str(tmp_path / "elsewhere.txt")
    assert storage_error(info.value) is None and storage_error(ValueError("x")) is None
    for code in (errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO):
        assert storage_error(OSError(code, os.strerror(code))) is not None
