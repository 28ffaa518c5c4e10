"""The hostile inputs of issue #29 that lost or hid data, tried with real ``ebpo`` processes:

1. a resume that fails once the trainer holds the checkpoint (its estimator state belongs to
   another estimator) leaves ``run.json`` and ``metrics.jsonl`` byte for byte as they were, and a
   plain run on the directory is then refused: the checkpoints survive (the failed resume once
   rewrote the manifest to "starting, step 0", and the next plain run replaced the run);
2. ``ebpo grpo`` with ``output_dir`` set to the user's own folder exits 2 and leaves its
   ``config.json`` and ``README.md`` as they were (TRL wrote its own over them, exit 0);
3. unbounded work is refused before it starts: a billion evaluation samples (once 9.4 GB in
   50 s) and a YAML alias bomb under ``extra`` (once minutes and GBs in the run's identity) end
   in one line each, in seconds, with a small peak memory.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("trl")

from ebpo.integrations.trl.checkpoint_files import ESTIMATOR_STATE_FILE  # noqa: E402
from ebpo.utils.checkpoints import newest_complete  # noqa: E402
from tests.commands.grpo.grpo_files import write_model_and_prompts  # noqa: E402
from tests.hostile.harness import assert_user_error  # noqa: E402
from tests.hostile.test_cli_data import files  # noqa: E402
from tests.hostile.test_run_dirs import ebpo, result_of  # noqa: E402

#: a run of seconds: the built-in model, no warm start, RL steps of 2 prompts × G = 2, a
#: checkpoint after every step
TINY = [
    *("--steps", "4", "--group-size", "2", "--prompts-per-step", "2", "--topics", "add"),
    *("--tiers", "1", "--eval-problems", "1", "--eval-samples", "8", "--eval-every", "0"),
    *("--warm-start-steps", "0", "--save-every", "1", "--quiet"),
]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow  # three interpreters, one of them training: ~45 s on 2 shared cores
def test_a_failed_resume_leaves_the_run_as_it_was_and_a_plain_run_refuses_it(tmp_path):
    run = tmp_path / "run"
    first = ebpo(tmp_path, "train", *TINY, "--output-dir", "run")
    deadline = time.monotonic() + 240
    while newest_complete(run / "checkpoints")[0] is None:  # a complete checkpoint, then Ctrl-C
        assert first.poll() is None, first.communicate()
        assert time.monotonic() < deadline, "no checkpoint within 240 s"
        time.sleep(0.05)
    first.send_signal(signal.SIGINT)
    stopped = result_of(first)
    manifest = json.loads((run / "run.json").read_text())
    assert stopped.code == 130 and manifest["status"] == "interrupted", stopped.err
    step = manifest["global_step"]
    checkpoint, _ = newest_complete(run / "checkpoints")
    assert checkpoint is not None and checkpoint.name == f"checkpoint-{step}"
    # the estimator state of another estimator, the same size: the checkpoint stays "complete",
    # and only the trainer, once built, can tell
    state = checkpoint / ESTIMATOR_STATE_FILE
    state.write_text(state.read_text().replace('"estimator": "ebpo"', '"estimator": "grpo"', 1))
    kept = {name: digest(run / name) for name in ("run.json", "metrics.jsonl")}
    checkpoints = sorted(p.name for p in (run / "checkpoints").iterdir())

    refusals = [
        (  # the resume: it fails once the trainer holds the checkpoint
            ["--resume"],
            rf"^ebpo train: error: checkpoint '.*{checkpoint.name}': state belongs to estimator "
            r"'grpo', cannot load it into 'ebpo'$",
        ),
        (  # then a plain run: the run is still one that has done work
            [],
            rf"^ebpo train: error: output_dir 'run' already holds a run \(interrupted, step {step}; "
            r".*checkpoint-\d saved\); pass --resume",
        ),
    ]
    for flags, match in refusals:
        result = result_of(ebpo(tmp_path, "train", *TINY, "--output-dir", "run", *flags))
        assert_user_error(result, match, label=f"train {flags}")
        assert {name: digest(run / name) for name in kept} == kept
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == checkpoints


GRPO_YAML = """\
model_name_or_path: {root}/model
datasets:
  - path: json
    data_files: {root}/data.jsonl
reward_funcs: [math_reward]
num_generations: 2
per_device_train_batch_size: 4
max_completion_length: 8
max_steps: 1
report_to: none
use_cpu: true
bf16: false
output_dir: mine
"""


def test_ebpo_grpo_into_a_users_folder_exits_2_and_keeps_its_files(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    write_model_and_prompts(tmp_path, 8, num_layers=1, hidden_size=32, seed=0)
    files(
        {
            "r.yaml": GRPO_YAML.format(root=tmp_path),
            "mine/config.json": '{"my": "settings"}',
            "mine/README.md": "my notes",
        }
    )(tmp_path)
    mine = {p.name: p.read_bytes() for p in (tmp_path / "mine").iterdir()}
    result = result_of(ebpo(tmp_path, "grpo", "--config", "r.yaml"))
    assert_user_error(
        result,
        r"^ebpo grpo: error: output_dir 'mine' is not empty and holds no training run",
        label="grpo into a user's folder",
    )
    assert {p.name: p.read_bytes() for p in (tmp_path / "mine").iterdir()} == mine


#: both refusals in one interpreter, with its peak resident memory before them (the imports) and
#: after; whether the job got as far as loading its data (it must not: the options are refused first)
UNBOUNDED = """
import json, resource, sys
from ebpo.lab.train import job
loads = []
real = job._load
job._load = lambda *a, **k: (loads.append(1), real(*a, **k))[1]
from ebpo.cli import main
imported = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
codes = [main(argv) for argv in (sys.argv[1:3], sys.argv[3:])]
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"codes": codes, "loads": len(loads), "imported_kb": imported, "peak_kb": peak}))
"""


def test_unbounded_work_is_refused_before_any_work_with_little_memory(tmp_path):
    levels = [f"  l0: &l0 [{', '.join(['x'] * 10)}]\n"]
    levels += [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 7)]
    (tmp_path / "job.yaml").write_text("steps: 2\nextra:\n" + "".join(levels))
    env = {**os.environ, "EBPO_CACHE": str(tmp_path / "cache")}
    env.pop("EBPO_DEBUG", None)
    done = subprocess.run(
        [sys.executable, "-c", UNBOUNDED, "train", "--eval-samples=1000000000"]
        + ["train", "--config", "job.yaml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert report["codes"] == [2, 2], done.stderr
    assert report["loads"] == 0, report  # refused before any data or model loaded
    assert lines[0].startswith("ebpo train: error: eval_samples × the evaluation's problems")
    assert "an alias bomb" in lines[1] and len(lines) == 2
    # the refusals add next to nothing (measured: 0.1 MB) to what the imports took (torch and trl:
    # ~0.6 GB, up to 2 GB seen on a loaded CI machine); the bomb expanded once (a deep copy and
    # its JSON text) adds ~115 MB
    assert report["peak_kb"] - report["imported_kb"] < 50_000, report
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml"]  # no run, no cache
