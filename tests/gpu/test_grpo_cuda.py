"""``ebpo grpo`` from a TRL user's bf16 YAML on a GPU: ``--advantage_estimator grpo`` logs exactly
what ``trl grpo`` logs from the same file (loss, reward, grad norm at every step), plain and with
LoRA and a KL term (``use_peft``, ``beta: 0.04``: the adapter-free policy is the reference), both
under ``full_determinism`` (see test_trl_cuda). Each command runs as a user types it, in its own
processes, on a tiny local model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

from tests.commands.grpo.grpo_files import PARITY_REWARDS, write_model_and_prompts  # noqa: E402
from tests.gpu.cuda import GPU, needs_bf16  # noqa: E402

pytestmark = [*GPU, needs_bf16, pytest.mark.trl]

BIN = Path(sys.executable).parent
LOGGED = ("loss", "reward", "grad_norm")

RECIPE = """\
model_name_or_path: {model}
datasets:
  - path: json
    data_files: {data}
reward_funcs:
  - side_rewards.parity_reward
num_generations: 4
per_device_train_batch_size: 16
max_completion_length: 16
generation_kwargs:
  sequence_bias: [[[2], 2.0]]
max_steps: {steps}
logging_steps: 1
save_steps: {steps}
learning_rate: 1.0e-3
report_to: none
bf16: true
full_determinism: true
seed: 0
"""

LORA_AND_KL = """\
use_peft: true
lora_r: 4
lora_alpha: 8
lora_dropout: 0.0
beta: 0.04
"""


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = write_model_and_prompts(
        tmp_path_factory.mktemp("grpo_cuda"), 32, num_layers=2, hidden_size=128, num_heads=4
    )
    (root / "lib").mkdir()
    (root / "lib" / "side_rewards.py").write_text(PARITY_REWARDS)
    return root


def recipe(root: Path, name: str, steps: int, extra: str = "") -> Path:
    path = root / f"{name}.yaml"
    text = RECIPE.format(model=root / "model", data=root / "data.jsonl", steps=steps)
    path.write_text(text + extra)
    return path


def run(root: Path, command: str, *args: str) -> None:
    """``trl grpo`` or ``ebpo grpo`` of this interpreter, with the user's environment."""
    env = {**os.environ, "PYTHONPATH": str(root / "lib")}
    done = subprocess.run(
        [str(BIN / command), "grpo", *args], env=env, cwd=root, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-6000:]


def logs(output_dir: Path, steps: int) -> list[dict]:
    state = json.loads((output_dir / f"checkpoint-{steps}" / "trainer_state.json").read_text())
    return [{k: h[k] for k in LOGGED if k in h} for h in state["log_history"] if "loss" in h]


@pytest.mark.parametrize(
    ("name", "steps", "extra"), [("plain", 3, ""), ("lora_kl", 4, LORA_AND_KL)]
)
def test_ebpo_grpo_on_cuda_logs_what_trl_grpo_logs(root, name, steps, extra):
    config = str(recipe(root, name, steps, extra))
    run(root, "trl", "--config", config, "--output_dir", f"trl_{name}")
    run(root, "ebpo", "--config", config, "--output_dir", f"ebpo_{name}",
        "--advantage_estimator", "grpo")  # fmt: skip
    theirs, ours = logs(root / f"trl_{name}", steps), logs(root / f"ebpo_{name}", steps)
    assert len(theirs) == steps
    assert ours == theirs
    assert any(h["loss"] != 0 for h in theirs) and any(0 < h["reward"] < 1 for h in theirs)
    if extra:  # the adapter is what was saved: LoRA trained, not the whole model
        assert (root / f"ebpo_{name}" / f"checkpoint-{steps}" / "adapter_config.json").is_file()
