"""The output folder of ``ebpo compare``, written all or nothing.

Every file is first written into a temporary folder beside the target
(``.<name>.compare-XXXXXXXX``), then the folder is swapped in: the previous output folder (if
any) is renamed aside, the new one renamed to the target's name, the previous one removed. An
error or an interrupt before the swap leaves the previous report as it was and removes the
temporary folder; the swap itself is two renames.

Because the swap replaces the whole folder, the target may hold nothing but a previous report
(:func:`check_output_folder`): a folder of the user's own files, a folder inside an input run or
one holding an input run is refused before anything is read or written.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from ebpo.utils.files import check_output_path
from ebpo.utils.run_lock import LOCK

__all__ = ["REPORT_FILES", "check_output_folder", "staged_folder"]

#: what a report folder holds (fnmatch patterns); anything else makes the folder the user's
REPORT_FILES = ("compare.json", "compare.csv", "difference_*.png", "curves_*.png", LOCK)


def _inside(path: Path, folder: Path) -> bool:
    path, folder = path.resolve(), folder.resolve()
    return path == folder or folder in path.parents


def check_output_folder(out_dir: str | os.PathLike[str], run_folders: Iterable[Path]) -> Path:
    """``out_dir`` as an absolute Path with its links resolved (the folder that is swapped: a
    link to it stays a link) once it is known that writing the report there loses nothing;
    ValueError naming ``--output-dir`` otherwise. Creates and changes nothing."""
    target = check_output_path(out_dir, "--output-dir", kind="dir").resolve()
    given = os.fspath(out_dir)
    for folder in run_folders:
        if _inside(target, folder):
            raise ValueError(f"--output-dir {given!r} lies inside the input run "
                             f"{str(folder)!r}: write the report outside the runs")  # fmt: skip
        if _inside(folder, target):
            raise ValueError(f"--output-dir {given!r} holds the input run {str(folder)!r}: "
                             "the report replaces that folder; write it elsewhere")  # fmt: skip
    if target.is_dir():
        foreign = sorted(
            entry.name
            for entry in target.iterdir()
            if not (
                entry.is_file() and any(fnmatch.fnmatchcase(entry.name, p) for p in REPORT_FILES)
            )
        )
        if foreign:
            raise ValueError(
                f"--output-dir {given!r} holds files that are not an ebpo compare report "
                f"({', '.join(foreign[:4])}{' ...' if len(foreign) > 4 else ''}): the report "
                "replaces the folder; give an empty or new one"
            )
    return target


@contextlib.contextmanager
def staged_folder(target: Path) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``target``; when the block ends without an
    exception, swap it in as ``target`` (module docstring), otherwise remove it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.compare-", dir=target.parent))
    try:
        yield staging
        _swap(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _swap(staging: Path, target: Path, rename: Callable[[Path, Path], None] = os.rename) -> None:
    mode = target.stat().st_mode & 0o7777 if target.is_dir() else 0o777 & ~_umask()
    os.chmod(staging, mode)
    if not target.exists():
        rename(staging, target)
        return
    previous = Path(tempfile.mkdtemp(prefix=f".{target.name}.previous-", dir=target.parent))
    os.rmdir(previous)  # a free name beside the target
    rename(target, previous)
    try:
        rename(staging, target)
    except BaseException:
        rename(previous, target)  # the previous report stays
        raise
    shutil.rmtree(previous, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
