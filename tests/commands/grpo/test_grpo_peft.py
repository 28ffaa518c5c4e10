"""``ebpo grpo --use_peft``: LoRA training through TRL's ``ModelConfig`` as ``trl grpo`` does it.

Only the adapters train (the base weights stay as loaded), every checkpoint holds the adapter and
the estimator's state, and a run resumed from a checkpoint ends exactly where the uninterrupted
run ends: the same estimator state and the same adapter weights.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("peft")

import torch  # noqa: E402
from peft import PeftModel  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from ebpo.cli import main  # noqa: E402
from ebpo.integrations.trl import EBPOTrainer  # noqa: E402
from ebpo.utils.checkpoints import MARKER  # noqa: E402
from tests.commands.grpo.grpo_files import write_model_and_prompts  # noqa: E402

pytestmark = [pytest.mark.trl]

STEPS = 3
COMPLETIONS_PER_STEP = 4  # per_device_train_batch_size: 2 prompts x G = 2

RECIPE = """\
model_name_or_path: {model}
datasets:
  - path: json
    data_files: {data}
reward_funcs:
  - tests.commands.grpo.test_grpo_peft.digit_share_reward
num_generations: 2
per_device_train_batch_size: 4
max_completion_length: 8
max_steps: {steps}
save_steps: 1
learning_rate: 5.0e-2
beta: 0.0
logging_steps: 1
report_to: none
use_cpu: true
bf16: false
seed: 3
output_dir: {out}
advantage_estimator: ebpo
use_peft: true
lora_r: 4
lora_alpha: 8
lora_dropout: 0.0
"""


def digit_share_reward(completions: list[str], **kwargs) -> list[float]:
    """The share of digits in each completion: varies within a group, so advantages are non-zero
    and the adapters move (an imported reward, as ``trl grpo`` takes them by path)."""
    return [sum(c.isdigit() for c in text) / max(len(text), 1) for text in completions]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return write_model_and_prompts(
        tmp_path_factory.mktemp("peft"), 16, num_layers=1, hidden_size=32, seed=0
    )


def run(root: Path, name: str, *flags: str, monkeypatch) -> EBPOTrainer:
    """``ebpo grpo --config <recipe> *flags``; returns the trainer TRL's script built, with
    ``generations``: how many generation batches it sampled."""
    config = root / f"{name}.yaml"
    config.write_text(
        RECIPE.format(model=root / "model", data=root / "data.jsonl", out=root / name, steps=STEPS)
    )
    built: list[EBPOTrainer] = []
    original_init = EBPOTrainer.__init__

    original_generate = EBPOTrainer._generate_and_score_completions

    def recording_init(self, *args, **kwargs):
        built.append(self)
        self.generations = 0
        original_init(self, *args, **kwargs)

    def counting_generate(self, *args, **kwargs):
        self.generations += 1
        return original_generate(self, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(EBPOTrainer, "__init__", recording_init)
        patch.setattr(EBPOTrainer, "_generate_and_score_completions", counting_generate)
        assert main(["grpo", "--config", str(config), *flags]) == 0
    assert len(built) == 1
    return built[0]


def lora_weights(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path / "adapter_model.safetensors"))


def test_lora_trains_only_the_adapters_and_checkpoints_hold_the_estimator(root, monkeypatch):
    trainer = run(root, "full", monkeypatch=monkeypatch)
    assert trainer.generations == STEPS
    assert isinstance(trainer.model, PeftModel)
    trainable = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)

    # the base weights are those loaded from disk; the adapters moved away from their start (B = 0)
    base = load_file(str(root / "model" / "model.safetensors"))
    merged_free = trainer.model.get_base_model().state_dict()
    for name, value in base.items():
        key = name.replace(".weight", ".base_layer.weight")
        torch.testing.assert_close(
            merged_free.get(key, merged_free.get(name)), value, rtol=0, atol=0
        )
    final = lora_weights(root / "full")
    assert any(
        name.endswith("lora_B.weight") and value.abs().sum() > 0 for name, value in final.items()
    )

    out = root / "full"
    assert not (out / "model.safetensors").exists()  # an adapter, not a full copy of the model
    for step in range(1, STEPS + 1):
        checkpoint = out / f"checkpoint-{step}"
        assert (checkpoint / "adapter_model.safetensors").is_file()
        saved = json.loads((checkpoint / "ebpo_estimator_state.json").read_text())
        assert saved["estimator"] == "ebpo" and saved["steps"] == step
        assert saved["global"]["rewards"]["count"] == COMPLETIONS_PER_STEP * step
        assert (checkpoint / MARKER).is_file()  # complete: a resume may take it
    assert saved == trainer.estimator.state_dict()


def test_a_lora_run_resumed_from_a_checkpoint_ends_as_the_uninterrupted_run(root, monkeypatch):
    full_dir = root / "full"
    if not (full_dir / f"checkpoint-{STEPS}").is_dir():  # this test alone (-k)
        run(root, "full", monkeypatch=monkeypatch)
    resumed = run(
        root, "resumed", "--resume_from_checkpoint", str(full_dir / "checkpoint-1"),
        monkeypatch=monkeypatch,
    )  # fmt: skip
    assert resumed.generations == STEPS - 1  # it continued from step 1: a real resume
    full_state = json.loads(
        (full_dir / f"checkpoint-{STEPS}" / "ebpo_estimator_state.json").read_text()
    )
    assert resumed.estimator.state_dict() == full_state
    full, again = lora_weights(full_dir), lora_weights(root / "resumed")
    assert full.keys() == again.keys()
    for name in full:
        torch.testing.assert_close(again[name], full[name], rtol=0, atol=0, msg=name)
