"""A checkpoint directory is complete or it does not count: a marker file written last.

A trainer writes a checkpoint file by file (model, optimizer, RNG state, trainer state, ebpo's
state, ...); a kill, a full disk or a crash in between leaves a directory that looks like a
checkpoint and is not one. :func:`mark_complete` is called once every file is written: it flushes
them to the storage (``fsync``), then writes :data:`MARKER` atomically, listing every file with
its size. :func:`incomplete_reason` accepts a directory only if the marker is there, readable, and
every file it lists is present with the size it had: a file missing, truncated or grown since
(a partial write, a disk-full, a hand-made edit) makes the checkpoint incomplete. Sizes, not
hashes: checking them costs one ``stat`` per file, where hashing would read every byte of a
model and its optimizer at each save and each resume; a same-size change of content is not
detected (the loaders' own format checks still apply).

    mark_complete(checkpoint_dir, required=["trainer_state.json"])   # the last write of a save
    incomplete_reason(checkpoint_dir)       # None, or why the directory is not a checkpoint
    newest_complete(run_dir)                # (newest complete checkpoint-N or None, newer skipped)
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ebpo.utils.files import read_json, write_json

__all__ = [
    "MARKER",
    "checkpoint_dirs",
    "incomplete_reason",
    "mark_complete",
    "newest_complete",
    "unmark",
]

#: written last into a complete checkpoint: the list of its files and their sizes
MARKER = "ebpo_checkpoint_complete.json"
_FORMAT = "ebpo-checkpoint"
_VERSION = 1
#: temporary files of :func:`ebpo.utils.files.atomic_path` (a write that never finished)
_TEMPORARY = re.compile(r"^\..+\.[0-9a-f]+\.tmp$")


def checkpoint_dirs(parent: str | os.PathLike[str], prefix: str = "checkpoint") -> list[Path]:
    """The ``<prefix>-N`` directories of ``parent``, oldest (smallest N) first; none when
    ``parent`` does not exist."""
    root = Path(parent)
    if not root.is_dir():
        return []
    found = []
    for path in root.iterdir():
        head, _, step = path.name.rpartition("-")
        if head == prefix and step.isdigit() and path.is_dir():
            found.append((int(step), path))
    return [path for _, path in sorted(found)]


def unmark(directory: str | os.PathLike[str]) -> None:
    """Remove ``directory``'s marker (before its files are written again): until
    :func:`mark_complete` runs, the directory is incomplete."""
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        os.remove(Path(directory) / MARKER)
        _fsync_dir(Path(directory))


def mark_complete(
    directory: str | os.PathLike[str], *, required: Iterable[str] = (), **info: Any
) -> None:
    """Flush every file below ``directory`` to the storage, then write :data:`MARKER` listing
    them with their sizes (and ``info``). Raises ValueError if a ``required`` file (a path relative
    to ``directory``) is missing: the checkpoint stays unmarked."""
    root = Path(directory)
    files = _files(root)
    missing = [name for name in required if name not in files]
    if missing:
        raise ValueError(
            f"checkpoint {str(root)!r} lacks {', '.join(missing)}; it is left incomplete"
        )
    for name in files:
        _fsync_file(root / name)
    for folder in {(root / name).parent for name in files} | {root}:
        _fsync_dir(folder)
    write_json(
        root / MARKER,
        {"format": _FORMAT, "version": _VERSION, **info, "files": files},
        indent=1,
    )
    _fsync_dir(root)


def incomplete_reason(
    directory: str | os.PathLike[str], *, required: Iterable[str] = ()
) -> str | None:
    """None when ``directory`` is a complete checkpoint (marked, every listed file present with
    its recorded size, every ``required`` file listed); otherwise why not, in a few words."""
    root = Path(directory)
    if not root.is_dir():
        return "no such directory"
    marker = root / MARKER
    if not marker.is_file():
        return (
            f"no {MARKER}, the file a save writes last: the save was interrupted, "
            "or the checkpoint was not written by ebpo"
        )
    try:
        record = read_json(marker)
    except (OSError, ValueError) as error:
        return f"{MARKER} is unreadable ({error})"
    files = record.get("files") if isinstance(record, dict) else None
    if (
        not isinstance(record, dict)
        or record.get("format") != _FORMAT
        or not isinstance(files, dict)
        or not all(isinstance(k, str) and type(v) is int for k, v in files.items())
    ):
        return f"{MARKER} is not an ebpo checkpoint record"
    if record.get("version") != _VERSION:
        return f"{MARKER} has version {record.get('version')!r}; this ebpo reads {_VERSION}"
    problems = [f"{name} is not listed" for name in required if name not in files]
    for name, size in files.items():
        try:
            actual = (root / name).stat().st_size
        except OSError:
            problems.append(f"{name} is missing")
            continue
        if actual != size:
            problems.append(f"{name} has {actual} bytes, {size} were written")
    if not problems:
        return None
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    return "; ".join(problems[:3]) + more


def newest_complete(
    parent: str | os.PathLike[str], prefix: str = "checkpoint", *, required: Iterable[str] = ()
) -> tuple[Path | None, list[tuple[Path, str]]]:
    """``(the complete <prefix>-N directory with the largest N or None, [(newer incomplete
    directory, why), ...])``; the skipped ones newest first."""
    needed = list(required)
    skipped: list[tuple[Path, str]] = []
    for path in reversed(checkpoint_dirs(parent, prefix)):
        reason = incomplete_reason(path, required=needed)
        if reason is None:
            return path, skipped
        skipped.append((path, reason))
    return None, skipped


def _files(root: Path) -> dict[str, int]:
    """Relative path -> size of every file below ``root`` but the marker and unfinished temporary
    files, sorted."""
    out = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            relative = path.relative_to(root).as_posix()
            if relative == MARKER or _TEMPORARY.match(name) or not path.is_file():
                continue
            out[relative] = path.stat().st_size
    return dict(sorted(out.items()))


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    """Make the directory's entries (new names, renames, removals) durable; a no-op where
    directories cannot be opened (Windows)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
