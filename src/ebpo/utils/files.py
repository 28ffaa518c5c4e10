"""A user's files are sacred: output paths are checked before anything slow runs, and every file
is written to a temporary file in its own directory and renamed into place, so an error or an
interrupt leaves either the old file or the new one, never half of one.

    from ebpo.utils.files import atomic_path, atomic_write, check_output_path, write_json
    out = check_output_path(args.output, "--output", kind="file", inputs=[args.input])
    with atomic_write(out) as f:          # text; atomic_write(out, "wb") for bytes
        f.write(...)
    with atomic_path(out) as tmp:         # for writers that want a path (pandas, matplotlib)
        frame.to_parquet(tmp)
    write_json(run_dir / "results.json", result)

The replaced file keeps its permission bits; a new file gets those of ``open(path, "w")`` (0o666
minus the umask); a write to a symbolic link replaces the link's target, not the link; a file with
other hard links gets a new inode under this name only, the other names keep the old content (see
:func:`atomic_path`).

Every check raises ``ValueError`` naming the option and what was expected; ``ebpo``'s command line
turns it into one line on stderr and exit code 2 (:func:`ebpo.cli.main`). A full or failing disk
raises an ``OSError`` naming the file; :func:`storage_error` makes it one line for a command.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any, Literal

from ebpo.utils.structured_input import read_json_file

__all__ = [
    "STORAGE_ERRNOS",
    "atomic_path",
    "atomic_write",
    "check_output_path",
    "hard_links",
    "read_json",
    "resolve_target",
    "same_path",
    "storage_error",
    "write_json",
]

#: ``errno`` values of a storage that cannot take a write: disk full, quota exceeded, file too
#: large, read-only file system, I/O error.
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO})


def check_output_path(
    path: str | os.PathLike[str],
    option: str,
    *,
    kind: Literal["file", "dir"] = "file",
    inputs: Iterable[str | os.PathLike[str]] = (),
) -> Path:
    """Return ``path`` as a Path if something of ``kind`` can be written there; raise ValueError
    (naming ``option``) otherwise. Creates and changes nothing.

    Refused: an empty path; a file where a directory is wanted and the reverse; a path below a
    file (``/dev/null/out``); a directory in the way that is not writable; a path that is one of
    ``inputs`` (writing the output would destroy the input it is made from).
    """
    text = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
    if not text or not text.strip():
        raise ValueError(f"{option} must be a non-empty path, got {path!r}")
    target = Path(text).expanduser()
    if target.exists():
        if kind == "file" and target.is_dir():
            raise ValueError(f"{option} {text!r} is a directory, expected a file path")
        if kind == "dir" and not target.is_dir():
            raise ValueError(f"{option} {text!r} is a file, expected a directory")
        if kind == "file" and not target.is_file():
            raise ValueError(f"{option} {text!r} is not a regular file (a device or a pipe?)")
    existing = target if target.is_dir() else target.parent
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(
            f"{option} {text!r} lies below {str(existing)!r}, which is not a directory"
        )
    if kind == "file" and target.is_symlink():  # the write lands in the target's directory
        existing = resolve_target(target).parent
        while not existing.exists():
            existing = existing.parent
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{option} {text!r}: directory {str(existing)!r} is not writable")
    for source in inputs:
        if same_path(target, source):
            raise ValueError(
                f"{option} {text!r} is the input file itself; write to another path "
                "(the input would be lost on an error)"
            )
    return target


def same_path(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two paths name the same file (links resolved; False when either does not exist
    and their resolved spellings differ)."""
    pa, pb = Path(a).expanduser(), Path(b).expanduser()
    try:
        if pa.exists() and pb.exists():
            return os.path.samefile(pa, pb)
    except OSError:
        pass
    return pa.resolve() == pb.resolve()


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``'s file; when the block ends without an exception,
    rename it to that file (atomic on POSIX), otherwise delete it. Parent directories are created.

    What the new file keeps of the old one:

    * **mode** — an existing file's permission bits (and, where allowed, its owner and group) are
      copied to the new one; a new file gets ``0o666`` minus the umask, as ``open(path, "w")``
      would give it;
    * **symbolic links** — ``path`` is resolved first: a link stays a link and its target gets the
      new content (the temporary file lives in the target's directory, renamed over the target);
    * **hard links** — not kept: the rename gives the name a new inode, so the file's other names
      (``st_nlink > 1``) keep the old content. That is the price of never showing a half-written
      file; :func:`hard_links` tells a caller that wants to warn about it.

    An ``OSError`` of a full or failing storage (:data:`STORAGE_ERRNOS`) raised in the block, on
    ``fsync`` or on the rename names ``path`` (its ``filename``); :func:`storage_error` turns it
    into a one-line ``ValueError`` for a command line. The previous file is then unchanged.
    """
    target = resolve_target(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        previous = _stat_or_none(target)
        tmp = _create_temporary(target)
    except OSError as error:
        _name_target(error, path)
        raise
    try:
        yield tmp
        if previous is not None:
            _copy_mode(previous, tmp)
        _fsync_file(tmp)
        os.replace(tmp, target)
    except OSError as error:
        _name_target(error, path, tmp)
        raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike[str], mode: str = "w", **open_kwargs: Any
) -> Iterator[IO[Any]]:
    """``open(path, mode)`` through a temporary file (:func:`atomic_path`): readers never see a
    partial file, on an exception the previous content of ``path`` (if any) stays as it was, and
    the new file keeps the old one's mode and writes through a symbolic link (hard links are not
    kept: see :func:`atomic_path`)."""
    if mode not in ("w", "wb"):
        raise ValueError(f"mode must be 'w' or 'wb', got {mode!r}")
    if mode == "w":
        open_kwargs.setdefault("encoding", "utf-8")
    with atomic_path(path) as tmp, open(tmp, mode, **open_kwargs) as handle:
        yield handle
        handle.flush()


def resolve_target(path: str | os.PathLike[str]) -> Path:
    """The file a write to ``path`` changes: ``path`` with every symbolic link resolved (that of a
    dangling link is its missing target; ``~`` is expanded)."""
    return Path(os.path.realpath(Path(path).expanduser()))


def hard_links(path: str | os.PathLike[str]) -> int:
    """How many other names (hard links) the existing file ``path`` has; they keep the old content
    when :func:`atomic_path` replaces it. 0 for a missing file."""
    info = _stat_or_none(resolve_target(path))
    return 0 if info is None else max(info.st_nlink - 1, 0)


def storage_error(error: BaseException) -> ValueError | None:
    """A one-line ValueError for an OSError of a full or failing storage (:data:`STORAGE_ERRNOS`:
    disk full, quota, file too large, read-only file system, I/O error), naming the file; None for
    any other error. The ``ebpo`` commands raise it so that a full disk ends in one line and exit
    code 2; the writes of this module leave the previous file as it was."""
    if not isinstance(error, OSError) or error.errno not in STORAGE_ERRNOS:
        return None
    reason = error.strerror or os.strerror(error.errno or 0)
    where = f"cannot write {error.filename!r}" if error.filename else "cannot write"
    return ValueError(f"{where}: {reason}; the previous file, if any, is unchanged")


def _stat_or_none(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except FileNotFoundError:
        return None


def _create_temporary(target: Path) -> Path:
    """A new empty file beside ``target``, created with mode 0o666 so that the kernel applies the
    umask (``tempfile.mkstemp`` always gives 0o600)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        name = target.parent / f".{target.name}.{secrets.token_hex(4)}.tmp"
        try:
            os.close(os.open(name, flags, 0o666))
        except FileExistsError:
            continue
        return name
    raise FileExistsError(errno.EEXIST, "no free temporary file name", str(target.parent))


def _copy_mode(previous: os.stat_result, tmp: Path) -> None:
    """Give ``tmp`` the permission bits (and, if allowed, the owner and group) of the file it
    replaces."""
    if previous.st_uid != os.geteuid() or previous.st_gid != os.getegid():
        with contextlib.suppress(OSError):  # allowed for root, or a group the user is in
            os.chown(tmp, previous.st_uid, previous.st_gid)
    try:
        os.chmod(tmp, stat.S_IMODE(previous.st_mode))
    except OSError as error:  # a file system without modes (vfat, some FUSE): the umask's mode
        if error.errno in STORAGE_ERRNOS:
            raise


def _fsync_file(path: Path) -> None:
    """Flush ``path``'s data to the storage before the rename makes it the file: after a crash the
    name holds the old content or the whole new one, never an empty file."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _name_target(error: OSError, path: str | os.PathLike[str], tmp: Path | None = None) -> None:
    """Make a storage error name the file being written (``path``) instead of the temporary file,
    or instead of nothing (a failed ``write`` names no file)."""
    if error.errno in STORAGE_ERRNOS and error.filename in (None, str(tmp) if tmp else None):
        error.filename = os.fspath(path)
        error.filename2 = None


def write_json(
    path: str | os.PathLike[str], value: Any, *, indent: int | None = 2, allow_nan: bool = False
) -> None:
    """Write ``value`` as JSON atomically. By default NaN and infinities raise ValueError: they are
    not JSON, and a state file holding them would poison whoever loads it."""
    text = json.dumps(value, indent=indent, default=str, allow_nan=allow_nan)
    with atomic_write(path) as f:
        f.write(text)


def read_json(path: str | os.PathLike[str]) -> Any:
    """The JSON file ``path`` (:func:`ebpo.utils.structured_input.read_json_file`: its size, depth
    and repeated keys bounded); ValueError for its content, OSError when it cannot be read."""
    return read_json_file(path)
