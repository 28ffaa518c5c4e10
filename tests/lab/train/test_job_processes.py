"""``ebpo train`` under ``accelerate launch --num_processes 2`` (CPU, gloo; tests/processes.py): one
run directory, written by the main process, with exactly the files of a one-process run; the warm
start trained once; the estimator state the same on both processes after every step; a run
stopped by a signal on one process resumes on both to the uninterrupted run; errors end every
process the same way, none left waiting.

The two-process runs go through a small launcher script (:data:`RECORDER`) that runs ``python -m
ebpo``'s ``main`` with two observers: every process appends its estimator state after each update
and the outcome of its warm start to its own file outside the run directory, and, when asked,
the main process sends itself SIGTERM during a given step (as ``kill -TERM <pid>`` would).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

pytest.importorskip("trl")

from ebpo.lab.runs.directory import read_metrics  # noqa: E402
from ebpo.lab.runs.processes import DEFAULT_TIMEOUT  # noqa: E402
from ebpo.lab.train import job  # noqa: E402
from ebpo.lab.train.job import TrainJobConfig, run_train_job  # noqa: E402
from ebpo.utils import run_lock as runlock  # noqa: E402
from tests.processes import launch  # noqa: E402

pytestmark = pytest.mark.trl

#: the tiny run: 3 steps of 4 prompts × G = 2 (4 completions per process), one-digit sums, a
#: warm start long enough that some answers are right (rewards vary, so the state does)
OPTIONS = {
    "steps": 3,
    "group_size": 2,
    "prompts_per_step": 4,
    "topics": ("add",),
    "tiers": (1,),
    "eval_problems": 2,
    "eval_samples": 8,
    "eval_every": 2,
    "save_every": 1,
    "warm_start_steps": 400,
    "warm_start_batch_size": 32,
    "tiny_layers": 1,
    "tiny_hidden_size": 64,
}
#: metrics that measure time, not what the run computed
TIMING = {
    "time",
    "step_time",
    "train_runtime",
    "train_samples_per_second",
    "train_steps_per_second",
}

RECORDER = """
import json, os, signal, sys
from pathlib import Path

from ebpo.cli import main
from ebpo.lab.cpu_task import policy
from ebpo.lab.train import job
from ebpo.lab.train import trainer as job_trainer

RANK = int(os.environ["RANK"])
LOG = Path(os.environ["RECORD_DIR"]) / f"rank{RANK}.jsonl"
SIGTERM_AT = int(os.environ.get("SIGTERM_AT_STEP", "0"))


def note(**entry):
    with open(LOG, "a") as f:
        f.write(json.dumps(entry) + "\\n")


real_warm_start = policy.warm_start


def warm_start(*args, **kwargs):
    model, cached = real_warm_start(*args, **kwargs)
    note(event="warm start", cached=cached)
    return model, cached


policy.warm_start = warm_start


class Recording(job_trainer.EBPOTrainer):
    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.model.training:
            note(event="estimator", step=self.state.global_step + 1, state=self.estimator.state_dict())
        return output

    def training_step(self, *args, **kwargs):
        if RANK == 0 and self.state.global_step + 1 == SIGTERM_AT:
            os.kill(os.getpid(), signal.SIGTERM)
        return super().training_step(*args, **kwargs)


job_trainer.EBPOTrainer = Recording
sys.exit(main())
"""


def flags(options: dict) -> list[str]:
    """``ebpo train`` flags for the job options ``options``."""
    out = []
    for name, value in options.items():
        text = ",".join(map(str, value)) if isinstance(value, tuple) else str(value)
        out += [f"--{name.replace('_', '-')}", text]
    return out


def launch_train(
    tmp: Path, run_dir: Path, cache: Path, *extra: str, record: str | None = None, env=None
) -> subprocess.CompletedProcess[str]:
    """``ebpo train`` with :data:`OPTIONS` on two processes: through :data:`RECORDER` when
    ``record`` names a directory for the per-process records, else ``python -m ebpo``."""
    arguments = ["train", *flags(OPTIONS), "--output-dir", str(run_dir), "--cache-dir", str(cache)]
    if record is None:
        command = ["-m", "ebpo", *arguments, *extra]
    else:
        script = tmp / "recorder.py"
        script.write_text(RECORDER)
        (tmp / record).mkdir()
        env = {"RECORD_DIR": str(tmp / record), **(env or {})}
        command = [str(script), *arguments, *extra]
    return launch(command, num_processes=2, env=env, cwd=tmp, timeout=600)


def records(directory: Path, rank: int, event: str) -> list[dict]:
    lines = (directory / f"rank{rank}.jsonl").read_text().splitlines()
    return [entry for entry in map(json.loads, lines) if entry["event"] == event]


def listing(run_dir: Path) -> list[str]:
    """The run's files, with the names that differ by nature between runs made uniform: the
    TensorBoard file (time, pid) and the processes' RNG states in a checkpoint (one file each)."""
    names = set()
    for path in run_dir.rglob("*"):
        name = str(path.relative_to(run_dir))
        name = re.sub(r"events\.out\.tfevents\..*", "events.out.tfevents", name)
        names.add(re.sub(r"rng_state(_\d+)?\.pth", "rng_state*.pth", name))
    return sorted(names)


def per_step(metrics_path: Path) -> list[dict]:
    """The metrics file's records without their timings. The end-of-training summary keeps only
    its step: its ``train_loss`` is transformers' mean over the steps of that ``train()`` call."""
    return [
        {"step": r["step"]}
        if "train_runtime" in r
        else {k: v for k, v in r.items() if k not in TIMING}
        for r in read_metrics(metrics_path)
    ]


def failed(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    """An uninterrupted two-process run (progress shown) with its per-process records."""
    tmp = tmp_path_factory.mktemp("two")
    done = launch_train(tmp, tmp / "run", tmp / "cache", record="records")
    assert done.returncode == 0, failed(done)
    return tmp, done


@pytest.mark.slow  # launches of two processes, 20-60 s each
def test_two_processes_write_one_run_and_train_the_warm_start_once(two_processes, tmp_path):
    tmp, done = two_processes
    run_dir = tmp / "run"
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["status"] == "completed" and manifest["config"]["num_processes"] == 2

    # exactly the files of a one-process run of the same global batch; no lock file left
    one = run_train_job(
        TrainJobConfig(
            **OPTIONS,
            output_dir=str(tmp_path / "one"),
            cache_dir=str(tmp / "cache"),
            progress=False,
        )
    )
    assert listing(run_dir) == listing(Path(one["run_dir"]))
    checkpoint = run_dir / "checkpoints" / "checkpoint-3"
    # each process's RNG state is the only file of its own (transformers' checkpoint layout)
    assert sorted(p.name for p in checkpoint.glob("rng_state*")) == [
        "rng_state_0.pth",
        "rng_state_1.pth",
    ]

    # the warm start: trained by the main process, loaded from the cache by the other
    outcomes = [records(tmp / "records", rank, "warm start") for rank in (0, 1)]
    assert [[o["cached"] for o in outcome] for outcome in outcomes] == [[False], [True]]
    entries = [p.name for p in (tmp / "cache" / "warm-start").iterdir()]
    assert len([name for name in entries if not name.startswith(".")]) == 1  # besides its lock
    assert done.stdout.count("warm start: trained and cached") == 1
    assert "1 other process loaded it" in done.stdout
    # one process printed: the table before RL and the table before / after, once each
    assert done.stdout.count("held-out Pass@1 (%)") == 2
    assert done.stderr.count("RL: 100%") >= 1 and done.stderr.count("held-out eval (before)") >= 1

    # the estimator state: the same on both processes after each of the 3 updates, and written
    states = [records(tmp / "records", rank, "estimator") for rank in (0, 1)]
    assert [s["step"] for s in states[0]] == [s["step"] for s in states[1]] == [1, 2, 3]
    assert states[0] == states[1]
    assert states[0][0]["state"] != states[0][2]["state"]  # it did change
    assert json.loads((run_dir / "estimator_state.json").read_text()) == states[0][-1]["state"]
    rewards = [r["reward"] for r in read_metrics(run_dir / "metrics.jsonl") if "reward" in r]
    assert len(rewards) == 3 and any(0 < r < 1 for r in rewards)  # the rewards varied


@pytest.mark.slow  # launches of two processes, 20-60 s each
def test_a_signal_on_one_process_stops_both_and_the_resume_is_exact(two_processes):
    tmp, _ = two_processes
    run_dir = tmp / "stopped"
    # SIGTERM to the main process only, during step 2: both stop after step 2, one checkpoint
    done = launch_train(tmp, run_dir, tmp / "cache", record="stopped", env={"SIGTERM_AT_STEP": "2"})
    assert done.returncode != 0, failed(done)  # ebpo train exits 130 when interrupted
    assert "interrupted at step 2; checkpoint saved" in done.stdout, failed(done)
    assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("checkpoint-*")) == [
        "checkpoint-1",
        "checkpoint-2",
    ]
    for rank in (0, 1):
        assert [s["step"] for s in records(tmp / "stopped", rank, "estimator")] == [1, 2]

    # a resume with another number of processes is refused before anything loads
    config = TrainJobConfig(
        **OPTIONS, output_dir=str(run_dir), cache_dir=str(tmp / "cache"), resume=True
    )
    with pytest.raises(ValueError, match=r"holds a run of 2 process\(es\); resume it with as many"):
        run_train_job(replace(config, progress=False))

    resumed = launch_train(tmp, run_dir, tmp / "cache", "--resume", "--quiet", record="resumed")
    assert resumed.returncode == 0, failed(resumed)
    uninterrupted = tmp / "run"
    assert json.loads((run_dir / "estimator_state.json").read_text()) == json.loads(
        (uninterrupted / "estimator_state.json").read_text()
    )
    assert per_step(run_dir / "metrics.jsonl") == per_step(uninterrupted / "metrics.jsonl")
    # on both processes, the resumed step 3 is the uninterrupted one's
    for rank in (0, 1):
        assert records(tmp / "resumed", rank, "estimator") == [
            records(tmp / "records", rank, "estimator")[2]
        ]
    for name in ("eval_before.json", "eval_after.json"):
        assert (run_dir / name).read_text() == (uninterrupted / name).read_text()


@pytest.mark.slow  # launches of two processes, 20-60 s each
def test_a_second_job_on_the_directory_is_refused_by_both_processes(tmp_path):
    """The main process finds the directory locked (by this test, as another job would): both
    processes end with its one-line error at once, and nothing is written."""
    run_dir = tmp_path / "run"
    started = time.monotonic()
    with runlock.lock_run_dir(run_dir):
        done = launch_train(tmp_path, run_dir, tmp_path / "cache")
    assert done.returncode != 0
    message = f"ebpo train: error: output_dir {str(run_dir)!r} is in use by another ebpo process (pid {os.getpid()})"
    assert done.stderr.count(message) == 2, failed(done)
    # nobody waited for a collective's timeout (ours, 30 min): half of it is slack enough for a
    # loaded machine, and far below what a wait would take
    assert time.monotonic() - started < DEFAULT_TIMEOUT.total_seconds() / 2
    assert not run_dir.exists() and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("rank", [0, 1])
def test_a_batch_that_does_not_split_is_refused_by_every_process(tmp_path, monkeypatch, rank):
    """Checked by every process before the first exchange (here each of a launch's two, as
    torchrun would start them): the same one line, nothing created, no process group."""
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(job.Processes, "start", lambda *a: pytest.fail("exchange started"))
    config = TrainJobConfig(
        **{**OPTIONS, "prompts_per_step": 3, "group_size": 3},
        output_dir=str(tmp_path / "run"),
        cache_dir=str(tmp_path / "cache"),
    )
    with pytest.raises(ValueError) as error:
        run_train_job(config)
    assert str(error.value) == (
        "prompts_per_step × group_size (3 × 3 = 9 completions a step) must be divisible by the "
        "number of processes (2): each process samples an equal share of every step's batch"
    )
    assert not (tmp_path / "run").exists() and not (tmp_path / "cache").exists()


def test_the_exchanges_wait_ddp_timeout_seconds(tmp_path, monkeypatch):
    """The process group's timeout is transformers' ``ddp_timeout`` (``extra``), 30 min unless
    given; anything but a positive number is refused before the group exists."""

    class Started(Exception):
        pass

    timeouts = []

    def start(self, timeout):
        timeouts.append(timeout)
        raise Started

    monkeypatch.setattr(job.Processes, "start", start)
    config = TrainJobConfig(**OPTIONS, output_dir=str(tmp_path / "run"))
    for extra in ({}, {"ddp_timeout": 90}):
        with pytest.raises(Started):
            run_train_job(replace(config, extra=extra))
    assert timeouts == [timedelta(minutes=30), timedelta(seconds=90)]
    for bad in (0, -1, float("nan"), "60", True, 10**30):
        with pytest.raises(ValueError, match=r"^extra\['ddp_timeout'\] must be "):
            run_train_job(replace(config, extra={"ddp_timeout": bad}))
    assert len(timeouts) == 2 and not (tmp_path / "run").exists()
