"""The one output-folder guard of ``ebpo train``, ``grpo``, ``replay``, ``compare`` and
``prepare-data``; each command says only what marks a folder of its kind (a run's manifest, TRL's
files, a report's names, the list of the files it wrote).

    out = check_folder(args.output_dir, "--output-dir")  # no file, loop or dead link there
    check_apart(out, inputs, option="--output-dir")      # not an input, nor around one
    with holding(out, decide, option="--output-dir", tidy=tidy):  # one command at a time
        write_report(out, writers, tag="replay", replaces=NAMES, option="--output-dir")

Ours in a folder: our lock (:mod:`ebpo.utils.run_lock`) and the marked leftovers of an interrupted
:func:`write_report` (:mod:`ebpo.utils.file_sets`; :func:`remove_stale_reports`); the rest is
:func:`entries_of`. A refusal is a one-line ValueError naming ``option`` and changes nothing.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TypeVar

from ebpo.utils.file_sets import Writer, is_leftover, remove_stale, write_file_set
from ebpo.utils.files import STORAGE_ERRNOS, check_output_path
from ebpo.utils.run_lock import LOCK, check_not_in_use, lock_run_dir

__all__ = [
    "check_apart", "check_folder", "check_names_fit", "entries_of", "holding",
    "remove_stale_reports", "write_report",
]  # fmt: skip

T = TypeVar("T")
#: the installed package: no output goes there (a reinstall loses it; it would change the package)
PACKAGE = Path(__file__).resolve().parents[1]


def check_folder(path: str | os.PathLike[str], option: str) -> Path:
    """``path`` (``~`` expanded) once a folder can be written there (:func:`check_output_path`):
    no symbolic link loop on its way, not a link to nothing, not inside the installed package."""
    given = os.fspath(path)
    try:
        os.stat(given)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise ValueError(f"{option} {given!r} is, or lies below, a symbolic link loop: "
                             "give a folder") from None  # fmt: skip
    target = check_output_path(path, option, kind="dir")
    resolved = Path(os.path.realpath(target))
    if resolved == PACKAGE or PACKAGE in resolved.parents:
        raise ValueError(f"{option} {given!r} lies inside the installed ebpo package "
                         f"({str(PACKAGE)!r}): write elsewhere")  # fmt: skip
    if target.is_symlink() and not target.exists():
        raise ValueError(f"{option} {given!r} is a symbolic link to {os.readlink(target)!r}, "
                         "which does not exist")  # fmt: skip
    return target


def entries_of(folder: Path, tag: str | None = None) -> list[str]:
    """The sorted names in ``folder`` (if it is one) but our lock file and, with ``tag``, what an
    interrupted :func:`write_report` of ``tag`` left (:func:`ebpo.utils.file_sets.is_leftover`)."""
    if not folder.is_dir():
        return []
    with os.scandir(folder) as entries:
        ours = (e for e in entries if not (e.name == LOCK and e.is_file()))
        return sorted(e.name for e in ours if tag is None or not is_leftover(e.path, tag))


def check_apart(folder: Path, inputs: Iterable[Path], *, option: str, noun: str = "input") -> None:
    """``folder`` may not be one of ``inputs`` (those that exist), hold one or lie inside one,
    links resolved: the output would mix with, or replace, what it is made from."""
    target, given = folder.resolve(), str(folder)
    for path in (p for p in inputs if p.exists()):
        source = path.resolve()
        if target == source:
            raise ValueError(f"{option} {given!r} is the {noun} {str(path)!r}: write the report "
                             "elsewhere")  # fmt: skip
        if source in target.parents:
            raise ValueError(f"{option} {given!r} lies inside the {noun} {str(path)!r}: write "
                             f"the report outside the {noun}s")  # fmt: skip
        if target in source.parents:
            raise ValueError(f"{option} {given!r} holds the {noun} {str(path)!r}: write the "
                             "report elsewhere (it would mix with the run's files)")  # fmt: skip


@contextlib.contextmanager
def holding(
    folder: Path,
    decide: Callable[[], T],
    *,
    option: str = "output_dir",
    tidy: Callable[[], object] | None = None,
) -> Iterator[T]:
    """Hold ``folder`` for the block, giving what ``decide`` (reads only) says of it: refused at
    once, creating nothing, when another process holds it; ``decide`` runs before the lock and
    again under it (the folder may have changed); then ``tidy`` clears what a killed run left."""
    check_not_in_use(folder, option=option)
    decide()
    with lock_run_dir(folder, option=option):
        decision = decide()
        if tidy is not None:
            tidy()
        yield decision


def remove_stale_reports(folder: Path, tag: str, names: Iterable[str], command: str) -> None:
    """:func:`ebpo.utils.file_sets.remove_stale` under the lock, saying how much it removed."""
    stale = remove_stale(folder, tag, names)
    if stale:
        print(f"removed {len(stale)} temporary file(s) left by an interrupted {command}")


def check_names_fit(
    folder: Path, names: Iterable[str], *, tag: str, option: str, hint: str
) -> None:
    """ValueError naming the first of ``names`` (of a :func:`write_report` of ``tag``) that the
    file system of ``folder`` cannot hold, with the temporary file's suffix or inside the staging
    folder; ``hint``: what to do about a long name."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    name_max, path_max = (_limit(existing, key, default) for key, default in
                          (("PC_NAME_MAX", 255), ("PC_PATH_MAX", 4096)))  # fmt: skip
    staging = f".{tag}.{'0' * 16}.new"
    for name in names:
        longest = len(f".{name}.01234567.tmp".encode())  # a temporary file beside it
        if longest > name_max:
            raise ValueError(
                f"{option} {str(folder)!r}: the report's file {name!r} needs file names of "
                f"{longest} bytes, longer than its file system takes ({name_max}); {hint}"
            )
        path = len(os.fsencode(folder / staging / f".{name}.01234567.tmp"))
        if path >= path_max:
            raise ValueError(f"{option} {str(folder)!r}: the report's paths would be "
                             f"{path} bytes, longer than its file system takes ({path_max}); "
                             "write it to a shorter path")  # fmt: skip


def _limit(folder: Path, key: str, default: int) -> int:
    try:
        return os.pathconf(folder, key)
    except (OSError, ValueError):
        return default


def write_report(
    folder: Path, writers: Mapping[str, Writer], *, tag: str, replaces: Iterable[str], option: str
) -> list[Path]:
    """:func:`ebpo.utils.file_sets.write_file_set` (the previous report's files, ``replaces``, all
    replaced or none); a full disk is a one-line ValueError naming ``option`` and the file."""
    try:
        return write_file_set(folder, writers, tag=tag, replaces=replaces)
    except OSError as error:
        if error.errno not in STORAGE_ERRNOS:
            raise
        reason = error.strerror or os.strerror(error.errno or 0)
        where = f"cannot write {error.filename!r}" if error.filename else "cannot write"
        raise ValueError(
            f"{option} {str(folder)!r}: {where}: {reason}; nothing was changed there "
            "(the previous report, if any, is whole)"
        ) from error
