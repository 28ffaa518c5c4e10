"""``ebpo replay``'s output folder under real processes: a full disk (a real tmpfs where this machine
lets the test mount one, and ENOSPC injected at every file of the report in-process), two replays
on one folder, ``kill -9`` while replaying, while writing and in the middle of the swap, and the
temporary files an interrupted run leaves. The report in the folder is always one run's, whole:
the new one, or the previous one byte for byte; nothing a failed run created is left behind."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ebpo.analysis.replay.plots import PLOTS
from ebpo.utils import file_sets, output_folder
from ebpo.utils.run_lock import LOCK
from tests.hostile.harness import CliResult, assert_user_error, run_cli, snapshot, tiny_tmpfs

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "replay" / "v1"
REPORT = ("replay.json", "replay.csv", *PLOTS)
R = r"^ebpo replay: error: "

#: ``ebpo replay`` that stops at a point named by argv[3] until the file argv[2] exists, touching
#: argv[1] when it gets there: "replay" (the folder held, before the first step), "write-1" (the
#: first file of the report written into the staging folder), "rename-N" (before the N-th rename
#: of the swap)
PAUSED = """
import os, sys, time
from pathlib import Path
ready, go, where = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
def pause():
    ready.touch()
    while not go.exists():
        time.sleep(0.05)
if where == "replay":
    from ebpo.commands import replay as command
    real_steps = command.replay_steps
    def replay_steps(*args, **kwargs):
        pause()
        return real_steps(*args, **kwargs)
    command.replay_steps = replay_steps
elif where == "write-1":
    from ebpo.utils import file_sets
    real_stage = file_sets._stage
    def stage(*args):
        real_stage(*args)
        pause()
    file_sets._stage = stage
else:
    from ebpo.utils import file_sets
    count, real_rename, at = [0], os.rename, int(where.split("-")[1])
    def rename(a, b):
        if ".replay." in os.fspath(a) + os.fspath(b):  # the swap's renames only
            count[0] += 1
            if count[0] == at:
                pause()
        real_rename(a, b)
    file_sets.os.rename = rename
from ebpo.cli import main
sys.exit(main(sys.argv[4:]))
"""


def ebpo(cwd: Path, *argv: str, paused_at: str = "") -> subprocess.Popen:
    """``ebpo *argv`` as a process of its own (paused at ``paused_at``: see :data:`PAUSED`)."""
    env = {**os.environ, "EBPO_CACHE": str(cwd / ".cache")}
    env.pop("EBPO_DEBUG", None)
    head = ["-m", "ebpo.cli"]
    if paused_at:
        head = ["-c", PAUSED, str(cwd / "ready"), str(cwd / "go"), paused_at]
    return subprocess.Popen(
        [sys.executable, *head, *argv],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def result_of(process: subprocess.Popen, timeout: float = 300) -> CliResult:
    out, err = process.communicate(timeout=timeout)
    return CliResult(process.returncode, out, err)


def wait_ready(process: subprocess.Popen, ready: Path) -> None:
    deadline = time.monotonic() + 180
    while not ready.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the paused replay never got to its pause"
        time.sleep(0.05)


@pytest.fixture
def processes():
    started: list[subprocess.Popen] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.communicate()


@pytest.fixture(scope="module")
def earlier_report(tmp_path_factory) -> Path:
    """A report of ``ebpo``'s replay of the fixture, made once for the module."""
    out = tmp_path_factory.mktemp("earlier") / "out"
    done = run_cli(["replay", str(FIXTURES), "--output-dir", str(out), "--estimators", "ebpo"])
    assert done.code == 0, done.err
    return out


@pytest.fixture
def first_report(earlier_report):
    """``first_report(tmp)``: the earlier report copied to ``tmp/out``; its snapshot."""

    def copy(tmp: Path) -> dict[str, str]:
        shutil.copytree(earlier_report, tmp / "out")
        return snapshot(tmp / "out")

    return copy


def assert_whole_new_report(out: Path, old: dict[str, str], estimators: list[str]) -> None:
    """Every file of the report is there and none is the old one; nothing else of ours."""
    now = snapshot(out)
    assert sorted(now) == sorted(REPORT), sorted(now)
    assert all(now[name] != old[name] for name in REPORT)
    assert f'"{estimators[-1]}"' in (out / "replay.json").read_text()


# ---------------------------------------------------------------------- a full disk
@pytest.mark.parametrize("failing", REPORT)
def test_a_full_disk_at_any_file_keeps_the_previous_report(
    tmp_path, monkeypatch, failing, first_report
):
    """ENOSPC injected in-process when the report's file ``failing`` is written (half of it on
    the disk): one line, exit 2, and the folder is the previous run's, byte for byte."""
    monkeypatch.delenv("EBPO_DEBUG", raising=False)
    old = first_report(tmp_path)
    real = output_folder.write_file_set

    def write_file_set(folder, writers, **kwargs):
        def full(path, write=writers[failing]):
            write(path)
            with open(path, "r+b") as handle:
                handle.truncate(os.path.getsize(path) // 2)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        return real(folder, {**writers, failing: full}, **kwargs)

    monkeypatch.setattr(output_folder, "write_file_set", write_file_set)
    argv = ["replay", str(FIXTURES), "--output-dir", str(tmp_path / "out")]
    result = run_cli([*argv, "--estimators", "ebpo_within,jspo_plus_plus"])
    assert_user_error(
        result,
        R + rf"--output-dir '.*out': cannot write '.*out/{failing}': No space left on device; "
        r"nothing was changed there \(the previous report, if any, is whole\)$",
        label=failing,
    )
    assert snapshot(tmp_path / "out") == old


def fill(disk: Path, leave: int) -> Path:
    """Fill the file system of ``disk`` with one file, then leave ``leave`` bytes free."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0" * 4096)
        os.ftruncate(fd, max(os.fstat(fd).st_size - leave, 0))
    finally:
        os.close(fd)
    return filler


@pytest.mark.slow  # three interpreters importing torch on a shared CPU
@pytest.mark.skipif(
    shutil.which("mount") is None or os.geteuid() != 0, reason="mounting a tmpfs needs root"
)
def test_a_real_full_disk_keeps_the_previous_report_and_leaves_nothing(tmp_path, first_report):
    """A 1 MiB tmpfs holding an earlier report, then filled to ~80 KB free (the hostile round's
    case): a replay into the same folder, and one into a new folder below it, each end in one line
    and exit 2; the old report is byte for byte the old one, no temporary file, lock or folder of
    the failed runs is left. Once there is space, the same replay replaces the whole report."""
    with tiny_tmpfs(tmp_path / "small", "1m") as small:
        old = first_report(small)
        filler = fill(small, leave=80_000)
        disk_before = snapshot(small)
        argv = ["replay", str(FIXTURES), "--estimators", "ebpo_within,jspo_plus_plus"]
        failed = result_of(ebpo(tmp_path, *argv, "--output-dir", str(small / "out")))
        assert_user_error(
            failed,
            R + r"--output-dir '.*small/out': cannot write '.*small/out/[a-z_]+\.(png|json|csv)': "
            r"No space left on device; nothing was changed there",
            label="full disk",
        )
        assert snapshot(small) == disk_before
        assert snapshot(small / "out") == old
        fill(small, leave=0)
        before_new = snapshot(small)
        new = result_of(ebpo(tmp_path, *argv, "--output-dir", str(small / "new" / "deeper")))
        assert new.code == 2 and "No space left on device" in new.err, new.err
        assert snapshot(small) == before_new  # no empty folders new/ and new/deeper
        filler.unlink()
        done = result_of(ebpo(tmp_path, *argv, "--output-dir", str(small / "out")))
        assert done.code == 0, done.err
        assert_whole_new_report(small / "out", old, ["ebpo_within", "jspo_plus_plus"])


# ---------------------------------------------------------------------- one replay per folder
@pytest.mark.slow  # four interpreters importing torch on a shared CPU
def test_a_second_replay_into_a_folder_in_use_exits_2_naming_the_first(
    tmp_path, processes, first_report
):
    old = first_report(tmp_path)
    first = ebpo(
        tmp_path,
        *("replay", str(FIXTURES), "--output-dir", "out", "--estimators", "ebpo_within"),
        paused_at="replay",
    )
    processes.append(first)
    wait_ready(first, tmp_path / "ready")
    assert (tmp_path / "out" / LOCK).read_text().strip() == str(first.pid)
    others = [
        ebpo(tmp_path, "replay", str(FIXTURES), "--output-dir", out, "--no-plots")
        for out in ("out", "./out/", str(tmp_path / "out"))
    ]
    for other in others:
        assert_user_error(
            result_of(other),
            R + rf"--output-dir '.*out/?' is in use by another ebpo process \(pid {first.pid}\); "
            "wait for it to end or choose another directory$",
            label="second replay",
        )
    (tmp_path / "go").touch()
    done = result_of(first)
    assert done.code == 0, done.err
    assert_whole_new_report(tmp_path / "out", old, ["ebpo_within"])  # the first's, whole
    assert not (tmp_path / "out" / LOCK).exists()


# ---------------------------------------------------------------------- kill -9
@pytest.mark.slow  # an interpreter importing torch per kill point, on a shared CPU
@pytest.mark.parametrize("where", ["replay", "write-1", "rename-2", "rename-9"])
def test_a_killed_replay_leaves_the_old_report_and_the_next_run_cleans_up(
    tmp_path, processes, where, first_report
):
    """Killed before writing, after the first file of the report, with part of the old report
    moved aside, and with part of the new one in place: the next run — even one that fails on a
    bad row — finds the old report whole and removes every temporary file and folder of ours;
    the user's files that look like ours stay."""
    old = first_report(tmp_path)
    for name in (".replay.json.tmp", ".replay.json.zzzzzzzz.tmp", ".replay.0123.new", "notes"):
        (tmp_path / "out" / name).write_text("the user's\n")
    old = snapshot(tmp_path / "out")
    argv = ("replay", str(FIXTURES), "--output-dir", "out", "--estimators", "ebpo_within")
    killed = ebpo(tmp_path, *argv, paused_at=where)
    processes.append(killed)
    wait_ready(killed, tmp_path / "ready")
    if where.startswith("rename"):  # the swap has begun: the folder holds a mix at this moment
        assert snapshot(tmp_path / "out") != old
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    leftovers = [p.name for p in (tmp_path / "out").iterdir() if p.name.startswith(".replay.")]
    if where != "replay":
        assert any(len(n) == len(".replay.0123456789abcdef.new") for n in leftovers), leftovers
    # a next run that fails at the last step's bad row: the folder is the old report again
    bad = tmp_path / "bad"
    shutil.copytree(FIXTURES, bad)
    (bad / "10.jsonl").write_text((bad / "10.jsonl").read_text() + '{"uid": "x_0_0"}\n')
    failed = result_of(ebpo(tmp_path, "replay", str(bad), "--output-dir", "out"))
    assert failed.code == 2 and "10.jsonl: line" in failed.err, failed.err
    assert snapshot(tmp_path / "out") == old
    done = result_of(ebpo(tmp_path, *argv))
    assert done.code == 0, done.err
    user = {k: v for k, v in old.items() if k not in REPORT}
    now = snapshot(tmp_path / "out")
    assert {k: v for k, v in now.items() if k not in REPORT} == user
    assert all(now[name] != old[name] for name in REPORT)


# ---------------------------------------------------------------------- stale temporary files
def test_the_next_replay_removes_our_stale_temporary_files_only(
    tmp_path, monkeypatch, first_report
):
    """What a killed earlier version left beside the files (``.replay.json.<8 hex>.tmp``) and a
    killed run's staging folder go; a user's look-alikes stay."""
    monkeypatch.delenv("EBPO_DEBUG", raising=False)
    old = first_report(tmp_path)
    out = tmp_path / "out"
    ours = [
        ".replay.json.0badc0de.tmp",
        ".zero_signal.png.12345678.tmp",
        ".replay.csv.a1b2c3d4.tmp",
    ]
    for name in ours:
        (out / name).write_text("partial")
    (out / ".replay.00112233445566ff.new").mkdir()
    (out / ".replay.00112233445566ff.new" / "replay.json").write_text("{")
    (out / ".replay.00112233445566ff.new" / file_sets.MARK).write_text("{}")  # ours
    users = [".replay.json.tmp", ".replay.json.0BADC0DE.tmp", ".other.png.12345678.tmp", "x.tmp"]
    for name in users:
        (out / name).write_text("the user's\n")
    (out / ".replay.0011.new").mkdir()
    result = run_cli(
        ["replay", str(FIXTURES), "--output-dir", str(out), "--estimators", "ebpo_none"]
    )
    assert result.code == 0, result.err
    assert "removed 4 temporary file(s) left by an interrupted replay" in result.out
    assert sorted(p.name for p in out.iterdir()) == sorted([*REPORT, *users, ".replay.0011.new"])
    assert all((out / name).read_text() == "the user's\n" for name in users)
    now = snapshot(out)
    assert [name for name in REPORT if now[name] != old[name]] == list(REPORT)


def test_a_replay_without_plots_removes_the_previous_plots(tmp_path, monkeypatch, first_report):
    """A report is one run's: the PNGs of an earlier replay do not stay beside a new replay.json
    made without plots."""
    monkeypatch.delenv("EBPO_DEBUG", raising=False)
    first_report(tmp_path)
    out = tmp_path / "out"
    result = run_cli(["replay", str(FIXTURES), "--output-dir", str(out), "--no-plots"])
    assert result.code == 0, result.err
    assert sorted(p.name for p in out.iterdir()) == ["replay.csv", "replay.json"]
