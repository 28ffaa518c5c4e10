"""Worker for test_distributed.py: train EBPOTrainer a few steps on this process, dump what it saw.

Run under ``torchrun --nproc_per_node 2`` (or any launcher that sets up a gloo process group):

    two_process_worker.py OUT_DIR [MODE ...]     # the modes in this order (default: shared)

    shared   rank<k>.json: estimator state, gathered rewards of every generation batch, local
             advantages
    resume   resume<k>.json: an uninterrupted run and a run resumed inside a generation batch
    diverge  diverge<k>.json: the error of a run whose rank 1 starts from another estimator state

Several modes in one launch share the start-up of the two processes (most of a mode's time).

The setup (tiny Llama, char tokenizer, prompts, parity reward, recording trainer) is the one of
test_trainer.py, imported from it (this file's directory is on ``sys.path`` when run as a script).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
from test_trainer import RecordingTrainer, build, parity_reward, tiny_args

from ebpo.evaluation.models import build_char_tokenizer
from ebpo.integrations.trl.consistency import RanksDisagreeError
from ebpo.utils.checkpoints import MARKER


def make_trainer(run_dir: Path, **overrides) -> RecordingTrainer:
    # 2 processes x 8 = 16 completions = 4 groups per micro-step
    args = tiny_args(run_dir, "ebpo", per_device_train_batch_size=8, **overrides)
    return build(build_char_tokenizer(), args, parity_reward)


def shared(out_dir: str) -> None:
    trainer = make_trainer(Path(out_dir) / "run")
    trainer.train()
    rank = trainer.accelerator.process_index
    record = {
        "rank": rank,
        "num_processes": trainer.accelerator.num_processes,
        "state": trainer.estimator.state_dict(),
        "rewards": [rewards[:, 0].tolist() for rewards in trainer.rewards_per_func],
        "local_advantages": [output["advantages"].tolist() for output in trainer.outputs],
    }
    (Path(out_dir) / f"rank{rank}.json").write_text(json.dumps(record))


def resume(out_dir: str) -> None:
    """4 optimizer steps of 2 micro-steps, one generation batch every 4 micro-steps; resume from
    checkpoint-1, which falls inside the first generation batch. (The optimizer state of a
    multi-process CPU run is loaded by EBPOTrainer itself: transformers maps it to ``cpu:0``.)"""
    settings = {
        "max_steps": 4,
        "gradient_accumulation_steps": 2,
        "steps_per_generation": 4,
        "save_strategy": "steps",
        "save_steps": 1,
    }
    full = make_trainer(Path(out_dir) / "full", **settings)
    full.train()
    checkpoint = Path(full.args.output_dir) / "checkpoint-1"
    resumed = make_trainer(Path(out_dir) / "resumed", **settings)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    rank = full.accelerator.process_index
    record = {
        "rank": rank,
        "buffers": sorted(
            name for name in os.listdir(checkpoint) if name.startswith("ebpo_generation_buffer")
        ),
        # what the completeness marker (written by rank 0 after a barrier) lists
        "listed": sorted(json.loads((checkpoint / MARKER).read_text())["files"]),
        "full_state": full.estimator.state_dict(),
        "resumed_state": resumed.estimator.state_dict(),
        "full_loss_advantages": [a.tolist() for a in full.loss_advantages],
        "resumed_loss_advantages": [a.tolist() for a in resumed.loss_advantages],
        "generations": [len(full.outputs), len(resumed.outputs)],
    }
    (Path(out_dir) / f"resume{rank}.json").write_text(json.dumps(record))


def diverge(out_dir: str) -> None:
    """Rank 1's estimator has counted one extra batch before training: the first generation batch
    must stop the run on every rank with the trainer's cross-rank check."""
    trainer = make_trainer(Path(out_dir) / "diverge-run")
    rank = trainer.accelerator.process_index
    if rank == 1:
        trainer.estimator(torch.tensor([0.0, 1.0, 1.0, 1.0]), torch.tensor([0, 0, 1, 1]))
    record: dict = {"rank": rank, "error": None}
    try:
        trainer.train()
    except RanksDisagreeError as error:
        record = {"rank": rank, "error": str(error), "generations": len(trainer.outputs)}
    (Path(out_dir) / f"diverge{rank}.json").write_text(json.dumps(record))


MODES = {"shared": shared, "resume": resume, "diverge": diverge}

if __name__ == "__main__":
    modes = sys.argv[2:] or ["shared"]
    unknown = [mode for mode in modes if mode not in MODES]
    if unknown:
        sys.exit(
            f"two_process_worker.py: unknown mode(s) {unknown}; expected some of {list(MODES)}"
        )
    for mode in modes:
        MODES[mode](sys.argv[1])
