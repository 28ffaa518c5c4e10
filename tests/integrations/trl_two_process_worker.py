"""Worker for test_trl_distributed.py: train EBPOTrainer a few steps on this process, dump what it saw.

Run under ``torchrun --nproc_per_node 2`` (or any launcher that sets up a gloo process group):

    trl_two_process_worker.py OUT_DIR            # rank<k>.json: estimator state, gathered rewards of
                                                 # every generation batch, local advantages
    trl_two_process_worker.py OUT_DIR resume     # resume<k>.json: an uninterrupted run and a run
                                                 # resumed inside a generation batch, side by side
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
from datasets import Dataset

from ebpo.integrations.trl import EBPOTrainer, make_config
from ebpo.models import build_char_tokenizer, build_tiny_llama


class RecordingTrainer(EBPOTrainer):
    """Keeps the gathered rewards TRL scored and the local advantages handed to the loss."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen_rewards: list[list[float]] = []
        self.local_advantages: list[list[float]] = []
        self.loss_advantages: list[list[float]] = []

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self.seen_rewards.append(rewards[:, 0].tolist())
        return rewards

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        self.local_advantages.append(output["advantages"].tolist())
        return output

    def _compute_loss(self, model, inputs):
        self.loss_advantages.append(inputs["advantages"].tolist())
        return super()._compute_loss(model, inputs)


def parity_reward(completions, **kwargs):
    return [float(sum(map(ord, c)) % 2) for c in completions]


def make_trainer(output_dir: Path, **overrides) -> RecordingTrainer:
    tokenizer = build_char_tokenizer()
    model = build_tiny_llama(tokenizer, num_layers=2, hidden_size=128, seed=0)
    dataset = Dataset.from_dict({"prompt": [f"{i}+{i}=" for i in range(32)]})
    options = {
        "output_dir": str(output_dir),
        "num_generations": 4,
        "per_device_train_batch_size": 8,  # 2 processes x 8 = 16 completions = 4 groups per micro-step
        "max_completion_length": 8,
        "max_steps": 3,
        "beta": 0.0,
        "learning_rate": 1e-3,
        "logging_steps": 1,
        "report_to": "none",
        "save_strategy": "no",
        "bf16": False,
        "use_cpu": True,
        "seed": 0,
        **overrides,
    }
    return RecordingTrainer(
        model=model, reward_funcs=parity_reward, args=make_config("ebpo", **options), train_dataset=dataset,
        processing_class=tokenizer,
    )


def main(out_dir: str) -> None:
    trainer = make_trainer(Path(out_dir) / "run")
    trainer.train()
    rank = trainer.accelerator.process_index
    record = {
        "rank": rank,
        "num_processes": trainer.accelerator.num_processes,
        "state": trainer.estimator.state_dict(),
        "rewards": trainer.seen_rewards,
        "local_advantages": trainer.local_advantages,
    }
    (Path(out_dir) / f"rank{rank}.json").write_text(json.dumps(record))


def load_cpu_checkpoints_of_any_rank() -> None:
    """transformers 5.10 loads the optimizer state of a multi-process run with
    ``map_location=args.device``, which is ``cpu:0`` on every CPU process, and torch cannot restore
    onto an indexed CPU device: resuming a multi-process CPU run fails inside transformers, before
    EBPOTrainer is involved. Map such locations to plain "cpu" (test worker only)."""
    original = torch.load

    def load(*args, map_location=None, **kwargs):
        if isinstance(map_location, torch.device) and map_location.type == "cpu":
            map_location = "cpu"
        return original(*args, map_location=map_location, **kwargs)

    torch.load = load


def resume(out_dir: str) -> None:
    """4 optimizer steps of 2 micro-steps, one generation batch every 4 micro-steps; resume from
    checkpoint-1, which falls inside the first generation batch."""
    load_cpu_checkpoints_of_any_rank()
    settings = {"max_steps": 4, "gradient_accumulation_steps": 2, "steps_per_generation": 4,
                "save_strategy": "steps", "save_steps": 1}
    full = make_trainer(Path(out_dir) / "full", **settings)
    full.train()
    checkpoint = Path(out_dir) / "full" / "checkpoint-1"
    resumed = make_trainer(Path(out_dir) / "resumed", **settings)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    rank = full.accelerator.process_index
    record = {
        "rank": rank,
        "buffers": sorted(name for name in os.listdir(checkpoint) if name.startswith("ebpo_generation_buffer")),
        "full_state": full.estimator.state_dict(),
        "resumed_state": resumed.estimator.state_dict(),
        "full_loss_advantages": full.loss_advantages,
        "resumed_loss_advantages": resumed.loss_advantages,
        "generations": [len(full.seen_rewards), len(resumed.seen_rewards)],
    }
    (Path(out_dir) / f"resume{rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    if sys.argv[2:] == ["resume"]:
        resume(sys.argv[1])
    else:
        main(sys.argv[1])
