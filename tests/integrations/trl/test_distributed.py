"""Two CPU processes (gloo, launched by torchrun): every rank ends with the same running statistics,
equal to one estimator fed the gathered rewards, and each rank trains on its own slice; resuming
inside a generation batch restores every rank's own buffered completions (and the optimizer state,
which transformers alone maps to ``cpu:0``); ranks whose estimator states differ stop with an error
naming them. One launch of the two processes runs the three cases (``outputs``), one after
the other: starting the processes is most of each case's time."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")

import ebpo  # noqa: E402

pytestmark = [pytest.mark.trl, pytest.mark.slow]

WORKER = Path(__file__).with_name("two_process_worker.py")
LOCAL = 8  # per_device_train_batch_size in the worker
G = 4


def run_workers(out_dir: Path, *mode: str) -> None:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        # the worker imports test_trainer, which imports the tests package (its conftest helpers)
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(WORKER.parents[3]), os.environ.get("PYTHONPATH", "")) if p
        ),
    }
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(WORKER),
        str(out_dir),
        *mode,
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"workers failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> Path:
    """The directory of the three cases' rank<k>.json, resume<k>.json and diverge<k>.json."""
    out_dir = tmp_path_factory.mktemp("two-processes")
    run_workers(out_dir, "shared", "resume", "diverge")
    return out_dir


def test_two_processes_share_one_prior(outputs):
    ranks = [json.loads((outputs / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["num_processes"] for r in ranks] == [2, 2]
    assert ranks[0]["rewards"] == ranks[1]["rewards"]  # both ranks saw the whole gathered batch
    assert ranks[0]["state"] == ranks[1]["state"]

    estimator = ebpo.make_estimator("ebpo", nan_policy="mask")
    assert len(ranks[0]["rewards"]) == 3
    for step, rewards in enumerate(ranks[0]["rewards"]):
        assert len(rewards) == 2 * LOCAL
        result = estimator(torch.tensor(rewards), torch.arange(len(rewards)) // G)
        for rank in ranks:
            mine = result.advantages[rank["rank"] * LOCAL : (rank["rank"] + 1) * LOCAL]
            torch.testing.assert_close(torch.tensor(rank["local_advantages"][step]), mine.float())
    assert ranks[0]["state"] == estimator.state_dict()
    assert estimator.state_dict()["global"]["rewards"]["count"] == 3 * 2 * LOCAL


def test_two_processes_resume_inside_a_generation_batch_exactly(outputs):
    ranks = [json.loads((outputs / f"resume{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["buffers"] == ["ebpo_generation_buffer_0.pt", "ebpo_generation_buffer_1.pt"]
    # the checkpoint was marked complete once every rank had written its files
    assert {*ranks[0]["buffers"], "rng_state_0.pth", "rng_state_1.pth"} <= set(ranks[0]["listed"])
    for rank in ranks:
        assert rank["generations"] == [2, 1]  # the resumed run generated only the second batch
        assert rank["resumed_state"] == rank["full_state"] == ranks[0]["full_state"]
        assert rank["full_state"]["steps"] == 2
        # micro-steps 2..7: each rank trained on its own slice, as in the uninterrupted run
        assert rank["resumed_loss_advantages"] == rank["full_loss_advantages"][2:]
    assert ranks[0]["full_loss_advantages"] != ranks[1]["full_loss_advantages"]


def test_ranks_whose_estimator_states_differ_stop_at_the_first_batch(outputs):
    ranks = [json.loads((outputs / f"diverge{r}.json").read_text()) for r in range(2)]
    for rank in ranks:  # both ranks stop, with the same message, before training on the batch
        assert rank["error"] is not None and rank["generations"] == 0
        assert "differs across the 2 processes" in rank["error"]
        assert "global step 0 (micro-step 0)" in rank["error"]
        assert re.search(r"rank 0: [0-9a-f]{16}; rank 1: [0-9a-f]{16}", rank["error"])
    assert ranks[0]["error"] == ranks[1]["error"]
