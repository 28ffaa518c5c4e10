"""The output folder of ``ebpo compare``: what it may hold, and which of its files a new report
replaces.

The report is written into the folder all or nothing by :func:`ebpo.utils.file_sets.write_file_set`
(tag :data:`REPORT_TAG`): the new files are staged in a hidden folder inside it and renamed into
place, and every file of the previous report — its PNGs included, whatever metrics they were of —
goes with the swap (:func:`previous_report`). Because every ``difference_*.png`` and
``curves_*.png`` there is taken for a previous report's, the folder may hold nothing but a previous
report (:func:`check_output_folder`): a folder of the user's own files (a hidden folder named as
our staging folders but without our mark included: :func:`ebpo.utils.file_sets.is_leftover`), a
folder inside an input run or one holding an input run is refused before anything is read or
written; so are a symbolic link loop (:func:`check_output_dir`) and file names longer than the
folder's file system takes (:func:`check_names_fit`).
"""

from __future__ import annotations

import errno
import fnmatch
import os
from collections.abc import Iterable
from pathlib import Path

from ebpo.utils.file_sets import check_leftovers, is_leftover
from ebpo.utils.files import check_output_path
from ebpo.utils.run_lock import LOCK

__all__ = [
    "REPORT_FILES", "REPORT_TAG", "check_names_fit", "check_output_dir", "check_output_folder",
    "previous_report",
]  # fmt: skip

#: what a report holds (fnmatch patterns); anything else in the folder makes it the user's
REPORT_FILES = ("compare.json", "compare.csv", "difference_*.png", "curves_*.png")
#: names the hidden staging folders of the report (ebpo.utils.file_sets)
REPORT_TAG = "compare"


def _inside(path: Path, folder: Path) -> bool:
    path, folder = path.resolve(), folder.resolve()
    return path == folder or folder in path.parents


def _is_report_file(entry: os.DirEntry[str]) -> bool:
    return entry.is_file() and any(fnmatch.fnmatchcase(entry.name, p) for p in REPORT_FILES)


def _is_ours(entry: os.DirEntry[str]) -> bool:
    """A report file, the run lock, or what a killed run left (cleared by the next run)."""
    if entry.name == LOCK:
        return entry.is_file()
    if is_leftover(entry.path, REPORT_TAG):
        return True
    return _is_report_file(entry)


def check_output_dir(out_dir: str | os.PathLike[str]) -> Path:
    """``--output-dir`` checked as a place for a folder (:func:`check_output_path`), a symbolic
    link loop on its way refused; ValueError naming it. Reads only."""
    given = os.fspath(out_dir)
    try:
        os.stat(given)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise ValueError(f"--output-dir {given!r} is, or lies below, a symbolic link loop: "
                             "give a folder") from None  # fmt: skip
    try:
        return check_output_path(out_dir, "--output-dir", kind="dir").resolve()
    except (RuntimeError, OSError) as error:  # a loop that stat did not meet
        raise ValueError(f"--output-dir {given!r} cannot be resolved ({error})") from None


def check_names_fit(out_dir: Path, names: Iterable[str]) -> None:
    """ValueError naming the first of ``names`` (files of the report) that the file system of
    ``out_dir`` cannot hold: a name longer than its limit (with the temporary file's suffix), or
    a path inside the staging folder longer than its limit for paths. Reads only."""
    existing = out_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    name_max, path_max = (_limit(existing, key, default) for key, default in
                          (("PC_NAME_MAX", 255), ("PC_PATH_MAX", 4096)))  # fmt: skip
    staging = f".{REPORT_TAG}.{'0' * 16}.new"
    for name in names:
        longest = len(f".{name}.01234567.tmp".encode())  # a temporary file beside it
        if longest > name_max:
            raise ValueError(
                f"--output-dir {str(out_dir)!r}: the report's file {name!r} needs file names of "
                f"{longest} bytes, longer than its file system takes ({name_max}); shorten the "
                "metric's name or compare with --no-plots"
            )
        path = len(os.fsencode(out_dir / staging / f".{name}.01234567.tmp"))
        if path >= path_max:
            raise ValueError(f"--output-dir {str(out_dir)!r}: the report's paths would be "
                             f"{path} bytes, longer than its file system takes ({path_max}); "
                             "write it to a shorter path")  # fmt: skip


def _limit(folder: Path, key: str, default: int) -> int:
    try:
        return os.pathconf(folder, key)
    except (OSError, ValueError):
        return default


def check_output_folder(out_dir: str | os.PathLike[str], run_folders: Iterable[Path]) -> Path:
    """``out_dir`` as an absolute Path with its links resolved (a link to the folder stays a link:
    the report is written into its target) once it is known that writing the report there loses
    nothing; ValueError naming ``--output-dir`` otherwise. Creates and changes nothing."""
    target = check_output_dir(out_dir)
    given = os.fspath(out_dir)
    for folder in run_folders:
        if _inside(target, folder):
            raise ValueError(f"--output-dir {given!r} lies inside the input run "
                             f"{str(folder)!r}: write the report outside the runs")  # fmt: skip
        if _inside(folder, target):
            raise ValueError(f"--output-dir {given!r} holds the input run {str(folder)!r}: "
                             "the report would replace files among the runs; write it "
                             "elsewhere")  # fmt: skip
    if target.is_dir():
        with os.scandir(target) as entries:
            foreign = sorted(entry.name for entry in entries if not _is_ours(entry))
        if foreign:
            raise ValueError(
                f"--output-dir {given!r} holds files that are not an ebpo compare report "
                f"({', '.join(foreign[:4])}{' ...' if len(foreign) > 4 else ''}): the report "
                "replaces every report file there; give an empty or new folder"
            )
        check_leftovers(target, REPORT_TAG)
    return target


def previous_report(folder: Path) -> list[str]:
    """The names of the files of a previous report in ``folder`` (none where it does not exist):
    the new report replaces them all, so that no PNG of a metric it does not compare remains."""
    if not folder.is_dir():
        return []
    with os.scandir(folder) as entries:
        return sorted(entry.name for entry in entries if _is_report_file(entry))
