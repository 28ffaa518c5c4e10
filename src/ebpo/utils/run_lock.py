"""One job at a time in a run directory: an OS file lock held for the life of the job.

    with lock_run_dir(path):      # ValueError: "... is in use by another ebpo process (pid N)"
        ...                       # the job

The lock is ``fcntl.flock`` on ``.ebpo-run.lock`` inside the directory, held by the process; the
file holds the owner's pid, for the message a second job gets. The kernel releases the lock when
the process ends, however it ends (``kill -9`` included), so a crash leaves no stale lock: the
next job takes the file over. A job that ends removes the file (and the directories it created
for it, if they are still empty). A child made with ``fork`` shares the lock while it lives.
Under a launcher (several processes of one job) only the job's main process takes the lock; the
others never touch the file (:mod:`ebpo.lab.train.job`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["LOCK", "check_not_in_use", "lock_run_dir"]

#: the lock file in a run directory; not part of the run, never counted as its content
LOCK = ".ebpo-run.lock"
#: how often a lock held by someone else is tried again (20 ms apart) before giving up
_RETRIES = 5


@contextlib.contextmanager
def lock_run_dir(path: Path, *, option: str = "output_dir") -> Iterator[None]:
    """Hold the run directory ``path`` (created if missing) for the block: an exclusive
    ``fcntl.flock`` on ``path/.ebpo-run.lock``, which holds the pid of its owner. ValueError when
    another process holds it. The kernel releases the lock when the process ends, however it ends;
    the file a killed job leaves behind is taken over by the next one. On exit the lock file is
    removed, and so are the directories this call created if they are still empty. ``option``:
    how the messages name the directory (the setting or flag the user gave it with)."""
    created = []
    missing = path
    while not (missing.exists() or missing.is_symlink()) and missing != missing.parent:
        created.append(missing)
        missing = missing.parent
    try:
        for attempt in range(3):
            path.mkdir(parents=True, exist_ok=True)
            try:
                fd = _acquire(path, option)
                break
            except FileNotFoundError:  # a job that failed at its start removed the directory
                if attempt == 2:
                    raise
    except OSError as error:
        _remove_empty(created)
        raise ValueError(
            f"{option} {str(path)!r}: cannot create its lock file ({error.strerror or error})"
        ) from error
    except BaseException:
        _remove_empty(created)
        raise
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path / LOCK)  # while still holding it: see _acquire
        os.close(fd)
        _remove_empty(created)


def _acquire(path: Path, option: str) -> int:
    """The descriptor holding the lock of ``path``. A holder removes the file before it lets go,
    so a lock taken on a file that is no longer at its name is worthless: then try again. A
    conflict is retried briefly: :func:`check_not_in_use` of a job starting at the same moment
    holds a shared lock for a few microseconds."""
    lock = path / LOCK
    for attempt in range(100):
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ValueError(f"{str(lock)!r} is not a regular file; remove it")
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if _same_file(fd, lock):
                os.ftruncate(fd, 0)
                try:
                    os.write(fd, f"{os.getpid()}\n".encode())
                except OSError:  # a full disk: leave no lock file, so no folder made for it
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(lock)  # while still holding it, as on a normal exit
                    raise
                return fd
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            if attempt >= _RETRIES:
                raise _in_use(path, holder, option) from None
            time.sleep(0.02)
            continue
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    raise _in_use(path, "unknown", option)


def check_not_in_use(path: Path, *, option: str = "output_dir") -> None:
    """Refuse at once, creating nothing, a directory whose lock another process holds."""
    try:
        fd = os.open(path / LOCK, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return  # no lock file: nobody holds it (or it cannot be read; lock_run_dir will tell)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _in_use(path, _holder(fd), option) from None
    except OSError:
        pass  # not a file one can lock: lock_run_dir will tell
    finally:
        os.close(fd)  # closing drops the shared lock taken to look


def _same_file(fd: int, path: Path) -> bool:
    try:
        here, there = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _holder(fd: int) -> str:
    text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    return text if text.isdigit() else "unknown"


def _in_use(path: Path, holder: str, option: str) -> ValueError:
    return ValueError(
        f"{option} {str(path)!r} is in use by another ebpo process (pid {holder}); "
        "wait for it to end or choose another directory"
    )


def _remove_empty(directories: list[Path]) -> None:
    for directory in directories:  # deepest first
        try:
            directory.rmdir()
        except OSError:
            return
