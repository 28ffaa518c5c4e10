"""Wall time of ``ebpo grpo`` on 2 CPU processes against 1 process with the same global batch.

    .venv/bin/python benchmarks/bench_processes.py [--steps 20] [--batch 8] [--rounds 3] [--threads-one 1]

Both runs train the same tiny local Llama (2 layers, width 128, char tokenizer) with the same
`trl grpo`-shaped YAML, ``num_generations`` 4 and ``max_completion_length`` 32:

- 2 processes: ``accelerate launch --multi_gpu --num_processes 2 ... -m ebpo grpo`` with
  ``ACCELERATE_USE_CPU=1`` (gloo), ``per_device_train_batch_size = --batch``, one thread each;
- 1 process: ``python -m ebpo grpo`` with ``per_device_train_batch_size = 2 x --batch`` (the same
  completions per optimizer step; no gradient accumulation), ``--threads-one`` intra-op threads
  (default 1, as each of the 2 processes; 2 lets it use both cores, which on a loaded machine
  oversubscribes them and makes its times erratic).

It prints, for each, the wall time of the whole command (interpreter start, imports, model load,
training, save) and TRL's own ``train_runtime`` (the training loop only), then the ratios
(2 processes / 1 process). The runs alternate ``--rounds`` times so that load on a shared machine
hits both alike; the median and the fastest round are reported (on a loaded machine the fastest is
the steadier figure).

``--check-cost`` instead measures, on 2 processes, what EBPOTrainer's cross-rank check of the
estimator state costs per generation batch: the state digest and the all-gather of the digests
(:mod:`ebpo.integrations.trl.consistency`), median over 200 calls.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ebpo.evaluation.models import save_tiny_llama
from ebpo.utils.launch import cpu_launch_command, cpu_launch_env

YAML = """\
model_name_or_path: {root}/model
datasets:
  - path: json
    data_files: {root}/data.jsonl
reward_funcs:
  - bench_process_rewards.parity_reward
advantage_estimator: ebpo
num_generations: 4
max_completion_length: 32
max_steps: {steps}
save_strategy: "no"
learning_rate: 1.0e-4
beta: 0.0
logging_steps: 1
report_to: none
use_cpu: true
bf16: false
seed: 0
"""

REWARDS = """\
def parity_reward(completions, **kwargs):
    return [float(sum(map(ord, str(c))) % 2) for c in completions]
"""


def prepare(root: Path) -> None:
    """The tiny model, 64 prompts ``a+a=`` and the reward module, on disk."""
    save_tiny_llama(root / "model", num_layers=2, hidden_size=128, seed=0)
    rows = [{"prompt": f"{a}+{a}=", "answer": str(2 * a)} for a in range(64)]
    (root / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (root / "lib").mkdir()
    (root / "lib" / "bench_process_rewards.py").write_text(REWARDS)


def run(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds of the command, TRL's train_runtime)."""
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(command)}\n{done.stderr[-4000:]}")
    found = re.findall(r"'train_runtime': '([0-9.]+)'", done.stdout)
    if not found:
        sys.exit(f"no train_runtime in the output of {' '.join(command)}")
    return wall, float(found[-1])


def bench(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        prepare(root)
        config = root / "run.yaml"
        config.write_text(YAML.format(root=root, steps=args.steps))
        # one thread a process, no Hub; ACCELERATE_USE_CPU only matters to accelerate
        base = cpu_launch_env({"PYTHONPATH": str(root / "lib")})
        grpo = ["-m", "ebpo", "grpo", "--config", str(config)]
        two = [
            *cpu_launch_command(grpo, 2), "--output_dir", str(root / "two"),
            "--per_device_train_batch_size", str(args.batch),
        ]  # fmt: skip
        one = [
            sys.executable, *grpo, "--output_dir", str(root / "one"),
            "--per_device_train_batch_size", str(2 * args.batch),
        ]  # fmt: skip
        one_env = {**base, "OMP_NUM_THREADS": str(args.threads_one)}
        times: dict[str, list[tuple[float, float]]] = {"two": [], "one": []}
        for _ in range(args.rounds):
            times["two"].append(run(two, base))
            times["one"].append(run(one, one_env))

    completions = 2 * args.batch
    print(f"{args.steps} steps of {completions} completions (4 per prompt, up to 32 tokens each)")
    summary = {}
    for name, label in (("one", f"1 process, {args.threads_one} threads"), ("two", "2 processes")):
        walls, trains = [t[0] for t in times[name]], [t[1] for t in times[name]]
        summary[name] = (
            statistics.median(walls),
            statistics.median(trains),
            min(walls),
            min(trains),
        )
        rounds = ", ".join(f"{w:.1f}/{t:.1f}" for w, t in times[name])
        print(
            f"  {label:22s} median: wall {summary[name][0]:6.1f} s, train_runtime "
            f"{summary[name][1]:6.1f} s; fastest: {summary[name][2]:6.1f} s, {summary[name][3]:6.1f} s"
            f"  (wall/train of each round: {rounds})"
        )
    ratios = [two / one for two, one in zip(summary["two"], summary["one"], strict=True)]
    print(
        "  ratio 2 processes / 1 process: median wall {:.2f}, train_runtime {:.2f}; "
        "fastest wall {:.2f}, train_runtime {:.2f}".format(*ratios)
    )


def check_cost_worker() -> None:
    """Under ``accelerate launch``: time the digest and the all-gather of EBPOTrainer's check."""
    import torch
    from accelerate import Accelerator

    import ebpo
    from ebpo.integrations.trl.consistency import check_ranks_agree, gather_digests, state_digest

    accelerator = Accelerator(cpu=True)
    estimator = ebpo.make_estimator("ebpo")
    generator = torch.Generator().manual_seed(0)
    for _ in range(100):  # a state after 100 batches (its size does not grow with history)
        estimator(torch.randint(0, 2, (64,), generator=generator).float(), torch.arange(64) // 8)
    digest_times, gather_times = [], []
    for _ in range(200):
        start = time.perf_counter()
        digest = state_digest(estimator.state_dict())
        middle = time.perf_counter()
        check_ranks_agree(gather_digests(accelerator, digest), 0, 0)
        digest_times.append(middle - start)
        gather_times.append(time.perf_counter() - middle)
    if accelerator.is_main_process:
        print(
            f"{accelerator.num_processes} processes: state digest "
            f"{statistics.median(digest_times) * 1e6:.0f} µs, all-gather + compare "
            f"{statistics.median(gather_times) * 1e6:.0f} µs (medians of 200)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=8, help="completions per process and step")
    parser.add_argument("--threads-one", type=int, default=1, help="threads of the 1-process run")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--check-cost", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        check_cost_worker()
    elif args.check_cost:
        command = cpu_launch_command([__file__, "--worker"], 2)
        sys.exit(subprocess.run(command, env=cpu_launch_env()).returncode)
    else:
        bench(args)


if __name__ == "__main__":
    main()
