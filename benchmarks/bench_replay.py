"""``ebpo replay`` on a large run: 1,000 steps × 4,096 responses, against references measured in the
same run.

Workload: a verl v1 rollout directory written by verl's own ``_write_generations`` (needs the
verl extra; written once into ``--dump-dir`` and reused): 1,024 prompts × 4 responses a step, uid
``{prompt uuid}_{session}_0``, a short prompt and response text per row (~230 bytes a line, 0.95 GB
in all), 0/1 rewards from per-prompt pass rates that rise over the run (Beta-distributed: many
prompts near 0 or 1, as on a math set), plus 8 padding rows a step.

Timed (wall clock):

* ``ebpo replay DIR --output-dir OUT`` as a user runs it (a new process: start-up included), the
  default estimators (grpo, ebpo, ebpo_within, jspo_plus_plus), JSON, CSV and plots included —
  the target: under a minute on 2 cores;
* reference A — parsing the same files with pyarrow alone (the three fields, nothing else): the
  floor of any reader that parses the text;
* reference B — the four estimators alone on the same steps, tensors prepared beforehand;
* reference C — Python's ``json.loads`` on every line of a sample of files, scaled to the run
  (what a reader in pure Python would cost).

Also the replay process's peak resident memory, next to that of the same command on the first
10 steps only: reading in steps, memory does not grow with the run (the per-step records aside).

    .venv/bin/python benchmarks/bench_replay.py [--steps 1000] [--responses 4096]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from ebpo.analysis.replay.engine import DEFAULT_ESTIMATORS
from ebpo.analysis.replay.sources import Source
from ebpo.estimators import make_estimator

GROUP_SIZE = 4
PADDING = 8


def write_run(directory: Path, steps: int, responses: int, seed: int = 0) -> None:
    """The rollout directory of a run, by verl's v1 writer (module doc); skipped when complete."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer  # the verl extra

    marker = directory / "complete.json"
    spec = {"steps": steps, "responses": responses, "seed": seed}
    if marker.exists() and json.loads(marker.read_text()) == spec:
        return
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    prompts = responses // GROUP_SIZE
    for step in tqdm(range(1, steps + 1), desc="writing the run with verl's writer", unit="step"):
        # pass rates: Beta(0.4, 0.6) at the start, drifting up as the policy learns
        rates = np.clip(rng.beta(0.4, 0.6, prompts) + 0.25 * step / steps, 0, 1)
        rewards = (rng.random((prompts, GROUP_SIZE)) < rates[:, None]).astype(float)
        uids = [str(uuid.UUID(int=int(x))) for x in rng.integers(0, 2**62, prompts)]
        keys = [f"{u}_{s}_0" for u in uids for s in range(GROUP_SIZE)]
        scores = rewards.reshape(-1).tolist()
        pad = "pad" + uuid.UUID(int=step).hex
        keys += [f"{pad}_{i}_0" for i in range(PADDING)]
        scores += [0.0] * PADDING
        n = len(keys)
        inputs = [f"user\nWhat is {i % 97} + {step}? Think step by step." for i in range(n)]
        outputs = [f"The answer is {i % 97 + step}." for i in range(n)]
        with contextlib.redirect_stdout(io.StringIO()):  # verl prints a line per file
            PPOTrainer._write_generations(
                inputs, outputs, ["42"] * n, scores, {"uid": keys}, str(directory), step
            )
    marker.write_text(json.dumps(spec))


def parse_only(directory: Path) -> float:
    import pyarrow as pa
    import pyarrow.json as pj

    schema = pa.schema([("uid", pa.string()), ("score", pa.float64()), ("step", pa.int64())])
    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    start = time.perf_counter()
    for path in directory.glob("*.jsonl"):
        pj.read_json(path, parse_options=options)
    return time.perf_counter() - start


def estimators_only(directory: Path) -> float:
    batches = [
        (torch.from_numpy(b.rewards), torch.from_numpy(b.group_index))
        for b in Source([str(directory)], "verl").steps()
    ]
    estimators = [make_estimator(name) for name in DEFAULT_ESTIMATORS]
    torch.set_num_threads(1)
    start = time.perf_counter()
    for rewards, index in batches:
        for estimator in estimators:
            estimator(rewards, index)
    return time.perf_counter() - start


def python_json(directory: Path, sample: int, steps: int) -> float:
    files = sorted(directory.glob("*.jsonl"))[:sample]
    start = time.perf_counter()
    for path in files:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                row = json.loads(line)
                _ = (row["uid"], row["score"], row["step"])
    return (time.perf_counter() - start) * steps / len(files)


#: the command in a new process, reporting its own peak memory (VmHWM, kB; Linux). getrusage's
#: ru_maxrss would include this process's memory at the fork (Linux keeps the larger of the
#: pre-exec and post-exec peaks), and this process has imported verl to write the run
CHILD = """
import re, sys
from ebpo.cli import main
code = main(sys.argv[1:])
with open("/proc/self/status") as status:
    print(re.search(r"VmHWM:\\s+(\\d+)", status.read()).group(1), file=sys.stderr)
sys.exit(code)
"""


def replay_command(directory: Path, out: Path) -> tuple[float, float]:
    """Wall time (s) and peak resident memory (MiB) of ``ebpo replay directory`` in a new
    process."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, "replay", str(directory), "--output-dir", str(out)],
        check=True,
        stderr=subprocess.PIPE,
        text=True,
    )
    elapsed = time.perf_counter() - start
    return elapsed, int(done.stderr.strip().splitlines()[-1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--responses", type=int, default=4096)
    parser.add_argument("--dump-dir", default="/tmp/ebpo-bench-replay/rollouts")
    parser.add_argument("--output-dir", default="/tmp/ebpo-bench-replay/report")
    parser.add_argument("--json-sample", type=int, default=50, help="files for reference C")
    args = parser.parse_args()
    directory = Path(args.dump_dir)
    write_run(directory, args.steps, args.responses)
    size = sum(p.stat().st_size for p in directory.glob("*.jsonl")) / 1e9
    print(
        f"run: {args.steps} steps x {args.responses} responses (+{PADDING} padding rows), {size:.2f} GB"
    )

    first = directory.parent / "first-10-steps"
    first.mkdir(exist_ok=True)
    for step in range(1, 11):
        link = first / f"{step}.jsonl"
        if not link.exists():
            link.symlink_to(directory / f"{step}.jsonl")
    _, peak_small = replay_command(first, Path(args.output_dir + "-10"))
    replay, peak = replay_command(directory, Path(args.output_dir))
    parse = parse_only(directory)
    estimate = estimators_only(directory)
    plain = python_json(directory, args.json_sample, args.steps)
    print()
    print(f"ebpo replay (4 estimators, JSON + CSV + plots): {replay:7.1f} s")
    print(f"peak RSS: {peak:,.0f} MiB (the first 10 steps only: {peak_small:,.0f} MiB)")
    print(
        f"A  pyarrow parse only:                          {parse:7.1f} s   replay / A = {replay / parse:.2f}"
    )
    print(
        f"B  estimators only:                             {estimate:7.1f} s   replay / B = {replay / estimate:.2f}"
    )
    print(
        f"C  Python json.loads ({args.json_sample} files, scaled):"
        f"{plain:18.1f} s   replay / C = {replay / plain:.2f}"
    )
    print(f"target: replay < 60 s -> {'met' if replay < 60 else 'MISSED'}")


if __name__ == "__main__":
    main()
