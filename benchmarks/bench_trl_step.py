"""Per-step time of EBPOTrainer vs plain trl.GRPOTrainer on the same tiny setup (target: ratio ≤ 1.05).

    .venv/bin/python benchmarks/bench_trl_step.py [--steps 6] [--rounds 6] [--estimator ebpo] [--threads 1]

Both trainers get the same tiny local Llama (2 layers, width 128, char tokenizer), the same data,
seed and options (16 completions x 8 tokens per step, 4 per prompt, no KL). The learning rate is
TRL's default (1e-6), so the two policies, hence the rollouts, stay practically identical and the
difference is the trainer's own cost. Rounds alternate GRPO and EBPO so that load on a shared
machine hits both alike; each step's wall time is taken with a callback, the first step of every
run (warm-up) is dropped, and the median over all kept steps is reported.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from tqdm import tqdm  # noqa: E402
from transformers import TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from ebpo.evaluation.models import build_char_tokenizer, build_tiny_llama  # noqa: E402
from ebpo.integrations.trl import EBPOConfig, EBPOTrainer  # noqa: E402


class StepTimer(TrainerCallback):
    """Wall and CPU time of every optimizer step (generation + scoring + loss + update).

    CPU time (``time.process_time``, all threads of this process) is the steadier figure on a
    shared machine: other users' load stretches wall time but not the work done here.
    """

    def __init__(self) -> None:
        self.times: list[tuple[float, float]] = []
        self._start = (0.0, 0.0)

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = (time.perf_counter(), time.process_time())

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(
            (time.perf_counter() - self._start[0], time.process_time() - self._start[1])
        )


class TimedEstimator:
    """Wraps the trainer's estimator to time the one call per generation batch EBPO adds."""

    def __init__(self, estimator) -> None:
        self.estimator = estimator
        self.seconds: list[float] = []

    def __call__(self, *args, **kwargs):
        start = time.perf_counter()
        result = self.estimator(*args, **kwargs)
        self.seconds.append(time.perf_counter() - start)
        return result

    def __getattr__(
        self, name
    ):  # state_dict() & co. (the trainer keeps the state before each batch)
        return getattr(self.estimator, name)


ESTIMATOR_SECONDS: list[float] = []


def parity_reward(completions, **kwargs):
    return [float(sum(map(ord, c)) % 2) for c in completions]


def run_once(kind: str, steps: int, estimator: str, out_dir: str) -> list[tuple[float, float]]:
    tokenizer = build_char_tokenizer()
    model = build_tiny_llama(tokenizer, num_layers=2, hidden_size=128, seed=0)
    dataset = Dataset.from_dict({"prompt": [f"{i}+{i}=" for i in range(256)]})
    common = {
        "output_dir": out_dir,
        "num_generations": 4,
        "per_device_train_batch_size": 16,
        "max_completion_length": 8,
        "max_steps": steps,
        "beta": 0.0,
        "logging_steps": steps,  # one log line per run: printing is not what we measure
        "report_to": "none",
        "save_strategy": "no",
        "disable_tqdm": True,
        "bf16": False,
        "use_cpu": True,
        "seed": 0,
    }
    timer = StepTimer()
    if kind == "grpo":
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=parity_reward,
            args=GRPOConfig(**common),
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[timer],
        )
    else:
        args = EBPOConfig(advantage_estimator=estimator, **common)
        trainer = EBPOTrainer(
            model=model,
            reward_funcs=parity_reward,
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[timer],
        )
        trainer.estimator = TimedEstimator(trainer.estimator)
    trainer.train()
    if kind != "grpo":
        ESTIMATOR_SECONDS.extend(trainer.estimator.seconds[1:])
    return timer.times[1:]  # drop the warm-up step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--steps", type=int, default=6, help="optimizer steps per run (first one is dropped)"
    )
    parser.add_argument("--rounds", type=int, default=6, help="alternating GRPO/EBPO rounds")
    parser.add_argument(
        "--estimator", default="ebpo", help="advantage_estimator of the EBPO trainer"
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1 keeps CPU time comparable)"
    )
    options = parser.parse_args()
    if options.steps < 2:
        raise ValueError(
            f"--steps must be at least 2 (the first step is warm-up), got {options.steps}"
        )
    if options.rounds < 1:
        raise ValueError(f"--rounds must be at least 1, got {options.rounds}")

    torch.set_num_threads(options.threads)
    times: dict[str, list[tuple[float, float]]] = {"grpo": [], "ebpo": []}
    with tempfile.TemporaryDirectory() as tmp:
        runs = [(r, kind) for r in range(options.rounds) for kind in ("grpo", "ebpo")]
        for r, kind in tqdm(runs, desc="runs"):
            times[kind] += run_once(
                kind, options.steps, options.estimator, os.path.join(tmp, f"{kind}{r}")
            )

    for index, clock in enumerate(("wall", "cpu")):
        grpo = statistics.median(t[index] for t in times["grpo"])
        ours = statistics.median(t[index] for t in times["ebpo"])
        print(
            f"[{clock:>4}] GRPOTrainer median step {grpo * 1000:7.1f} ms | "
            f"EBPOTrainer({options.estimator}) {ours * 1000:7.1f} ms | ratio {ours / grpo:.3f} (target <= 1.05)"
        )
    print(
        f"of which the estimator call: median {statistics.median(ESTIMATOR_SECONDS) * 1000:.2f} ms wall per step"
    )
    print(f"steps measured per trainer: {len(times['grpo'])}, torch threads: {options.threads}")


if __name__ == "__main__":
    main()
