"""A TRL user's own GRPO YAML, run with ``trl grpo`` and with ``ebpo grpo`` side by side on a tiny
local model: the same YAML runs unchanged, and ``--advantage_estimator grpo`` logs what ``trl grpo``
logs (loss, reward, grad norm: 1e-6 relative, every step).

* TRL-docs style, launcher key in the file (``num_processes: 2``): ``trl grpo`` needs ``--multi_gpu``
  on this CPU machine to start 2 processes (accelerate starts one otherwise); ``ebpo grpo`` starts 2
  from the file alone. Both get ``--main_process_port`` on the command line (a launcher flag).
* open-r1 style recipe: a reward list with weights, Dr. GRPO settings (``scale_rewards: false``,
  ``loss_type: dr_grpo``), masked truncated completions, clip-higher, a warm-up schedule. Under
  the default estimator (EBPO) the unscaled advantages it asks for are EBPO's ``normalize:
  center``, with no warning.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("trl")

from ebpo.cli import main  # noqa: E402
from ebpo.utils.launch import cpu_launch_env, free_port  # noqa: E402
from tests.commands.grpo.grpo_files import write_model_and_prompts  # noqa: E402

pytestmark = [pytest.mark.trl, pytest.mark.slow]

BIN = Path(sys.executable).parent
MAX_STEPS = 2
LOGGED = ("loss", "reward", "grad_norm")

COMMON = """\
model_name_or_path: {model}
datasets:
  - path: json
    data_files: {data}
num_generations: 4
max_completion_length: 6
generation_kwargs:
  sequence_bias: [[[2], 2.0]]     # <eos> likelier: completions of uneven length
max_steps: {MAX_STEPS}
logging_steps: 1
save_steps: {MAX_STEPS}
report_to: none
use_cpu: true
bf16: false
seed: 0
"""

#: TRL's CLI docs: the launcher's keys go in the same file as the trainer's
TRL_DOCS_YAML = """\
reward_funcs:
  - side_rewards.parity_reward
num_processes: 2
per_device_train_batch_size: 4
steps_per_generation: 2
learning_rate: 1.0e-2
beta: 0.04
"""

#: open-r1's GRPO recipes (e.g. its codeforces config): a reward list with weights, Dr. GRPO
OPEN_R1_YAML = """\
model_revision: main
dtype: float32
attn_implementation: eager
reward_funcs:
  - side_rewards.parity_reward
  - side_rewards.length_reward
reward_weights: [1.0, 0.5]
scale_rewards: false
loss_type: dr_grpo
mask_truncated_completions: true
epsilon: 0.2
epsilon_high: 0.28
beta: 0.0
temperature: 0.9
per_device_train_batch_size: 8
gradient_accumulation_steps: 2
learning_rate: 1.0e-2
lr_scheduler_type: constant_with_warmup
warmup_steps: 1                   # transformers 5.24 has no warmup_ratio any more
"""

REWARDS = """\
def parity_reward(completions, **kwargs):
    return [float((len(c) + sum(map(ord, c))) % 2) for c in completions]


def length_reward(completions, **kwargs):
    return [len(c) / 6 for c in completions]
"""


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = write_model_and_prompts(
        tmp_path_factory.mktemp("as_trl"), 16, num_layers=1, hidden_size=32, seed=0
    )
    (root / "lib").mkdir()
    (root / "lib" / "side_rewards.py").write_text(REWARDS)
    for name, text in (("trl_docs", TRL_DOCS_YAML), ("open_r1", OPEN_R1_YAML)):
        common = COMMON.format(model=root / "model", data=root / "data.jsonl", MAX_STEPS=MAX_STEPS)
        (root / f"{name}.yaml").write_text(common + text)
    return root


def run(root: Path, command: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``trl`` or ``ebpo`` of this interpreter, as a user types it (its own processes)."""
    env = cpu_launch_env({"PYTHONPATH": str(root / "lib"), "PYTHONDONTWRITEBYTECODE": "1"})
    env.pop("ACCELERATE_USE_CPU")  # the user's shell has nothing special
    done = subprocess.run(
        [str(BIN / command), "grpo", *args], env=env, cwd=root, capture_output=True, text=True,
        timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-6000:]
    return done


def logs(output_dir: Path) -> list[dict]:
    state = json.loads((output_dir / f"checkpoint-{MAX_STEPS}" / "trainer_state.json").read_text())
    return [{k: h[k] for k in LOGGED if k in h} for h in state["log_history"] if "loss" in h]


def assert_same_logs(ours: list[dict], theirs: list[dict]) -> None:
    assert len(theirs) == MAX_STEPS and [sorted(h) for h in ours] == [sorted(h) for h in theirs]
    for mine, their in zip(ours, theirs, strict=True):
        for key, value in their.items():
            assert math.isclose(mine[key], value, rel_tol=1e-6, abs_tol=1e-9), (key, mine, their)
    assert theirs[0]["reward"] > 0 and any(h["loss"] != 0 for h in theirs)


def files(output_dir: Path) -> set[str]:
    return {str(p.relative_to(output_dir)) for p in output_dir.rglob("*") if p.is_file()}


def test_a_trl_docs_yaml_with_launcher_keys_runs_as_trl_grpo_runs_it(root):
    config, port = str(root / "trl_docs.yaml"), ["--main_process_port", str(free_port())]
    run(root, "trl", "--config", config, "--output_dir", "trl", "--multi_gpu", *port)
    run(root, "ebpo", "--config", config, "--output_dir", "ebpo", "--advantage_estimator", "grpo",
        "--main_process_port", str(free_port()))  # fmt: skip
    assert_same_logs(logs(root / "ebpo"), logs(root / "trl"))
    # two processes each: one rng state per rank; ebpo adds its own files to TRL's
    theirs, ours = files(root / "trl"), files(root / "ebpo")
    assert f"checkpoint-{MAX_STEPS}/rng_state_1.pth" in theirs
    assert theirs <= ours
    assert {Path(f).name for f in ours - theirs} == {
        "ebpo_estimator_state.json",
        "ebpo_generation_state.json",
        "ebpo_checkpoint_complete.json",
        "trainer_state.json",  # the log history at the top too (TRL: in checkpoints only)
    }
    assert "trainer_state.json" in ours - theirs


def test_an_open_r1_recipe_runs_as_trl_grpo_runs_it(root, monkeypatch):
    config = str(root / "open_r1.yaml")
    run(root, "trl", "--config", config, "--output_dir", "trl_r1")
    # one plain process: ebpo grpo trains in its own process, with the launcher's one thread
    monkeypatch.syspath_prepend(str(root / "lib"))
    monkeypatch.chdir(root)
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)  # no "has no effect" warning any more
            warnings.filterwarnings("ignore", module="(?!ebpo)")  # TRL's and torch's own
            assert main(["grpo", "--config", config, "--advantage_estimator", "grpo",
                         "--output_dir", "ebpo_r1"]) == 0  # fmt: skip
            assert main(["grpo", "--config", config, "--output_dir", "ebpo_r1_default"]) == 0
    finally:
        torch.set_num_threads(threads)
    assert_same_logs(logs(root / "ebpo_r1"), logs(root / "trl_r1"))
    # the default estimator: EBPO with the unscaled advantages the recipe asks for
    checkpoint = root / "ebpo_r1_default" / f"checkpoint-{MAX_STEPS}"
    state = json.loads((checkpoint / "ebpo_estimator_state.json").read_text())
    assert state["estimator"] == "ebpo" and state["options"]["normalize"] == "center"
    assert os.environ.get("EBPO_GRPO_LAUNCHED") is None
