"""``accelerate launch --num_processes 2 -m ebpo grpo --config <trl grpo YAML>`` on CPU (gloo), as CI
runs it: two processes really run, only the main process writes the run directory, the estimator
state is the same on every rank after every generation batch, and a run resumed from a checkpoint
inside a generation batch is exactly the uninterrupted one on every rank.

Each rank is observed through the trainer's diagnostic trace (``EBPO_TRACE_DIR``: every rank
writes its estimator states, the advantages that entered each loss and the loss,
:mod:`ebpo.integrations.trl.trace`). The trainer's own check (an all-gather of a state digest after
every update, :mod:`ebpo.integrations.trl.consistency`) would also stop a run whose ranks disagree.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")

import ebpo  # noqa: E402
from ebpo.cli import main  # noqa: E402
from ebpo.integrations.trl.consistency import state_digest  # noqa: E402
from ebpo.integrations.trl.trace import TRACE_DIR_ENV, trace_file  # noqa: E402
from ebpo.utils.checkpoints import MARKER  # noqa: E402
from tests.commands.grpo.grpo_files import write_model_and_prompts  # noqa: E402
from tests.processes import launch  # noqa: E402

pytestmark = [pytest.mark.trl, pytest.mark.slow]

G = 2  # num_generations
LOCAL = 4  # per_device_train_batch_size with 2 processes
STEPS_PER_GENERATION = 2  # a generation batch = 2 optimizer steps: checkpoint-1 falls inside one
MAX_STEPS = 4

#: a `trl grpo` recipe as TRL documents it, plus `advantage_estimator`; the reward is imported by
#: path from a module on PYTHONPATH (the tiny model rarely answers a sum, so math_reward would be
#: 0 everywhere and the estimator state trivial)
TRL_YAML = """\
model_name_or_path: {model}
datasets:
  - path: json
    data_files: {data}
reward_funcs:
  - grpo_process_rewards.parity_reward
advantage_estimator: ebpo
num_generations: {G}
per_device_train_batch_size: {batch}
steps_per_generation: {STEPS_PER_GENERATION}
max_completion_length: 8
max_steps: {MAX_STEPS}
save_steps: 1
learning_rate: 1.0e-3
beta: 0.0
logging_steps: 1
report_to: none
use_cpu: true
bf16: false
seed: 0
output_dir: {out}
"""

REWARDS = """\
def parity_reward(completions, **kwargs):
    return [float(sum(map(ord, str(c))) % 2) for c in completions]
"""


def read_trace(directory: Path, rank: int) -> list[dict]:
    return [json.loads(line) for line in trace_file(directory, rank).read_text().splitlines()]


def files_under(directory: Path) -> set[str]:
    return {str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A 1-process run (in this process) and a 2-process run of the same global batch, then a
    2-process run resumed from checkpoint-1 (inside the first generation batch)."""
    root = write_model_and_prompts(
        tmp_path_factory.mktemp("grpo_processes"), 16, num_layers=1, hidden_size=32, seed=0
    )
    (root / "lib").mkdir()
    (root / "lib" / "grpo_process_rewards.py").write_text(REWARDS)
    (root / "cwd").mkdir()  # the launches' working directory: nothing may be written there

    def config(name: str, batch: int) -> Path:
        path = root / f"{name}.yaml"
        path.write_text(
            TRL_YAML.format(
                model=root / "model", data=root / "data.jsonl", out=root / name, batch=batch,
                G=G, STEPS_PER_GENERATION=STEPS_PER_GENERATION, MAX_STEPS=MAX_STEPS,
            )
        )  # fmt: skip
        return path

    mp = pytest.MonkeyPatch()
    with mp.context() as patch:  # the 1-process run: same global batch, 2 x LOCAL on one process
        patch.syspath_prepend(str(root / "lib"))
        patch.chdir(root / "cwd")
        assert main(["grpo", "--config", str(config("one", 2 * LOCAL))]) == 0

    env = {"PYTHONPATH": str(root / "lib"), "PYTHONDONTWRITEBYTECODE": "1"}
    two = config("two", LOCAL)
    full = launch(
        ["-m", "ebpo", "grpo", "--config", str(two)],
        env={**env, TRACE_DIR_ENV: str(root / "trace_full")},
        cwd=root / "cwd",
    )
    assert full.returncode == 0, full.stderr[-6000:]
    resumed = launch(
        ["-m", "ebpo", "grpo", "--config", str(two), "--output_dir", str(root / "resumed"),
         "--resume_from_checkpoint", str(root / "two" / "checkpoint-1")],
        env={**env, TRACE_DIR_ENV: str(root / "trace_resumed")},
        cwd=root / "cwd",
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-6000:]
    return root


def test_two_processes_ran(runs):
    for rank in (0, 1):
        records = read_trace(runs / "trace_full", rank)
        assert records and {(r["rank"], r["world_size"]) for r in records} == {(rank, 2)}
    cycle = json.loads((runs / "two" / "checkpoint-1" / "ebpo_generation_state.json").read_text())
    assert cycle["num_processes"] == 2
    one = json.loads((runs / "one" / "checkpoint-1" / "ebpo_generation_state.json").read_text())
    assert one["num_processes"] == 1


def per_rank(name: str) -> set[str]:
    """A 1-process file name as a 2-process run writes it: one file per rank where TRL
    (``rng_state.pth``) or ebpo (a generation buffer) writes one per process."""
    name = re.sub(r"rng_state\.pth$", "rng_state_{}.pth", name)
    name = re.sub(r"ebpo_generation_buffer_0\.pt$", "ebpo_generation_buffer_{}.pt", name)
    return {name.format(rank) for rank in (0, 1)}


def test_only_the_main_process_writes_the_run_directory(runs):
    one, two = files_under(runs / "one"), files_under(runs / "two")
    assert set().union(*(per_rank(name) for name in one)) == two
    assert {f"checkpoint-{k}/rng_state_1.pth" for k in range(1, MAX_STEPS + 1)} <= two
    assert not any((runs / "cwd").iterdir())  # no rank wrote into its working directory
    for checkpoint in sorted((runs / "two").glob("checkpoint-*")):
        # the marker, written by rank 0 after a barrier, lists every rank's files
        listed = set(json.loads((checkpoint / MARKER).read_text())["files"])
        assert listed == files_under(checkpoint) - {MARKER}


def test_the_estimator_state_is_the_same_on_every_rank_after_every_step(runs):
    ranks = [
        [r for r in read_trace(runs / "trace_full", rank) if r["event"] == "estimator"]
        for rank in (0, 1)
    ]
    assert len(ranks[0]) == MAX_STEPS // STEPS_PER_GENERATION

    reference = ebpo.make_estimator("ebpo")  # one estimator fed the gathered rewards
    for mine, theirs in zip(*ranks, strict=True):
        assert {**mine, "rank": 1} == theirs  # same rewards, state, digest and step
        rewards = torch.tensor(mine["rewards"])
        assert rewards.numel() == 2 * LOCAL * STEPS_PER_GENERATION
        reference(rewards, torch.arange(rewards.numel()) // G)
        assert mine["state"] == reference.state_dict()
        assert mine["digest"] == state_digest(mine["state"])
        # what rank 0 saved in the checkpoint after that batch is the state every rank holds
        saved = runs / "two" / f"checkpoint-{mine['global_step'] + 1}" / "ebpo_estimator_state.json"
        assert json.loads(saved.read_text()) == mine["state"]
    assert reference.state_dict()["global"]["rewards"]["count"] == 2 * LOCAL * MAX_STEPS


def test_a_resumed_run_is_the_uninterrupted_one_on_every_rank(runs):
    checkpoint = runs / "two" / "checkpoint-1"
    cycle = json.loads((checkpoint / "ebpo_generation_state.json").read_text())
    assert cycle["micro_step"] % (STEPS_PER_GENERATION) != 0  # inside a generation batch
    saved_state = json.loads((checkpoint / "ebpo_estimator_state.json").read_text())
    losses = []
    for rank in (0, 1):
        full = read_trace(runs / "trace_full", rank)
        resumed = read_trace(runs / "trace_resumed", rank)
        assert resumed[0]["event"] == "resume" and resumed[0]["state"] == saved_state
        after = [r for r in full if r["micro_step"] >= cycle["micro_step"]]
        # every later estimator update, advantage and loss, equal to the last bit
        assert resumed[1:] == after
        assert [r["event"] for r in after].count("loss") == MAX_STEPS - 1
        losses.append([r["advantages"] for r in after if r["event"] == "loss"])
    assert losses[0] != losses[1]  # each rank trains on its own slice
    last = f"checkpoint-{MAX_STEPS}"
    for name in ("ebpo_estimator_state.json", "model.safetensors"):
        assert (runs / "resumed" / last / name).read_bytes() == (
            runs / "two" / last / name
        ).read_bytes()
