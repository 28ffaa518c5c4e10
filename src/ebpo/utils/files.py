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

Every check raises ``ValueError`` naming the option and what was expected; ``ebpo``'s command line
turns it into one line on stderr and exit code 2 (:func:`ebpo.cli.main`).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any, Literal

__all__ = [
    "atomic_path",
    "atomic_write",
    "check_output_path",
    "read_json",
    "same_path",
    "write_json",
]


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
    """Yield a temporary path beside ``path``; when the block ends without an exception, rename it
    to ``path`` (atomic on POSIX), otherwise delete it. Parent directories are created."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike[str], mode: str = "w", **open_kwargs: Any
) -> Iterator[IO[Any]]:
    """``open(path, mode)`` through a temporary file: readers never see a partial file, and on an
    exception the previous content of ``path`` (if any) stays as it was."""
    if mode not in ("w", "wb"):
        raise ValueError(f"mode must be 'w' or 'wb', got {mode!r}")
    if mode == "w":
        open_kwargs.setdefault("encoding", "utf-8")
    with atomic_path(path) as tmp, open(tmp, mode, **open_kwargs) as handle:
        yield handle
        handle.flush()
        os.fsync(handle.fileno())


def write_json(
    path: str | os.PathLike[str], value: Any, *, indent: int | None = 2, allow_nan: bool = False
) -> None:
    """Write ``value`` as JSON atomically. By default NaN and infinities raise ValueError: they are
    not JSON, and a state file holding them would poison whoever loads it."""
    text = json.dumps(value, indent=indent, default=str, allow_nan=allow_nan)
    with atomic_write(path) as f:
        f.write(text)


def read_json(path: str | os.PathLike[str]) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)
