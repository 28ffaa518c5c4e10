"""ebpo.utils.checkpoints: a checkpoint directory counts only when its marker, written last, lists
every file with the size it has."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from ebpo.utils.checkpoints import (
    MARKER,
    checkpoint_dirs,
    incomplete_reason,
    mark_complete,
    newest_complete,
    unmark,
)


def make(path: Path, files: dict[str, bytes] | None = None, *, mark: bool = True) -> Path:
    files = {
        "model.bin": b"m" * 100,
        "state.json": b"{}",
        "sub/part.bin": b"p" * 7,
        **(files or {}),
    }
    for name, data in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_bytes(data)
    if mark:
        mark_complete(path, required=["state.json"], global_step=3)
    return path


def test_a_marked_checkpoint_is_complete_and_its_marker_lists_every_file(tmp_path):
    ckpt = make(tmp_path / "checkpoint-3")
    assert incomplete_reason(ckpt) is None
    record = json.loads((ckpt / MARKER).read_text())
    assert record["files"] == {"model.bin": 100, "state.json": 2, "sub/part.bin": 7}
    assert record["global_step"] == 3 and record["version"] == 1
    # files added afterwards (a user's note) do not matter
    (ckpt / "notes.txt").write_text("mine")
    assert incomplete_reason(ckpt) is None


def test_unfinished_temporary_files_are_not_listed(tmp_path):
    ckpt = make(tmp_path / "c", {".state.json.0a1b2c3d.tmp": b"half"})
    assert ".state.json.0a1b2c3d.tmp" not in json.loads((ckpt / MARKER).read_text())["files"]


def test_a_required_file_missing_leaves_the_checkpoint_unmarked(tmp_path):
    ckpt = tmp_path / "c"
    ckpt.mkdir()
    (ckpt / "model.bin").write_bytes(b"x")
    with pytest.raises(ValueError, match=r"lacks trainer_state\.json; it is left incomplete"):
        mark_complete(ckpt, required=["trainer_state.json"])
    assert not (ckpt / MARKER).exists()


def _delete(path: Path) -> None:
    path.unlink()


def _truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def _grow(path: Path) -> None:
    with open(path, "ab") as f:
        f.write(b"x")


def _marker(text: str):
    def write(path: Path) -> None:
        (path.parent / MARKER).write_text(text)

    return write


#: (id, what is done to model.bin or the marker, the reason given)
DAMAGES = [
    ("file-missing", _delete, r"^model\.bin is missing$"),
    ("file-truncated", _truncate, r"^model\.bin has 50 bytes, 100 were written$"),
    ("file-grown", _grow, r"^model\.bin has 101 bytes, 100 were written$"),
    ("file-emptied", lambda p: p.write_bytes(b""), r"^model\.bin has 0 bytes"),
    ("file-a-directory", lambda p: (p.unlink(), p.mkdir()), r"^model\.bin has \d+ bytes"),
    ("marker-missing", lambda p: (p.parent / MARKER).unlink(), rf"^no {MARKER}, the file a save writes last"),
    ("marker-empty", _marker(""), rf"^{MARKER} is unreadable"),
    ("marker-truncated", _marker('{"format": "ebpo-checkpoint", "ver'), rf"^{MARKER} is unreadable"),
    ("marker-not-utf8", lambda p: (p.parent / MARKER).write_bytes(b"\xff\xfe"), rf"^{MARKER} is unreadable"),
    ("marker-a-list", _marker("[]"), rf"^{MARKER} is not an ebpo checkpoint record$"),
    ("marker-other-format", _marker('{"format": "x", "version": 1, "files": {}}'), "not an ebpo checkpoint"),
    ("marker-files-a-list", _marker('{"format": "ebpo-checkpoint", "version": 1, "files": []}'), "not an ebpo"),
    ("marker-size-text", _marker('{"format": "ebpo-checkpoint", "version": 1, "files": {"a": "1"}}'), "not an"),
    ("marker-size-bool", _marker('{"format": "ebpo-checkpoint", "version": 1, "files": {"a": true}}'), "not an"),
    ("marker-newer", _marker('{"format": "ebpo-checkpoint", "version": 2, "files": {}}'), "has version 2; this"),
    ("marker-a-directory", lambda p: ((p.parent / MARKER).unlink(), (p.parent / MARKER).mkdir()), f"no {MARKER}"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("damage", "reason"), [d[1:] for d in DAMAGES], ids=[d[0] for d in DAMAGES]
)
def test_a_damaged_checkpoint_is_incomplete_and_says_why(tmp_path, damage, reason):
    ckpt = make(tmp_path / "checkpoint-1")
    damage(ckpt / "model.bin")
    found = incomplete_reason(ckpt)
    assert found is not None and re.search(reason, found), found


def test_several_problems_are_named_up_to_three(tmp_path):
    ckpt = make(tmp_path / "c", {f"f{i}": b"x" for i in range(5)})
    for i in range(5):
        (ckpt / f"f{i}").unlink()
    assert incomplete_reason(ckpt) == ("f0 is missing; f1 is missing; f2 is missing (and 2 more)")


def test_a_required_file_must_be_listed(tmp_path):
    ckpt = make(tmp_path / "c")
    assert incomplete_reason(ckpt, required=["state.json"]) is None
    assert incomplete_reason(ckpt, required=["rng_state.pth"]) == "rng_state.pth is not listed"


def test_not_a_directory(tmp_path):
    assert incomplete_reason(tmp_path / "absent") == "no such directory"
    (tmp_path / "file").write_text("x")
    assert incomplete_reason(tmp_path / "file") == "no such directory"


def test_unmark_makes_a_checkpoint_incomplete_and_is_idempotent(tmp_path):
    ckpt = make(tmp_path / "c")
    unmark(ckpt)
    assert incomplete_reason(ckpt).startswith(f"no {MARKER}")
    unmark(ckpt)  # nothing to remove
    unmark(tmp_path / "absent")
    mark_complete(ckpt)
    assert incomplete_reason(ckpt) is None


def test_checkpoint_dirs_are_ordered_by_step_number(tmp_path):
    for name in (
        "checkpoint-10",
        "checkpoint-9",
        "checkpoint-100",
        "checkpoint-x",
        "other-3",
        "checkpoint-",
    ):
        (tmp_path / name).mkdir()
    (tmp_path / "checkpoint-7").write_text("a file")
    assert [p.name for p in checkpoint_dirs(tmp_path)] == [
        "checkpoint-9",
        "checkpoint-10",
        "checkpoint-100",
    ]
    assert checkpoint_dirs(tmp_path / "absent") == []
    assert [p.name for p in checkpoint_dirs(tmp_path, "other")] == ["other-3"]


def test_newest_complete_skips_newer_incomplete_ones_and_says_why(tmp_path):
    make(tmp_path / "checkpoint-2")
    make(tmp_path / "checkpoint-11")
    make(tmp_path / "checkpoint-12", mark=False)
    (tmp_path / "checkpoint-13").mkdir()
    make(tmp_path / "checkpoint-1", mark=False)  # older and incomplete: not reported
    found, skipped = newest_complete(tmp_path)
    assert found == tmp_path / "checkpoint-11"
    assert [(p.name, r.split(",")[0]) for p, r in skipped] == [
        ("checkpoint-13", f"no {MARKER}"),
        ("checkpoint-12", f"no {MARKER}"),
    ]


def test_newest_complete_without_any_complete_one(tmp_path):
    assert newest_complete(tmp_path) == (None, [])
    make(tmp_path / "checkpoint-1", mark=False)
    found, skipped = newest_complete(tmp_path)
    assert found is None and [p.name for p, _ in skipped] == ["checkpoint-1"]
