"""ebpo.utils.run_lock: one job at a time in a run directory (issue #21 item 2). The lock is an OS
lock held by a process: a second holder is refused with the first one's pid, and a killed holder
(SIGKILL) leaves a lock the next job takes. The holders here are real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ebpo.utils.run_lock import LOCK, check_not_in_use, lock_run_dir

HOLD = """
import sys, time
from pathlib import Path
from ebpo.utils.run_lock import lock_run_dir
with lock_run_dir(Path(sys.argv[1])):
    print("locked", flush=True)
    time.sleep(600)
"""


@pytest.fixture
def holder(tmp_path):
    """Start a process that holds the lock of ``tmp_path / 'run'``; yields the Popen."""
    started: list[subprocess.Popen] = []

    def start(path: Path) -> subprocess.Popen:
        process = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True
        )
        started.append(process)
        assert process.stdout is not None and process.stdout.readline().strip() == "locked"
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait()


def test_the_lock_creates_the_directory_and_leaves_nothing_behind(tmp_path):
    path = tmp_path / "runs" / "a"
    with lock_run_dir(path):
        assert path.is_dir() and (path / LOCK).read_text() == f"{os.getpid()}\n"
    assert not (tmp_path / "runs").exists()  # created for the job, empty again: removed
    with lock_run_dir(path):
        (path / "run.json").write_text("{}")
    assert sorted(p.name for p in path.iterdir()) == ["run.json"]  # the lock file went


def test_a_second_holder_in_the_same_process_is_refused(tmp_path):
    refused = pytest.raises(ValueError, match=r"in use by another ebpo process")
    with lock_run_dir(tmp_path), refused, lock_run_dir(tmp_path):
        pass


def test_a_lock_held_by_another_process_is_refused_with_its_pid(tmp_path, holder):
    path = tmp_path / "run"
    process = holder(path)
    message = rf"output_dir '{path}' is in use by another ebpo process \(pid {process.pid}\)"
    with pytest.raises(ValueError, match=message):
        check_not_in_use(path)  # the early check creates nothing
    with pytest.raises(ValueError, match=message), lock_run_dir(path):
        pass
    assert (path / LOCK).read_text() == f"{process.pid}\n"  # the holder's file is untouched


def test_a_killed_holder_leaves_a_lock_the_next_job_takes(tmp_path, holder):
    path = tmp_path / "run"
    process = holder(path)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert (path / LOCK).exists()  # the file stays; the kernel dropped the lock
    check_not_in_use(path)
    with lock_run_dir(path):
        assert (path / LOCK).read_text() == f"{os.getpid()}\n"


def test_a_lock_file_that_is_a_symlink_is_not_followed(tmp_path):
    precious = tmp_path / "precious.txt"
    precious.write_text("mine")
    path = tmp_path / "run"
    path.mkdir()
    (path / LOCK).symlink_to(precious)
    with pytest.raises(ValueError, match=r"cannot create its lock file"), lock_run_dir(path):
        pass
    assert precious.read_text() == "mine" and (path / LOCK).is_symlink()
