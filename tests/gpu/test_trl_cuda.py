"""``EBPOTrainer`` on a GPU in bf16, under ``full_determinism=True`` (without it two identical runs
of either trainer differ after a few steps: CUDA kernels are not deterministic by default, so
parity on a GPU can only be checked under full determinism):

* ``advantage_estimator="grpo"`` logs exactly what TRL's ``GRPOTrainer`` logs (loss, reward, grad
  norm) at every step;
* an ``ebpo`` run resumed from its step-2 checkpoint ends with the uninterrupted run's estimator
  state, losses and weights.

A 2-layer, 128-wide Llama with a character tokenizer (nothing downloaded), 4 prompts x G = 4
completions of up to 16 tokens a step, 4 steps: seconds on one GPU."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")

from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from ebpo.evaluation.models import save_tiny_llama  # noqa: E402
from ebpo.integrations.trl import EBPOConfig, EBPOTrainer  # noqa: E402
from tests.gpu.cuda import GPU, needs_bf16  # noqa: E402

pytestmark = [*GPU, needs_bf16, pytest.mark.trl]

G, STEPS = 4, 4
LOGGED = ("loss", "reward", "grad_norm")


def parity_reward(completions, **kwargs):
    return [float((len(c) + sum(map(ord, c))) % 2) for c in completions]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("trl_cuda")
    save_tiny_llama(root / "model", num_layers=2, hidden_size=128, num_heads=4, seed=0)
    return root


@pytest.fixture(autouse=True)
def deterministic_afterwards_off():
    """``full_determinism`` switches torch's deterministic algorithms on for the process; the
    tests after these get the default back."""
    yield
    torch.use_deterministic_algorithms(False)


def arguments(config_class, output_dir: Path, **settings):
    options = {
        "output_dir": str(output_dir), "use_cpu": False, "bf16": True, "full_determinism": True,
        "seed": 0, "report_to": "none", "save_strategy": "no", "logging_steps": 1,
        "max_steps": STEPS, "num_generations": G, "per_device_train_batch_size": 4 * G,
        "max_completion_length": 16, "learning_rate": 1e-3, "beta": 0.0,
        "generation_kwargs": {"sequence_bias": [[[2], 2.0]]},
    }  # fmt: skip
    return config_class(**{**options, **settings})


def trainer(root: Path, config_class, trainer_class, output_dir: Path, **settings):
    data = Dataset.from_list([{"prompt": f"{a}+{a}="} for a in range(32)])
    return trainer_class(
        model=str(root / "model"),
        reward_funcs=[parity_reward],
        args=arguments(config_class, output_dir, **settings),
        train_dataset=data,
    )


def logged(history: list[dict]) -> list[dict]:
    return [{k: h[k] for k in LOGGED if k in h} for h in history if "loss" in h]


def test_grpo_on_cuda_logs_exactly_what_trls_grpo_trainer_logs(root):
    theirs = trainer(root, GRPOConfig, GRPOTrainer, root / "trl")
    theirs.train()
    ours = trainer(root, EBPOConfig, EBPOTrainer, root / "ebpo", advantage_estimator="grpo")
    ours.train()
    assert next(ours.model.parameters()).device.type == "cuda"
    expected, got = logged(theirs.state.log_history), logged(ours.state.log_history)
    assert len(expected) == STEPS and [sorted(h) for h in got] == [sorted(h) for h in expected]
    assert got == expected  # to the last digit: the same kernels in the same order
    assert any(0 < h["reward"] < 1 for h in expected) and any(h["loss"] != 0 for h in expected)


def test_an_ebpo_run_resumed_on_cuda_ends_as_the_uninterrupted_run(root):
    settings = {"advantage_estimator": "ebpo", "save_strategy": "steps", "save_steps": 2}
    full = trainer(root, EBPOConfig, EBPOTrainer, root / "full", **settings)
    full.train()
    checkpoint = root / "full" / "checkpoint-2"
    assert checkpoint.is_dir()
    resumed = trainer(root, EBPOConfig, EBPOTrainer, root / "resumed", **settings)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert resumed.estimator.state_dict() == full.estimator.state_dict()
    assert resumed.estimator.state_dict()["steps"] == STEPS
    full_logs, resumed_logs = logged(full.state.log_history), logged(resumed.state.log_history)
    assert len(full_logs) == len(resumed_logs) == STEPS  # the checkpoint's history, then 3 and 4
    assert resumed_logs == full_logs
    for (name, a), (_, b) in zip(
        full.model.named_parameters(), resumed.model.named_parameters(), strict=True
    ):
        assert torch.equal(a, b), name
    state = json.loads((root / "resumed" / "checkpoint-4" / "trainer_state.json").read_text())
    assert [h["loss"] for h in state["log_history"] if "loss" in h] == [
        h["loss"] for h in full_logs
    ]
    assert all(math.isfinite(h["loss"]) for h in full_logs)
