"""A set of files written into a folder all-or-nothing: a report of several files (``replay.json``,
``replay.csv``, the PNGs) is either the new run's, every file, or the old run's, every file — never
some of each, whatever fails (a full disk, an error in a writer, an interrupt). The commands
use it through :mod:`ebpo.utils.output_folder`, which holds the folder while they write (two
writers of one tag in one folder would remove each other's staging folders).

How: every file is first written into a staging folder inside ``folder`` (``.{tag}.{token}.new``;
inside, not beside, so that it is on the same file system even when ``folder`` is a mount point)
and flushed to the storage. Only then are the set's existing files moved into a backup folder
(``.{tag}.{token}.old``) and the new ones renamed into place, each a rename within one file
system, which needs no space. On a failure at any point the backup is moved back and everything
the call created is removed; the error is raised, naming the file in ``folder`` it was writing.
A ``kill -9`` cannot be caught: it leaves the staging and backup folders, and the next
:func:`remove_stale` of the same tag (the next run that holds the folder) puts the old files back
— the manifest in the backup folder says which names belong to the set — and removes the rest.

A folder is taken for one of ours by its name *and* its content: each gets a mark
(``.ebpo-file-set.json``) the moment it is made, so only a folder holding that mark, or an empty
one (a kill between the two), is ours. A folder of the user's that happens to be named
``.{tag}.{16 hex digits}.old`` is kept, whatever it holds; a backup manifest that cannot be read
is a ValueError naming it and saying what to do, and nothing is moved.

What a replaced file keeps: its permission bits. A symbolic link at one of the names is replaced by
the new file (the link's target is left as it was), because a file elsewhere cannot be part of an
atomic swap.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from ebpo.utils.files import STORAGE_ERRNOS

__all__ = ["MARK", "Writer", "check_leftovers", "is_leftover", "remove_stale", "write_file_set"]

#: writes one file of the set at the path it is given (in the staging folder)
Writer = Callable[[Path], object]
#: the backup folder's list of the set's names; its presence there means that every old file has
#: been moved into the backup and the new ones are being renamed into place
MANIFEST = ".manifest.json"
#: written into each staging and backup folder as it is made: what makes such a folder ours
MARK = ".ebpo-file-set.json"
_TAG = re.compile(r"[a-z0-9][a-z0-9-]*")


def write_file_set(
    folder: str | os.PathLike[str],
    writers: Mapping[str, Writer],
    *,
    tag: str,
    replaces: Iterable[str] = (),
) -> list[Path]:
    """Write ``writers`` (file name -> function writing that file at a given path) into the
    existing directory ``folder``, all or nothing (module doc); return the files' paths.

    ``replaces``: names of an earlier set in ``folder`` that this one replaces; those it does not
    write are removed with the swap (an earlier run's plots after a run without plots), and kept on
    a failure. Names are plain file names. An ``OSError`` names the file of ``folder`` it concerns
    (its ``filename``), so that :func:`ebpo.utils.files.storage_error` makes it one line."""
    root = Path(folder)
    names = list(writers)
    everything = names + [n for n in dict.fromkeys(replaces) if n not in writers]
    _check_names(tag, everything)
    token = secrets.token_hex(8)
    staging, backup = _staging(root, tag, token), _backup(root, tag, token)
    try:
        _make(staging, tag)
        for name in names:
            _stage(staging, name, writers[name], root)
        (staging / MANIFEST).write_text(json.dumps(everything), encoding="utf-8")
        _fsync(staging)
        _make(backup, tag)
    except BaseException as error:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(backup, ignore_errors=True)
        if isinstance(error, OSError) and error.errno in STORAGE_ERRNOS:
            ours = (str(staging), str(staging / MANIFEST), str(staging / MARK), str(backup),
                    str(backup / MARK))  # fmt: skip
            if error.filename in (None, *ours):  # name the user's folder, not our hidden one
                error.filename, error.filename2 = os.fspath(root), None
        raise
    try:
        _swap(root, staging, backup, names, everything)
    except BaseException:
        _roll_back(root, staging, backup)
        raise
    os.unlink(backup / MANIFEST)  # committed: from here on, a kill leaves the new set
    shutil.rmtree(backup, ignore_errors=True)
    shutil.rmtree(staging, ignore_errors=True)
    _fsync(root)
    return [root / name for name in names]


def remove_stale(folder: str | os.PathLike[str], tag: str, names: Iterable[str] = ()) -> list[Path]:
    """Undo and remove what an interrupted :func:`write_file_set` of ``tag`` left in ``folder``
    (its staging and backup folders; an interrupted swap is rolled back, so the old set is whole
    again), and the temporary files ``.{name}.{8 hex digits}.tmp`` that
    :func:`ebpo.utils.files.atomic_path` leaves beside a file when it is killed, for ``names``
    only. Nothing else is touched, however it is named: a staging or backup folder that is not
    ours (:func:`is_leftover`) stays. ValueError, before anything is moved, when the manifest of
    one of ours cannot be read (:func:`check_leftovers`). Returns what was removed. Call it while
    holding the folder."""
    root = Path(folder)
    wanted = list(names)
    _check_names(tag, wanted)
    check_leftovers(root, tag)
    temporary = re.compile(
        r"\.(" + "|".join(re.escape(n) for n in wanted) + r")\.[0-9a-f]{8}\.tmp"
        if wanted
        else r"(?!)"
    )
    removed: list[Path] = []
    tokens = _our_tokens(root, tag)
    with os.scandir(root) as entries:
        for entry in entries:
            if temporary.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
    for token in tokens:
        found = [p for p in (_staging(root, tag, token), _backup(root, tag, token)) if p.exists()]
        _roll_back(root, _staging(root, tag, token), _backup(root, tag, token))
        removed += [p for p in found if not p.exists()]
    return removed


def is_leftover(path: str | os.PathLike[str], tag: str) -> bool:
    """Whether ``path`` is a staging or backup folder of :func:`write_file_set` with ``tag`` (one
    a killed run leaves, which :func:`remove_stale` clears): named as ours and holding our mark,
    or empty. A check that a folder holds nothing but a report lets these pass."""
    _check_names(tag, ())
    path = Path(path)
    return _leftover(tag).fullmatch(path.name) is not None and _is_ours(path)


def check_leftovers(folder: str | os.PathLike[str], tag: str) -> None:
    """ValueError naming the manifest of a backup folder of ours in ``folder`` that cannot be read
    (not JSON, not a list of plain file names), and what to do: :func:`remove_stale` could not
    tell which files to put back. Reads only."""
    root = Path(folder)
    for token in _our_tokens(root, tag):
        backup = _backup(root, tag, token)
        if (backup / MANIFEST).is_file():
            _manifest_names(root, backup)


def _our_tokens(root: Path, tag: str) -> list[str]:
    """The tokens of the staging and backup folders of ours in ``root``; a token one of whose two
    folders is not ours (a user's folder of that name) is left out, both kept."""
    pattern = _leftover(tag)
    found: dict[str, bool] = {}
    with os.scandir(root) as entries:
        for entry in entries:
            match = pattern.fullmatch(entry.name)
            if match and entry.is_dir(follow_symlinks=False):
                ours = found.get(match.group(1), True) and _is_ours(Path(entry.path))
                found[match.group(1)] = ours
            elif match:
                found[match.group(1)] = False  # a file or a link of that name: the user's
    return sorted(token for token, ours in found.items() if ours)


def _is_ours(path: Path) -> bool:
    if path.is_symlink() or not path.is_dir():
        return False
    if (path / MARK).is_file():
        return True
    with os.scandir(path) as entries:
        return next(entries, None) is None


def _make(path: Path, tag: str) -> None:
    """Make the staging or backup folder ``path`` and mark it as ours."""
    path.mkdir()
    (path / MARK).write_text(json.dumps({"format": "ebpo-file-set", "tag": tag}), encoding="utf-8")


def _manifest_names(root: Path, backup: Path) -> list[str]:
    manifest = backup / MANIFEST
    try:
        names = json.loads(manifest.read_text(encoding="utf-8"))
        if not isinstance(names, list):
            raise ValueError(f"expected a list of file names, got {type(names).__name__}")
        _check_file_names(names)
    except (ValueError, UnicodeDecodeError) as error:
        reason = " ".join(str(error).split())[:120]
        raise ValueError(
            f"{str(manifest)!r} cannot be read ({reason}): an interrupted write left the "
            f"previous files in {str(backup)!r}; move those you want back into {str(root)!r} and "
            "delete that folder"
        ) from None
    return names


def _leftover(tag: str) -> re.Pattern[str]:
    """The names of the staging and backup folders of ``tag``; group 1 is the call's token."""
    return re.compile(rf"\.{re.escape(tag)}\.([0-9a-f]{{16}})\.(new|old)")


def _staging(root: Path, tag: str, token: str) -> Path:
    return root / f".{tag}.{token}.new"


def _backup(root: Path, tag: str, token: str) -> Path:
    return root / f".{tag}.{token}.old"


def _check_names(tag: str, names: Iterable[str]) -> None:
    if not _TAG.fullmatch(tag):
        raise ValueError(f"tag must be lower-case letters, digits and '-', got {tag!r}")
    _check_file_names(names)


def _check_file_names(names: Iterable[str]) -> None:
    for name in names:
        if not isinstance(name, str):
            raise ValueError(f"a file set holds plain file names, got {name!r}")
        if not name or name in (".", "..", MANIFEST, MARK) or "/" in name or "\0" in name:
            raise ValueError(f"a file set holds plain file names, got {name!r}")


def _stage(staging: Path, name: str, writer: Writer, root: Path) -> None:
    """Write one file into the staging folder and flush it; a storage error names the file's
    place in ``root`` (the staging folder is ours, not the user's)."""
    path = staging / name
    try:
        writer(path)
        if not path.is_file():
            raise FileNotFoundError(errno.ENOENT, f"the writer of {name!r} wrote no file", path)
        _fsync(path)
    except OSError as error:
        if error.errno in STORAGE_ERRNOS:
            error.filename, error.filename2 = os.fspath(root / name), None
        raise


def _swap(root: Path, staging: Path, backup: Path, names: list[str], everything: list[str]) -> None:
    """Move the set's existing files into ``backup``, then the new ones into place (module doc)."""
    previous: dict[str, os.stat_result] = {}
    for name in everything:
        with contextlib.suppress(FileNotFoundError):
            previous[name] = os.lstat(root / name)
            os.rename(root / name, backup / name)
    os.rename(staging / MANIFEST, backup / MANIFEST)  # from here on, the backup is complete
    for name in names:
        old = previous.get(name)
        if old is not None and stat.S_ISREG(old.st_mode):
            with contextlib.suppress(PermissionError):
                os.chmod(staging / name, stat.S_IMODE(old.st_mode))
        os.rename(staging / name, root / name)


def _roll_back(root: Path, staging: Path, backup: Path) -> None:
    """Undo an unfinished swap; the manifest's place tells how far it got. In the backup folder:
    the old files were all moved aside and new ones may be in place, so every name of the set gets
    its old file back, or is removed where it had none. In the staging folder: old files were
    being moved aside, so those in the backup go back. In neither: nothing was moved yet, or the
    swap was done. Then both folders are removed."""
    if (backup / MANIFEST).is_file():
        for name in _manifest_names(root, backup):
            if os.path.lexists(backup / name):
                os.replace(backup / name, root / name)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(root / name)
    elif (staging / MANIFEST).is_file() and backup.is_dir():
        with os.scandir(backup) as entries:
            for entry in entries:
                if entry.name != MARK and not os.path.lexists(root / entry.name):
                    os.rename(entry.path, root / entry.name)
    shutil.rmtree(backup, ignore_errors=True)
    shutil.rmtree(staging, ignore_errors=True)


def _fsync(path: Path) -> None:
    """Flush a file or a directory (its entries) to the storage; a file system that cannot sync a
    directory is no error."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        os.fsync(fd)
    except OSError as error:
        if error.errno in STORAGE_ERRNOS or not path.is_dir():
            raise
    finally:
        os.close(fd)
