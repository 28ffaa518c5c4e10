"""The folder ``prepare-data`` writes, all or nothing: every output path checked before the first
write, the parquet files staged and swapped in as one set, a user's file never replaced.

    check_outputs(out, names, links)          # ValueError: one line naming the first problem
    write_outputs(out, writers, links)        # the files as one set, then the links

What is ours in ``--out-dir``: the files that :data:`LIST_NAME` (written with them, a JSON list)
names, and a symbolic link whose target is exactly the one this command writes there (the TRL
layout's ``trl/<order>/train.parquet -> ../../dapo_math_17k.<order>.parquet``). Anything else at
an output path is the user's and refused, so is a folder or a link where a file belongs, a file or
a link to elsewhere where a folder belongs (``trl``, ``trl/file``: relative links through a link
point elsewhere), a folder on the way that cannot be written, and (:func:`check_folder`) an output
inside the installed package. The files are written by :func:`ebpo.utils.output_folder.write_report`
(a staging folder inside ``--out-dir``, marked as ours; a killed run's is cleared by the next run
while it holds the folder, a look-alike of the user's is kept) under the folder's lock; the links
come last, each swapped in by a rename, once the files are in place.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from ebpo.utils.file_sets import Writer
from ebpo.utils.files import read_json
from ebpo.utils.output_folder import holding, remove_stale_reports, write_report

__all__ = ["LIST_NAME", "TAG", "check_outputs", "our_files", "write_outputs"]

#: the list of the files a prepare-data run wrote into the folder (JSON)
LIST_NAME = ".ebpo-prepare-data.json"
#: names the hidden staging folders (ebpo.utils.file_sets)
TAG = "prepare-data"
_FORMAT = "ebpo-prepare-data"
_OPTION = "--out-dir"


def our_files(out: Path) -> set[str]:
    """The files of ``out`` that an earlier run listed in :data:`LIST_NAME` (plain names, regular
    files); none when the list is absent or not ours."""
    listed = _list_of(out / LIST_NAME)
    names = [n for n in listed or () if isinstance(n, str) and "/" not in n]
    return {n for n in names if _is_plain_file(out / n)}


def _list_of(path: Path) -> list[object] | None:
    """The names :data:`LIST_NAME` at ``path`` holds; None when it is absent or not ours."""
    try:
        listed = read_json(path) if _is_plain_file(path) else None
    except (OSError, ValueError):
        return None
    if isinstance(listed, dict) and listed.get("format") == _FORMAT:
        files = listed.get("files")
        return files if isinstance(files, list) else []
    return None


def check_outputs(out: Path, names: Iterable[str], links: Mapping[str, str]) -> None:
    """ValueError (one line, naming ``--out-dir`` and the path) unless the files ``names`` can be
    written into ``out`` and the links ``links`` (path relative to ``out`` -> target) made there
    without changing anything of the user's. Reads only."""
    ours = our_files(out) if out.is_dir() else set()
    _check_folder_on_the_way(out, out)
    listing = out / LIST_NAME
    if os.path.lexists(listing) and _list_of(listing) is None:
        raise _refusal(listing, f"is {_kind(listing)}, not prepare-data's list of the files it "
                       "wrote: move it away")  # fmt: skip
    for name in names:
        path = out / name
        if not os.path.lexists(path):
            continue
        if path.is_symlink() or not path.is_file():
            raise _refusal(path, f"is {_kind(path)}, where prepare-data writes a file")
        if name not in ours:
            raise _refusal(
                path,
                f"exists and is not a file ebpo prepare-data wrote ({LIST_NAME} does not list "
                "it): move it away, or write to another --out-dir",
            )
    for relative, target in links.items():
        path = out / relative
        for folder in reversed(path.relative_to(out).parents[:-1]):
            _check_folder_on_the_way(out / folder, out)
        if os.path.lexists(path) and not (path.is_symlink() and os.readlink(path) == target):
            raise _refusal(
                path, f"is {_kind(path)}, not prepare-data's link to {target}: move it away"
            )


def write_outputs(out: Path, writers: Mapping[str, Writer], links: Mapping[str, str]) -> list[str]:
    """Write the files ``writers`` into ``out`` as one set, listed in :data:`LIST_NAME` with the
    earlier runs' files still there, then the links; the paths written (files, then links)."""
    names = list(writers)
    with holding(
        out,
        lambda: check_outputs(out, names, links),
        option=_OPTION,
        tidy=lambda: remove_stale_reports(out, TAG, (), "prepare-data"),
    ):
        listed = sorted(our_files(out) | set(names))
        text = json.dumps({"format": _FORMAT, "version": 1, "files": listed}, indent=1)
        everything: dict[str, Writer] = {
            **writers,
            LIST_NAME: lambda path: path.write_text(text, encoding="utf-8"),
        }
        write_report(out, everything, tag=TAG, replaces=(), option=_OPTION)
        for relative, target in links.items():
            _link(out / relative, target)
    return [str(out / name) for name in names] + [str(out / r) for r in links]


def _check_folder_on_the_way(folder: Path, out: Path) -> None:
    """``folder`` (``out`` or one below it that a link goes into) is absent, or a real folder
    this process may create entries in."""
    if not os.path.lexists(folder):
        return
    if folder.is_symlink() and folder != out:
        raise _refusal(folder, f"is a symbolic link to {os.readlink(folder)!r}, where "
                       "prepare-data makes a folder (relative links inside would point "
                       "elsewhere): move it away")  # fmt: skip
    if not folder.is_dir():
        raise _refusal(folder, f"is {_kind(folder)}, where prepare-data makes a folder: move it "
                       "away")  # fmt: skip
    if not os.access(folder, os.W_OK | os.X_OK):
        raise _refusal(folder, "is a folder this process cannot write in (its permissions, or "
                       "an immutable or read-only folder)")  # fmt: skip


def _link(path: Path, target: str) -> None:
    """``path`` a symbolic link to ``target``, swapped in by a rename (an earlier run's link of
    the same target is replaced, never removed first)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.{os.getpid()}.link")
    staging.unlink(missing_ok=True)
    staging.symlink_to(target)
    os.replace(staging, path)


def _is_plain_file(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def _kind(path: Path) -> str:
    if path.is_symlink():
        return f"a symbolic link to {os.readlink(path)!r}"
    if path.is_dir():
        return "a folder"
    return "a file" if path.is_file() else "not a regular file (a pipe, a socket or a device)"


def _refusal(path: Path, what: str) -> ValueError:
    return ValueError(f"{_OPTION}: {str(path)!r} {what}")
