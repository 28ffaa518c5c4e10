"""The one output-folder guard of ebpo train, grpo, replay and compare (its users' tests pin each
command's messages; these pin the guard's own rules)."""

import errno
import os

import pytest

from ebpo.utils.file_sets import MARK
from ebpo.utils.output_folder import (
    check_apart,
    check_folder,
    entries_of,
    holding,
    write_report,
)
from ebpo.utils.run_lock import LOCK, lock_run_dir


def test_check_folder_refuses_a_loop_and_a_link_to_nothing(tmp_path):
    os.symlink("loop", tmp_path / "loop")
    os.symlink(tmp_path / "nowhere", tmp_path / "dead")
    with pytest.raises(
        ValueError, match=r"^-o '.*loop/below' is, or lies below, a symbolic link loop"
    ):
        check_folder(tmp_path / "loop" / "below", "-o")
    with pytest.raises(ValueError, match=r"^-o '.*dead' is a symbolic link to '.*nowhere', which"):
        check_folder(tmp_path / "dead", "-o")
    assert check_folder(tmp_path / "new", "-o") == tmp_path / "new"
    assert not (tmp_path / "new").exists() and not (tmp_path / "nowhere").exists()


def test_entries_of_leaves_out_our_lock_and_our_leftovers_only(tmp_path):
    (tmp_path / LOCK).write_text("1\n")
    ours, users = tmp_path / ".r.0123456789abcdef.new", tmp_path / ".r.0123456789abcdef.old"
    ours.mkdir()
    (ours / MARK).write_text("{}")
    users.mkdir()
    (users / "thesis.tex").write_text("mine")
    assert entries_of(tmp_path, "r") == [users.name]
    assert entries_of(tmp_path) == sorted([ours.name, users.name])
    assert entries_of(tmp_path / "missing") == []


@pytest.mark.parametrize(
    ("out", "says"),
    [("run", "is the input 'run'"), ("run/x", "lies inside the input 'run'"), (".", "holds the")],
)
def test_check_apart_refuses_an_input_itself_inside_or_below(tmp_path, monkeypatch, out, says):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run").mkdir()
    inputs = [tmp_path.joinpath("run").relative_to(tmp_path), tmp_path / "gone"]
    with pytest.raises(ValueError, match=f"^-o '{out}' {says}"):
        check_apart(check_folder(out, "-o"), inputs, option="-o")
    check_apart(check_folder("elsewhere", "-o"), inputs, option="-o")  # apart: no error


def test_holding_refuses_a_held_folder_at_once_and_decides_again_under_the_lock(tmp_path):
    out, calls = tmp_path / "out", []
    refused = pytest.raises(ValueError, match="in use by another ebpo process")
    with lock_run_dir(out), refused, holding(out, lambda: calls.append("decide")):
        pass
    assert calls == [] and not out.exists()  # refused before deciding, nothing created

    def decide():
        calls.append(("decide", (out / LOCK).exists()))
        return len(calls)

    with holding(out, decide, tidy=lambda: calls.append("tidy")) as decision:
        assert decision == 2 and calls[-1] == "tidy"
    assert calls == [("decide", False), ("decide", True), "tidy"]
    assert not out.exists()  # made for the lock, removed with it


def test_write_report_makes_a_full_disk_one_line_and_keeps_the_previous_files(tmp_path):
    write_report(tmp_path, {"a.json": lambda p: p.write_text("old")}, tag="t", replaces=(),
                 option="-o")  # fmt: skip

    def full(path):
        path.write_text("half")
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    with pytest.raises(ValueError) as error:
        write_report(tmp_path, {"a.json": full}, tag="t", replaces=["a.json"], option="-o")
    assert str(error.value) == (
        f"-o {str(tmp_path)!r}: cannot write {str(tmp_path / 'a.json')!r}: No space left on "
        "device; nothing was changed there (the previous report, if any, is whole)"
    )
    assert sorted(os.listdir(tmp_path)) == ["a.json"]
    assert (tmp_path / "a.json").read_text() == "old"
