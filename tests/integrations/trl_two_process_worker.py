"""Worker for test_trl_distributed.py: train EBPOTrainer a few steps on this process, dump what it saw.

Run under ``accelerate launch --num_processes 2 --cpu`` (or any launcher that sets up a gloo process
group). Each rank writes ``rank<k>.json`` into the directory given as the first argument with its
estimator state, the gathered rewards of every generation batch, and its local advantages.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from datasets import Dataset

from ebpo.integrations.trl import EBPOTrainer, make_config
from ebpo.models import build_char_tokenizer, build_tiny_llama


class RecordingTrainer(EBPOTrainer):
    """Keeps the gathered rewards TRL scored and the local advantages handed to the loss."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen_rewards: list[list[float]] = []
        self.local_advantages: list[list[float]] = []

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self.seen_rewards.append(rewards[:, 0].tolist())
        return rewards

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        self.local_advantages.append(output["advantages"].tolist())
        return output


def parity_reward(completions, **kwargs):
    return [float(sum(map(ord, c)) % 2) for c in completions]


def main(out_dir: str) -> None:
    tokenizer = build_char_tokenizer()
    model = build_tiny_llama(tokenizer, num_layers=2, hidden_size=128, seed=0)
    dataset = Dataset.from_dict({"prompt": [f"{i}+{i}=" for i in range(32)]})
    args = make_config(
        "ebpo",
        output_dir=str(Path(out_dir) / "run"),
        num_generations=4,
        per_device_train_batch_size=8,  # 2 processes x 8 = 16 completions = 4 groups per step
        max_completion_length=8,
        max_steps=3,
        beta=0.0,
        learning_rate=1e-3,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        bf16=False,
        use_cpu=True,
        seed=0,
    )
    trainer = RecordingTrainer(
        model=model, reward_funcs=parity_reward, args=args, train_dataset=dataset, processing_class=tokenizer
    )
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


if __name__ == "__main__":
    main(sys.argv[1])
