"""Run directories under real processes (issue #21 items 2 and 11): two ``ebpo train`` on one
directory (the second exits 2 with one line naming the first's pid, the first finishes intact), a
holder killed with SIGKILL (the next run takes the directory), and a full disk during ``train``
(one line, exit 2): injected ENOSPC in-process at each kind of writer, and a real one on a tiny
tmpfs where this machine lets the test mount one."""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("trl")

from ebpo.lab.runs import directory as rundir  # noqa: E402
from ebpo.lab.runs.directory import read_metrics  # noqa: E402
from ebpo.lab.train import job  # noqa: E402
from ebpo.lab.train import trainer as job_trainer  # noqa: E402
from ebpo.utils.run_lock import LOCK  # noqa: E402
from tests.hostile.harness import CliResult, assert_user_error, run_cli, tiny_tmpfs  # noqa: E402

#: a run of seconds (the built-in model, no warm start, two RL steps of 2 prompts × G = 2)
TINY = [
    *("--steps", "2", "--group-size", "2", "--prompts-per-step", "2", "--topics", "add"),
    *("--tiers", "1", "--eval-problems", "1", "--eval-samples", "8", "--eval-every", "0"),
    *("--warm-start-steps", "0", "--quiet"),
]

#: ``ebpo train`` that stops at its first evaluation — the lock held, ``run.json`` saying
#: "starting" — until the file argv[2] exists; it touches argv[1] when it gets there
PAUSED = """
import sys, time
from pathlib import Path
from ebpo.lab.train import job
ready, go = Path(sys.argv[1]), Path(sys.argv[2])
real = job._evaluator
def evaluator(*args):
    evaluate = real(*args)
    def paused(*a, **k):
        ready.touch()
        while not go.exists():
            time.sleep(0.05)
        return evaluate(*a, **k)
    return paused
job._evaluator = evaluator
from ebpo.cli import main
sys.exit(main(sys.argv[3:]))
"""


def ebpo(tmp: Path, *argv: str) -> subprocess.Popen:
    env = {**os.environ, "EBPO_CACHE": str(tmp / "cache")}
    env.pop("EBPO_DEBUG", None)
    return subprocess.Popen(
        [sys.executable, "-m", "ebpo.cli", *argv],
        cwd=tmp,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def paused_run(tmp_path):
    """Start ``ebpo train *TINY --output-dir run`` paused at its first evaluation; yields
    ``(process, go_file)`` once it holds the directory."""
    processes: list[subprocess.Popen] = []

    def start() -> tuple[subprocess.Popen, Path]:
        ready, go = tmp_path / "ready", tmp_path / "go"
        env = {**os.environ, "EBPO_CACHE": str(tmp_path / "cache")}
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                PAUSED,
                str(ready),
                str(go),
                "train",
                *TINY,
                "--output-dir",
                "run",
            ],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        processes.append(process)
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the first run never reached its evaluation"
            time.sleep(0.05)
        return process, go

    yield start
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.communicate()


def result_of(process: subprocess.Popen, timeout: float = 180):
    out, err = process.communicate(timeout=timeout)
    return CliResult(process.returncode, out, err)


# ---------------------------------------------------------------------- item 2: concurrent runs
@pytest.mark.slow  # four interpreters importing torch and trl on a shared CPU: ~30 s
def test_a_second_run_on_a_directory_in_use_exits_2_and_the_first_finishes_intact(
    tmp_path, paused_run
):
    first, go = paused_run()
    run = tmp_path / "run"
    assert json.loads((run / "run.json").read_text())["status"] == "starting"
    # what once deleted the first run: a plain start (its "starting" run looked abandoned),
    # --overwrite and --resume, all at once
    others = [
        ebpo(tmp_path, "train", *TINY, "--output-dir", "run", *extra)
        for extra in ([], ["--overwrite"], ["--resume"])
    ]
    for other in others:
        assert_user_error(
            result_of(other),
            rf"^ebpo train: error: output_dir 'run' is in use by another ebpo process \(pid {first.pid}\)",
            label="second run",
        )
    go.touch()
    done = result_of(first)
    assert done.code == 0, done.err
    assert json.loads((run / "run.json").read_text())["status"] == "completed"
    for name in ("eval_before.json", "eval_after.json", "results.json", "final_model"):
        assert (run / name).exists(), name
    steps = [r["step"] for r in read_metrics(run / "metrics.jsonl") if "reward" in r]
    assert steps == [1, 2]  # one run's records, not two interleaved
    assert not (run / LOCK).exists()


def test_a_killed_run_leaves_a_directory_the_next_run_takes(tmp_path, paused_run):
    first, _ = paused_run()
    run = tmp_path / "run"
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    assert (run / LOCK).exists()  # the file stays; the kernel dropped the lock with the process
    assert json.loads((run / "run.json").read_text())["status"] == "starting"
    # no --overwrite needed: a run killed before its first step is replaced without asking
    done = result_of(ebpo(tmp_path, "train", *TINY, "--output-dir", "run"))
    assert done.code == 0, done.err
    assert json.loads((run / "run.json").read_text())["status"] == "completed"
    assert not (run / LOCK).exists()


# ---------------------------------------------------------------------- item 11: a full disk
def _enospc(path) -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


class _FullFile(io.StringIO):
    """A file that takes half of what it is given, then reports a full disk."""

    def __init__(self, real):
        super().__init__()
        self.real = real

    def tell(self):
        return self.real.tell()

    def write(self, text):
        self.real.write(text[: len(text) // 2])
        self.real.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def truncate(self, size=None):
        return self.real.truncate(size)

    def __exit__(self, *exc):
        self.real.close()


def _full_json(monkeypatch):
    real = job.write_json

    def write_json(path, value, **kwargs):
        if Path(path).name == "eval_after.json":
            raise _enospc(path)
        return real(path, value, **kwargs)

    monkeypatch.setattr(job, "write_json", write_json)
    return r"cannot write '.*run/eval_after\.json': No space left on device"


def _full_metrics(monkeypatch):
    def opener(file, mode="r", *args, **kwargs):
        handle = open(file, mode, *args, **kwargs)  # noqa: SIM115 (closed by _FullFile)
        return _FullFile(handle) if "a" in mode else handle

    monkeypatch.setattr(rundir, "open", opener, raising=False)
    return r"cannot write '.*run/metrics\.jsonl': No space left on device"


def _full_checkpoint_torch(monkeypatch):
    """torch.save on a full disk: a RuntimeError that says nothing about space."""

    def save_model(self, *args, **kwargs):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")

    monkeypatch.setattr(job_trainer.EBPOTrainer, "save_model", save_model)
    usage = shutil.disk_usage("/")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=0))
    return r"cannot write '.*run': No space left on device"


def _full_checkpoint_safetensors(monkeypatch):
    class SafetensorError(Exception):
        pass

    def save_model(self, *args, **kwargs):
        raise SafetensorError(
            "Error while serializing: I/O error: No space left on device (os error 28)"
        )

    monkeypatch.setattr(job_trainer.EBPOTrainer, "save_model", save_model)
    return r"cannot write '.*run': No space left on device"


@pytest.mark.parametrize(
    "inject",
    [_full_json, _full_metrics, _full_checkpoint_torch, _full_checkpoint_safetensors],
    ids=["json", "metrics-append", "checkpoint-torch", "checkpoint-safetensors"],
)
def test_a_full_disk_during_train_is_one_line(tmp_path, monkeypatch, inject):
    """ENOSPC injected in-process at each kind of writer of a run."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EBPO_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("EBPO_DEBUG", raising=False)
    match = inject(monkeypatch)
    result = run_cli(["train", *TINY, "--output-dir", "run"])
    assert_user_error(
        result,
        rf"^ebpo train: error: {match}; once there is space, continue the run with --resume$",
        label="disk full",
    )
    run = tmp_path / "run"
    assert json.loads((run / "run.json").read_text())["status"] != "completed"
    assert not (run / LOCK).exists()
    monkeypatch.undo()
    text = (run / "metrics.jsonl").read_text() if (run / "metrics.jsonl").exists() else ""
    assert not text or text.endswith("\n")  # no half record
    read_metrics(run / "metrics.jsonl")


@pytest.mark.skipif(
    shutil.which("mount") is None or os.geteuid() != 0, reason="mounting a tmpfs needs root"
)
def test_a_real_full_disk_during_train_is_one_line(tmp_path):
    """A 1 MB tmpfs: the run starts, then its first checkpoint does not fit (a real ENOSPC,
    raised by safetensors as its own error type)."""
    with tiny_tmpfs(tmp_path / "small", "1m") as small:
        result = result_of(ebpo(tmp_path, "train", *TINY, "--output-dir", str(small / "run")))
        assert_user_error(
            result,
            r"^ebpo train: error: cannot write '.*small/run': No space left on device; once there "
            r"is space, continue the run with --resume$",
            label="real disk full",
        )
        assert not (small / "run" / LOCK).exists()
