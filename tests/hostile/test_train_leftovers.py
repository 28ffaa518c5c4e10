"""What a killed or interrupted ``ebpo train`` leaves for the next run:

* the summary record of a resumed run: its ``train_loss`` is the mean over all the run's steps,
  as the uninterrupted run's (transformers divides the resumed part's total by every step);
* the temporary files of our atomic writes that a kill left (``.run.json.<hex>.tmp``,
  ``plots/.<name>.png.<hex>.tmp``) are removed by the next run that takes the directory, and a
  user's files, however alike, stay;
* the warm start's temporary folders (``.<key>.tmp<pid>/``) in the cache are removed by the next
  warm start once no process holds that key's lock; a folder being written (its lock held) and a
  user's files stay.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("trl")

from ebpo.evaluation import models  # noqa: E402
from ebpo.lab.cpu_task import policy  # noqa: E402
from ebpo.lab.runs.directory import read_metrics, write_manifest  # noqa: E402
from ebpo.lab.train import data as job_data  # noqa: E402
from ebpo.lab.train.job import TrainJobConfig, run_train_job  # noqa: E402

pytestmark = pytest.mark.trl


def tiny(tmp_path: Path, name: str, **overrides) -> TrainJobConfig:
    """Seconds: a 1-layer width-32 model without warm start, 2 prompts x G = 2 per step."""
    options = {
        "steps": 4, "group_size": 2, "prompts_per_step": 2, "topics": ("add",), "tiers": (1,),
        "eval_problems": 1, "eval_samples": 8, "eval_every": 0, "save_every": 0,
        "warm_start_steps": 0, "tiny_layers": 1, "tiny_hidden_size": 32,
        "learning_rate": 1e-2, "output_dir": str(tmp_path / name),
        "cache_dir": str(tmp_path / "cache"), "progress": False,
    }  # fmt: skip
    return TrainJobConfig(**{**options, **overrides})


def summary_loss(run_dir: Path) -> float:
    (summary,) = [r for r in read_metrics(run_dir / "metrics.jsonl") if "train_runtime" in r]
    return summary["train_loss"]


def step_losses(run_dir: Path) -> list[float]:
    return [r["loss"] for r in read_metrics(run_dir / "metrics.jsonl") if "loss" in r]


@pytest.mark.slow  # three runs of 6 steps
def test_a_resumed_runs_train_loss_is_the_mean_over_all_its_steps(tmp_path, monkeypatch):
    real_reward = job_data.trl_reward

    def parity(score):  # a reward with signal for an untrained model: losses that are not 0
        return real_reward(lambda text, answer: float(len(text) % 2))

    monkeypatch.setattr(job_data, "trl_reward", parity)
    uninterrupted = Path(run_train_job(tiny(tmp_path, "full", steps=6))["run_dir"])
    losses = step_losses(uninterrupted)
    assert len(losses) == 6 and summary_loss(uninterrupted) == pytest.approx(
        sum(losses) / 6, rel=1e-12
    )

    def reward_that_sends_sigterm(score):
        inner, calls = parity(score), []

        def reward(*args, **kwargs):
            calls.append(1)
            if len(calls) == 4:  # during step 4, as `kill -TERM` would
                os.kill(os.getpid(), signal.SIGTERM)
            return inner(*args, **kwargs)

        return reward

    monkeypatch.setattr(job_data, "trl_reward", reward_that_sends_sigterm)
    config = tiny(tmp_path, "resumed", steps=6)
    assert run_train_job(config)["status"] == "interrupted"
    monkeypatch.setattr(job_data, "trl_reward", parity)
    resumed = Path(run_train_job(replace(config, resume=True))["run_dir"])
    assert step_losses(resumed) == losses  # the same run, step by step
    assert summary_loss(resumed) == pytest.approx(summary_loss(uninterrupted), rel=1e-9)
    # what transformers alone reports (the resumed steps' total over all steps) is another number
    assert abs(sum(losses[:4])) > 1e-3
    assert summary_loss(resumed) != pytest.approx(sum(losses[4:]) / 6, rel=1e-3)


OURS = [".run.json.0123abcd.tmp", ".eval_before.json.deadbeef.tmp", ".metrics.jsonl.a1b2c3d4.tmp"]
USERS = [".run.json.notes.tmp", ".run.json.0123abcd.tmp.keep", "run.json.0123abcd.tmp", "notes.txt"]


@pytest.mark.parametrize("resume", [False, True])
def test_the_next_run_removes_our_stale_temporary_files_and_keeps_the_users(tmp_path, resume):
    config = replace(tiny(tmp_path, "run", steps=1), resume=resume)
    run_dir = Path(config.output_dir)
    (run_dir / "plots").mkdir(parents=True)
    # killed before its first step: a run to resume, or one the next run replaces unasked
    write_manifest(run_dir, config.identity(), "interrupted" if resume else "starting", 0)
    for name in OURS + USERS:
        (run_dir / name).write_text("left over")
    (run_dir / "plots" / ".reward.png.0123abcd.tmp").write_bytes(b"\x89PNG half")
    (run_dir / "plots" / ".mine.txt.0123abcd.tmp").write_text("left over")
    result = run_train_job(config)
    assert result["status"] == "completed"
    left = {p.name for p in run_dir.iterdir()}
    assert not left & set(OURS) and set(USERS) <= left
    assert all((run_dir / name).read_text() == "left over" for name in USERS)
    plots = {p.name for p in (run_dir / "plots").iterdir()}
    assert ".reward.png.0123abcd.tmp" not in plots
    # a resumed run keeps its plots folder, where a file that is not a plot's temporary stays
    assert (".mine.txt.0123abcd.tmp" in plots) == resume


def test_a_warm_start_removes_stale_temporary_folders_of_the_cache(tmp_path):
    cache = tmp_path / "cache"
    folder = cache / "warm-start"
    recipe = {"test": "leftovers"}
    key = policy.warm_start_key(recipe)
    busy, other = "0123456789abcdef", "fedcba9876543210"
    stale = [folder / f".{key}.tmp4242", folder / f".{other}.tmp17"]
    kept = [folder / f".{busy}.tmp99", folder / ".notakey.tmp1", folder / "mine.tmp3"]
    for entry in stale + kept:
        entry.mkdir(parents=True)
        (entry / "model.safetensors").write_bytes(b"half")
    (folder / "notes.txt").write_text("mine")
    tokenizer = models.build_char_tokenizer()
    model = models.build_tiny_llama(tokenizer, num_layers=1, hidden_size=16, num_heads=2)
    examples = iter([("1+1=", "2")] * 4)
    with open(folder / f".{busy}.lock", "w") as held:  # another process saving that warm start
        fcntl.flock(held, fcntl.LOCK_EX)
        policy.warm_start(
            model, tokenizer, examples, steps=1, batch_size=2, lr=1e-3, seed=0, cache=cache,
            recipe=recipe, progress=False,
        )  # fmt: skip
    assert policy.warm_start_is_cached(folder / key)
    assert not any(entry.exists() for entry in stale)
    assert all((entry / "model.safetensors").read_bytes() == b"half" for entry in kept)
    assert (folder / "notes.txt").read_text() == "mine"
    assert json.loads((folder / key / "recipe.json").read_text()) == recipe
