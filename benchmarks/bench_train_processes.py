"""Wall time of ``ebpo train`` on 2 CPU processes against 1 process with the same global batch.

    .venv/bin/python benchmarks/bench_train_processes.py [--steps 20] [--prompts-per-step 32]
        [--group-size 4] [--warm-start-steps 300] [--eval-problems 4] [--rounds 1]

Both runs are the built-in job (the tiny model, 2 layers, width 128, on the built-in arithmetic
task) with the same options, hence the same ``prompts_per_step × group_size`` completions per
step, and one intra-op thread per process (the job's setting for the built-in model):

- 1 process: ``python -m ebpo train ...``;
- 2 processes: ``accelerate launch --multi_gpu --num_processes 2 ... -m ebpo train ...`` with
  ``ACCELERATE_USE_CPU=1`` (gloo); each process samples and back-propagates half of every step.

The warm start is trained once beforehand into a shared cache, so both runs load it. Printed for
each: the wall time of the whole command (interpreter, imports, launcher, the job), the job's own
``wall_time_s`` (``results.json``: loading, held-out evaluation before / after on the main
process, RL, saving) and TRL's ``train_runtime`` (the RL loop only), then the ratios 2 / 1. The
runs alternate ``--rounds`` times so that load on a shared machine hits both alike; with more
than one round the medians are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ebpo.utils.launch import cpu_launch_command, cpu_launch_env


def job_flags(args: argparse.Namespace) -> list[str]:
    return [
        "--steps", str(args.steps), "--prompts-per-step", str(args.prompts_per_step),
        "--group-size", str(args.group_size), "--warm-start-steps", str(args.warm_start_steps),
        "--eval-problems", str(args.eval_problems), "--eval-samples", "8", "--eval-every", "0",
        "--save-every", "0", "--quiet",
    ]  # fmt: skip


def run(command: list[str], env: dict[str, str], cwd: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode:
        sys.exit(f"{' '.join(command)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return seconds


def timings(run_dir: Path, command_s: float) -> dict[str, float]:
    results = json.loads((run_dir / "results.json").read_text())
    summary = [
        json.loads(line)
        for line in (run_dir / "metrics.jsonl").read_text().splitlines()
        if "train_runtime" in line
    ]
    return {
        "command": command_s,
        "job": results["wall_time_s"],
        "rl": summary[-1]["train_runtime"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--prompts-per-step", type=int, default=32)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--warm-start-steps", type=int, default=300)
    parser.add_argument("--eval-problems", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()

    env = (
        cpu_launch_env()
    )  # one thread a process, no Hub; ACCELERATE_USE_CPU only matters to accelerate
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cache = ["--cache-dir", str(work / "cache")]
        python = [sys.executable, "-m", "ebpo", "train"]
        print("training the warm start once (shared cache) ...", flush=True)
        run([*python, *job_flags(args), "--steps", "1", "--output-dir", str(work / "warm"), *cache],
            env, work)  # fmt: skip
        measured: dict[str, list[dict[str, float]]] = {"1 process": [], "2 processes": []}
        for round_ in range(args.rounds):
            for name in measured:
                out = work / f"{name.split()[0]}-{round_}"
                flags = [*job_flags(args), "--output-dir", str(out), *cache]
                command = (
                    [*python, *flags]
                    if name == "1 process"
                    else cpu_launch_command(["-m", "ebpo", "train", *flags], num_processes=2)
                )
                measured[name].append(timings(out, run(command, env, work)))
                print(f"round {round_ + 1} {name}: {measured[name][-1]}", flush=True)

    completions = args.prompts_per_step * args.group_size
    print(
        f"\nebpo train, {args.steps} RL steps of {args.prompts_per_step} prompts x G = "
        f"{args.group_size} ({completions} completions a step), {os.cpu_count()} CPUs, "
        f"{args.rounds} round(s)"
    )
    print(f"{'':14}{'command s':>11}{'job s':>9}{'RL s':>9}")
    medians = {}
    for name, rows in measured.items():
        medians[name] = {key: statistics.median(r[key] for r in rows) for key in rows[0]}
        m = medians[name]
        print(f"{name:14}{m['command']:>11.1f}{m['job']:>9.1f}{m['rl']:>9.1f}")
    two, one = medians["2 processes"], medians["1 process"]
    ratios = "".join(
        f"{two[key] / one[key]:>{w}.2f}" for key, w in (("command", 11), ("job", 9), ("rl", 9))
    )
    print(f"{'ratio 2/1':14}{ratios}")


if __name__ == "__main__":
    main()
