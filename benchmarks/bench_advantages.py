"""Speed of our estimators against verl's built-in GRPO, on identical inputs, in one run.

Workload (verl's output shape): 16,384 responses in groups of 4, rows shuffled, uuid-string group
ids (a numpy object array, as verl passes them), each advantage broadcast over 512 response tokens
times the response mask. Also: per-response advantages for N = 1,000,000 responses (int ids).

Targets: ours `ebpo` ≤ 1.0× verl `grpo_vectorized`; 1M responses in < 100 ms.

    .venv/bin/python benchmarks/bench_advantages.py [--repeats 20]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

import numpy as np
import torch

import ebpo


def median_ms(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def make_verl_like_batch(num_responses: int, group_size: int, num_tokens: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    num_groups = num_responses // group_size
    uids = np.array(
        [str(uuid.UUID(int=int(x))) for x in rng.integers(0, 2**63, num_groups)], dtype=object
    )
    index = np.repeat(uids, group_size)
    order = rng.permutation(num_responses)  # verl's _balance_batch reorders rows
    index = index[order]
    lengths = torch.from_numpy(rng.integers(1, num_tokens + 1, num_responses))
    response_mask = (torch.arange(num_tokens)[None, :] < lengths[:, None]).float()
    rewards = torch.from_numpy((rng.random(num_responses) < 0.4).astype(np.float32))
    token_level_rewards = torch.zeros(num_responses, num_tokens)
    token_level_rewards[torch.arange(num_responses), lengths - 1] = (
        rewards  # reward on the last token
    )
    return token_level_rewards, response_mask, index


def ours(name: str):
    estimator = ebpo.make_estimator(name)

    def compute(token_level_rewards, response_mask, index):
        scores = token_level_rewards.sum(dim=-1)
        result = estimator(scores, index)
        return result.advantages.unsqueeze(-1) * response_mask

    return compute


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--responses", type=int, default=16_384)
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument(
        "--threads", type=int, default=None, help="torch intra-op threads (default: torch's)"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch threads: {torch.get_num_threads()}")

    batch = make_verl_like_batch(args.responses, 4, args.tokens)
    timings: dict[str, float] = {}
    print(
        f"{args.responses} responses x {args.tokens} tokens, groups of 4, uuid ids; median of {args.repeats} runs"
    )
    try:
        from verl.trainer.ppo.core_algos import get_adv_estimator_fn  # optional heavy dependency

        for verl_name in ("grpo", "grpo_vectorized"):
            fn = get_adv_estimator_fn(verl_name)
            timings[f"verl {verl_name}"] = median_ms(
                lambda fn=fn: fn(*batch, epsilon=1e-6, norm_adv_by_std_in_grpo=True),
                max(3, args.repeats // 4) if verl_name == "grpo" else args.repeats,
            )
        verl_adv, _ = get_adv_estimator_fn("grpo_vectorized")(
            *batch, epsilon=1e-6, norm_adv_by_std_in_grpo=True
        )
        torch.testing.assert_close(
            ours("grpo")(*batch), verl_adv, atol=1e-5, rtol=1e-5
        )  # same numbers
    except ImportError:
        print("verl not installed: only our estimators are timed")
    for name in ("grpo", "ebpo"):
        fn = ours(name)
        timings[f"ebpo.{name}"] = median_ms(lambda fn=fn: fn(*batch), args.repeats)

    for label, ms in timings.items():
        print(f"  {label:<24} {ms:8.2f} ms")
    if "verl grpo_vectorized" in timings:
        reference = timings["verl grpo_vectorized"]
        for name in ("grpo", "ebpo"):
            ratio = timings[f"ebpo.{name}"] / reference
            print(f"  ratio ebpo.{name} / verl grpo_vectorized = {ratio:.2f}x (target <= 1.0x)")

    n = 1_000_000
    rng = np.random.default_rng(1)
    rewards = torch.from_numpy((rng.random(n) < 0.4).astype(np.float32))
    ids = torch.from_numpy(rng.permutation(n) // 4)
    estimator = ebpo.make_estimator("ebpo")
    ms = median_ms(lambda: estimator(rewards, ids), max(3, args.repeats // 4))
    print(f"  ebpo.ebpo per-response advantages, N = {n:,}: {ms:.1f} ms (target < 100 ms)")


if __name__ == "__main__":
    main()
