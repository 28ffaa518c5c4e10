"""``ebpo.commands.grpo.launcher.die_with_launcher``: a process ``ebpo grpo`` launched dies with its
launcher, however the launcher ends; outside a launch nothing changes. Real processes, no model (the
2-process ``ebpo grpo`` launch killed with ``kill -9`` is in tests/hostile/test_grpo_run_dir.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("trl")

from ebpo.commands.grpo.launcher import (  # noqa: E402
    LAUNCHED_ENV,
    LAUNCHER_PID_ENV,
    die_with_launcher,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

#: a rank: asks to die with its launcher, says it is up, then would live for 10 minutes
RANK = """\
import sys, time
from pathlib import Path
from ebpo.commands.grpo.launcher import die_with_launcher
die_with_launcher()
Path(sys.argv[1]).write_text("up")
time.sleep(600)
"""
#: a launcher: starts the rank (in its own session, as torchrun does) with the launch's environment
#: (the launcher's pid: its own, or the one given), says the rank's pid, then waits
LAUNCHER = """\
import os, subprocess, sys, time
pid = sys.argv[2] if sys.argv[2].isdigit() else str(os.getpid())
env = {**os.environ, "LAUNCHED": "1", "LAUNCHER_PID": pid}
rank = subprocess.Popen([sys.executable, "-c", sys.argv[3], sys.argv[1]], env=env,
                        start_new_session=True)
print(rank.pid, flush=True)
time.sleep(600)
""".replace("LAUNCHED", LAUNCHED_ENV, 1).replace("LAUNCHER_PID", LAUNCHER_PID_ENV, 1)


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def wait_until(condition, what: str, patience: float = 120) -> None:
    """Poll ``condition``; fail after ``patience`` seconds (a bound for a loaded machine)."""
    deadline = time.monotonic() + patience
    while not condition():
        assert time.monotonic() < deadline, f"no {what} after {patience} s"
        time.sleep(0.1)


@pytest.fixture
def cleanup():
    pids: list[int] = []
    yield pids
    for pid in pids:
        if running(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_rank_dies_with_its_launcher_killed_with_sigkill(tmp_path, cleanup):
    flag = tmp_path / "up"
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(flag), "self", RANK],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    rank = int(launcher.stdout.readline())
    cleanup += [launcher.pid, rank]
    wait_until(flag.exists, "rank up")
    assert running(rank)
    launcher.kill()
    launcher.wait()
    wait_until(lambda: not running(rank), "end of the rank")


def test_a_rank_whose_launcher_is_gone_ends_at_once(tmp_path, cleanup):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that no process has any more
    flag = tmp_path / "up"
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(flag), str(gone.pid), RANK],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    rank = int(launcher.stdout.readline())
    cleanup += [launcher.pid, rank]
    wait_until(lambda: not running(rank), "end of the rank")
    assert not flag.exists()  # it never got to say it was up
    assert running(launcher.pid)


def test_outside_a_launch_nothing_changes(monkeypatch):
    monkeypatch.delenv(LAUNCHED_ENV, raising=False)
    die_with_launcher({LAUNCHER_PID_ENV: "1"})  # not launched by ebpo grpo: no request
    die_with_launcher({LAUNCHED_ENV: "1"})  # no launcher pid: no request
    assert running(os.getpid())
