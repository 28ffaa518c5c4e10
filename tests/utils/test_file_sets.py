"""ebpo.utils.file_sets: a set of files replaces the previous set in a folder all or nothing — on
an error in a writer, a failure at every rename of the swap, and a kill at every rename (the
rollback left to the next run's ``remove_stale``); modes kept, other files never touched."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path

import pytest

from ebpo.utils import file_sets
from ebpo.utils.file_sets import remove_stale, write_file_set

NAMES = ("a.json", "b.csv", "c.png")
#: the new set has a file the old one lacks: a rollback must remove it
NEW = ("d.txt", *NAMES)


def snapshot(root: Path) -> dict[str, str]:
    """Every entry below ``root`` (hidden ones included): its kind and content hash and mode."""
    out = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if path.is_dir():
            out[key] = "dir"
        else:
            mode = stat.S_IMODE(path.lstat().st_mode)
            out[key] = f"{hashlib.sha256(path.read_bytes()).hexdigest()} {mode:o}"
    return out


def writers(tag: str, names=NAMES):
    def writer(name):
        return lambda path: Path(path).write_text(f"{tag}:{name}\n")

    return {name: writer(name) for name in names}


@pytest.fixture
def folder(tmp_path):
    """A folder with an old set (one file read-only for the group and others) and a user's files
    that look like ours but are not."""
    out = tmp_path / "out"
    out.mkdir()
    write_file_set(out, writers("old"), tag="rep")
    os.chmod(out / "b.csv", 0o640)
    for name in ("notes.txt", ".a.json.tmp", ".a.json.zzzzzzzz.tmp", ".rep.xyz.new", ".c.png"):
        (out / name).write_text("the user's\n")
    (out / ".rep.0123.old").mkdir()
    return out


def test_a_set_replaces_the_old_one_keeping_modes_and_the_users_files(folder):
    before = snapshot(folder)
    paths = write_file_set(folder, writers("new", NAMES[:2]), tag="rep", replaces=NAMES)
    assert paths == [folder / "a.json", folder / "b.csv"]
    after = snapshot(folder)
    assert (folder / "a.json").read_text() == "new:a.json\n"
    assert stat.S_IMODE((folder / "b.csv").stat().st_mode) == 0o640  # the old file's mode
    assert not (folder / "c.png").exists()  # the old set's file the new one does not write
    assert {k: v for k, v in after.items() if k not in NAMES} == {
        k: v for k, v in before.items() if k not in NAMES
    }


def test_a_failing_writer_leaves_the_old_set_and_nothing_else(folder):
    before = snapshot(folder)

    def broken(path):
        Path(path).write_text("half")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError) as raised:
        write_file_set(folder, {**writers("new"), "b.csv": broken}, tag="rep", replaces=NAMES)
    assert raised.value.filename == str(folder / "b.csv")  # its place, not the staging folder
    assert snapshot(folder) == before


def _renames_of_a_swap(folder) -> int:
    calls = []
    real = os.rename

    def counting(a, b):
        calls.append((a, b))
        real(a, b)

    file_sets.os.rename = counting
    try:
        write_file_set(folder, writers("count", NEW), tag="rep", replaces=NAMES)
    finally:
        file_sets.os.rename = real
    return len(calls)


def _failing_rename(monkeypatch, at: int):
    count = [0]
    real = os.rename

    def rename(a, b):
        count[0] += 1
        if count[0] == at:
            raise OSError(errno.EIO, "Input/output error", str(b))
        real(a, b)

    monkeypatch.setattr(file_sets.os, "rename", rename)


def test_a_failure_at_every_rename_of_the_swap_rolls_back(folder, monkeypatch):
    renames = _renames_of_a_swap(folder)
    assert renames == len(NAMES) + 1 + len(NEW)  # old ones aside, the manifest, new ones in
    (folder / "d.txt").unlink()
    before = snapshot(folder)
    for at in range(1, renames + 1):
        with monkeypatch.context() as patch:
            _failing_rename(patch, at)
            with pytest.raises(OSError):
                write_file_set(folder, writers(f"fail{at}", NEW), tag="rep", replaces=NAMES)
        assert snapshot(folder) == before, f"rename {at}"


class Killed(BaseException):
    """Stands for SIGKILL: nothing of ours runs after it (the rollback is switched off)."""


@pytest.mark.parametrize("stage", ["writing", *[f"rename-{k}" for k in range(1, 9)], "cleanup"])
def test_a_kill_anywhere_is_undone_by_the_next_remove_stale(folder, monkeypatch, stage):
    """Killed while writing, at each rename of the swap, or after the swap (while its folders
    are removed): the next run's remove_stale gives back a whole set — the old one, or the new one
    once the swap is committed — and leaves the user's files."""
    before = snapshot(folder)
    new = writers("new", NEW)
    with monkeypatch.context() as patch:
        patch.setattr(file_sets, "_roll_back", lambda *a: None)
        patch.setattr(file_sets.shutil, "rmtree", lambda *a, **k: None)
        if stage == "writing":

            def dies(path):
                Path(path).write_text("half")
                raise Killed

            new["b.csv"] = dies
        elif stage == "cleanup":

            def rmtree(*args, **kwargs):
                raise Killed

            patch.setattr(file_sets.shutil, "rmtree", rmtree)
        else:
            count, real = [0], os.rename

            def rename(a, b):
                count[0] += 1
                if count[0] == int(stage.split("-")[1]):
                    raise Killed
                real(a, b)

            patch.setattr(file_sets.os, "rename", rename)
        with pytest.raises(Killed):
            write_file_set(folder, new, tag="rep", replaces=NAMES)
    left = {p.name for p in folder.iterdir()}
    assert any(n.startswith(".rep.") and len(n) == len(".rep.0123456789abcdef.new") for n in left)
    removed = remove_stale(folder, "rep", NAMES)
    assert removed and all(p.name.startswith(".rep.") for p in removed)
    after = snapshot(folder)
    if stage == "cleanup":  # committed: the new set, whole
        assert [(folder / n).read_text() for n in NEW] == [f"new:{n}\n" for n in NEW]
        assert set(after) == {*before, "d.txt"}
    else:
        assert after == before


def test_remove_stale_removes_our_temporary_files_only(folder):
    ours = [folder / ".a.json.0badc0de.tmp", folder / ".c.png.12345678.tmp"]
    for path in ours:
        path.write_text("partial")
    before = snapshot(folder)
    assert sorted(remove_stale(folder, "rep", NAMES)) == sorted(ours)
    assert snapshot(folder) == {k: v for k, v in before.items() if k not in {p.name for p in ours}}
    assert (folder / ".a.json.zzzzzzzz.tmp").exists() and (folder / ".rep.xyz.new").exists()
    assert (folder / ".rep.0123.old").is_dir()  # not a token of ours: 16 hex digits


def test_is_leftover_knows_the_folders_a_kill_leaves_and_nothing_else(folder, monkeypatch):
    """What a killed call leaves (its staging and backup folders) is a leftover of its tag only;
    the user's look-alikes (a short token, a file of the set) are not."""
    count, real = [0], os.rename

    def rename(a, b):
        count[0] += 1
        if count[0] == 2:  # the old files are being moved aside: both folders exist
            raise Killed
        real(a, b)

    with monkeypatch.context() as patch:
        patch.setattr(file_sets, "_roll_back", lambda *a: None)
        patch.setattr(file_sets.os, "rename", rename)
        with pytest.raises(Killed):
            write_file_set(folder, writers("new"), tag="rep", replaces=NAMES)
    left = sorted(p.name for p in folder.iterdir() if p.is_dir())
    ours = [n for n in left if file_sets.is_leftover(folder / n, "rep")]
    assert len(ours) == 2 and {n[-4:] for n in ours} == {".new", ".old"}
    assert not any(file_sets.is_leftover(folder / n, "other") for n in ours)
    names = {p.name for p in folder.iterdir()} - set(ours)
    assert not any(file_sets.is_leftover(folder / n, "rep") for n in names)  # .rep.0123.old ...
    assert ".rep.0123.old" in names and ".rep.xyz.new" in names
    with pytest.raises(ValueError, match="tag must be"):
        file_sets.is_leftover(folder / ours[0], "Rep")


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", ".manifest.json"])
def test_names_are_plain_file_names(tmp_path, name):
    with pytest.raises(ValueError, match="plain file names"):
        write_file_set(tmp_path, {name: lambda p: None}, tag="rep")
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_on_our_own_files_names_the_users_folder(folder, monkeypatch):
    """ENOSPC on the staging folder's own files (no file of the set) names ``folder``, not a
    hidden folder of ours; the old set stays."""
    before = snapshot(folder)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(file_sets.json, "dumps", full)
    with pytest.raises(OSError) as raised:
        write_file_set(folder, writers("new"), tag="rep", replaces=NAMES)
    assert raised.value.filename == str(folder)
    assert snapshot(folder) == before


def test_a_folder_named_as_ours_without_our_mark_is_the_users(folder):
    """Only a folder holding our mark, or an empty one (a kill between making it and marking
    it), is a leftover of ours; one named like ours that holds the user's files stays whole."""
    users = folder / ".rep.0123456789abcdef.old"
    users.mkdir()
    (users / "notes.txt").write_text("the user's\n")
    (users / ".manifest.json").write_text('["a.json"]')  # names, but no mark
    empty = folder / ".rep.fedcba9876543210.new"
    empty.mkdir()
    assert not file_sets.is_leftover(users, "rep") and file_sets.is_leftover(empty, "rep")
    before = snapshot(folder)
    assert remove_stale(folder, "rep", NAMES) == [empty]
    assert snapshot(folder) == {k: v for k, v in before.items() if k != empty.name}


@pytest.mark.parametrize("manifest", ["{", '{"a.json": 1}', '["../a.json"]', "\udcff"])
def test_a_manifest_of_ours_that_cannot_be_read_is_named_and_nothing_moves(folder, manifest):
    backup = folder / ".rep.0123456789abcdef.old"
    backup.mkdir()
    (backup / file_sets.MARK).write_text("{}")
    (backup / "a.json").write_text("an old file\n")
    (backup / ".manifest.json").write_text(manifest, errors="surrogateescape")
    before = snapshot(folder)
    where = str(backup / ".manifest.json")
    with pytest.raises(ValueError, match=rf"^'{where}' cannot be read .*move those you want back"):
        remove_stale(folder, "rep", NAMES)
    with pytest.raises(ValueError, match="cannot be read"):
        file_sets.check_leftovers(folder, "rep")
    assert snapshot(folder) == before
