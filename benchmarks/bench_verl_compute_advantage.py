"""EBPO through verl's ``compute_advantage`` vs verl's ``grpo_vectorized``, on one DataProto.

    .venv/bin/python benchmarks/bench_verl_compute_advantage.py [--groups 4096 --group-size 4
        --length 512 --repeats 15 --threads 1 --estimators ebpo ebpo_bb jspo]

Both estimators run through ``verl.trainer.ppo.ray_trainer.compute_advantage`` on the same batch
(uuid-string uids as verl makes them, rows shuffled as after ``_balance_batch``, random response
lengths, 0/1 outcome reward on the last token), interleaved repeat by repeat so that machine load
hits both alike. Prints the median time of each, the ratio to ``grpo_vectorized`` (target ≤ 1.0)
and where EBPO's time goes (uid factorization, core estimator, token broadcast).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable

import numpy as np
import torch
from tqdm import tqdm

from ebpo.estimators.validation import factorize
from ebpo.integrations.verl.advantage import nonempty_rows, resolve_options
from ebpo.integrations.verl.state import STORE
from ebpo.utils.runtime import torch_threads


def make_batch(num_groups: int, group_size: int, length: int, padding: int, seed: int):
    """A verl DataProto shaped like one PPO step's batch."""
    from verl import DataProto  # optional heavy dependency (verl extra)

    gen = torch.Generator().manual_seed(seed)
    uids = np.array([str(uuid.uuid4()) for _ in range(num_groups)], dtype=object)
    index = np.repeat(uids, group_size)
    n = len(index)
    lengths = torch.randint(1, length + 1, (n,), generator=gen)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).to(torch.float32)
    scores = (torch.rand(n, generator=gen) < 0.4).to(torch.float32)
    rewards = torch.zeros(n, length)
    rewards[torch.arange(n), lengths - 1] = scores
    order = torch.randperm(n, generator=gen)
    rewards, mask, index = rewards[order], mask[order], index[order.numpy()]
    if padding:  # verl's data-parallel padding rows: zero mask, zero reward, uid 'pad…'
        rewards = torch.cat([rewards, torch.zeros(padding, length)])
        mask = torch.cat([mask, torch.zeros(padding, length)])
        index = np.concatenate(
            [index, np.array([f"pad_{i}" for i in range(padding)], dtype=object)]
        )
    return DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask}, non_tensors={"uid": index}
    )


def _in_one_thread(fn: Callable[[], object]) -> object:
    with torch_threads(1):
        return fn()


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=4096)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument(
        "--padding", type=int, default=0, help="extra all-zero-mask rows (verl's DP padding)"
    )
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument(
        "--threads", type=int, default=0, help="torch intra-op threads (0: leave torch's default)"
    )
    parser.add_argument(
        "--estimators", nargs="+", default=["ebpo"], choices=["ebpo", "ebpo_bb", "jspo"]
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    from omegaconf import OmegaConf  # optional heavy dependencies (verl extra)
    from verl.trainer.ppo.ray_trainer import compute_advantage

    # imports verl and registers the estimators (also loaded by `import verl`)
    import ebpo.integrations.verl.plugin  # noqa: F401

    data = make_batch(args.groups, args.group_size, args.length, args.padding, args.seed)
    n, length = data.batch["response_mask"].shape
    config = OmegaConf.create({"adv_estimator": "grpo_vectorized", "norm_adv_by_std_in_grpo": True})
    names = ["grpo_vectorized", *args.estimators]
    for name in names:  # warm-up: imports, allocator, estimator creation
        compute_advantage(data, adv_estimator=name, config=config)

    times: dict[str, list[float]] = {name: [] for name in names}
    for _ in tqdm(range(args.repeats), desc=f"compute_advantage {n}x{length}", unit="rep"):
        for name in names:
            times[name].append(
                timed(lambda name=name: compute_advantage(data, adv_estimator=name, config=config))
            )

    # Where EBPO's time goes (same inputs, outside verl).
    uid = data.non_tensor_batch["uid"]
    rewards, mask = data.batch["token_level_rewards"], data.batch["response_mask"]
    options, _ = resolve_options("ebpo", config)
    estimator = STORE.get("ebpo", options)
    ids, _ = factorize(uid)
    scores, valid = rewards.sum(-1), nonempty_rows(mask)
    advantage = estimator(scores, ids, mask=valid, update=False).advantages
    parts = {
        "uid -> int (ebpo.estimators.validation.factorize)": lambda: factorize(uid),
        "uid -> int (np.unique, as verl)": lambda: np.unique(uid, return_inverse=True),
        "rewards.sum(-1) (as grpo_vectorized)": lambda: rewards.sum(-1),
        "non-empty rows (mask[:, 0] + suspects)": lambda: nonempty_rows(mask),
        "core estimator (int ids, 1 thread)": lambda: _in_one_thread(
            lambda: estimator(scores, ids, mask=valid, update=False)
        ),
        "core estimator (int ids, all threads)": lambda: estimator(
            scores, ids, mask=valid, update=False
        ),
        "token broadcast (one multiply)": lambda: advantage.unsqueeze(-1) * mask,
    }
    breakdown = {
        label: statistics.median(timed(fn) for _ in range(args.repeats))
        for label, fn in parts.items()
    }

    base = statistics.median(times["grpo_vectorized"])
    print(
        f"\nbatch: {n} responses x {length} tokens, {args.groups} groups of {args.group_size}, "
        f"torch threads {torch.get_num_threads()}, {args.repeats} interleaved repeats (median)"
    )
    for name in names:
        med = statistics.median(times[name])
        print(
            f"  {name:16s} {med:8.2f} ms   (min {min(times[name]):7.2f})   ratio to grpo_vectorized {med / base:5.2f}x"
        )
    print("EBPO breakdown (median ms):")
    for label, value in breakdown.items():
        print(f"  {label:36s} {value:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
