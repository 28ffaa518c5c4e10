"""``ebpo demo``: EBPO next to GRPO on one simulated batch, in a few seconds, no language model."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import torch

from ebpo.estimators import make_estimator

# The demo promises seconds: bounds that keep it there (and a printable table).
MAX_PROMPTS, MAX_GROUP_SIZE, MAX_STEPS, MAX_RESPONSES = 100_000, 64, 10_000, 20_000_000


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="compare EBPO and GRPO advantages on a simulated batch (no model, seconds)",
        description=__doc__,
    )
    parser.add_argument(
        "--prompts", type=int, default=64, help=f"prompts per step (1..{MAX_PROMPTS}, default 64)"
    )
    parser.add_argument(
        "--group-size",
        type=int,
        default=4,
        help=f"responses per prompt (1..{MAX_GROUP_SIZE}, default 4)",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=20,
        help=f"steps of history for the prior (1..{MAX_STEPS}, default 20)",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (>= 0, default 0)")
    parser.set_defaults(func=run)


def check_args(args: argparse.Namespace) -> None:
    """ValueError naming the first bad number (one line, exit 2 through ebpo.cli)."""
    bounds = {
        "--prompts": (args.prompts, 1, MAX_PROMPTS),
        "--group-size": (args.group_size, 1, MAX_GROUP_SIZE),
        "--steps": (args.steps, 1, MAX_STEPS),
        "--seed": (args.seed, 0, None),
    }
    for option, (value, low, high) in bounds.items():
        if value < low or (high is not None and value > high):
            expected = f"between {low} and {high}" if high is not None else f">= {low}"
            raise ValueError(f"{option} must be an integer {expected}, got {value}")
    if args.prompts * args.group_size * args.steps > MAX_RESPONSES:
        raise ValueError(
            f"--prompts x --group-size x --steps = {args.prompts * args.group_size * args.steps:,} responses; "
            f"the demo is meant to take seconds: keep it at most {MAX_RESPONSES:,}"
        )


def run(args: argparse.Namespace) -> int:
    check_args(args)
    rng = np.random.default_rng(args.seed)
    estimators = {name: make_estimator(name) for name in ("grpo", "ebpo")}
    for _ in range(args.steps):  # success rates θ ~ Beta(0.6, 0.9): many easy and many hard prompts
        theta = rng.beta(0.6, 0.9, size=args.prompts)
        rewards = (rng.random((args.prompts, args.group_size)) < theta[:, None]).astype(float)
        ids = np.repeat(np.arange(args.prompts), args.group_size)
        results = {name: est(rewards.ravel(), ids) for name, est in estimators.items()}

    grpo, eb = results["grpo"], results["ebpo"]
    print(
        f"Last of {args.steps} steps: {args.prompts} prompts x {args.group_size} responses, "
        "0/1 rewards\n"
    )
    print(f"{'rewards':<{2 * args.group_size + 2}} {'GRPO adv':>22}   {'EBPO adv':>22}   {'S':>5}")
    shown: set[tuple[float, ...]] = set()
    for m in range(args.prompts):
        key = tuple(sorted(rewards[m]))
        if key in shown or len(shown) >= 6:
            continue
        shown.add(key)
        rows = slice(m * args.group_size, (m + 1) * args.group_size)
        pattern = "".join(str(int(r)) for r in rewards[m])
        print(
            f"{pattern:<{2 * args.group_size + 2}} {_signed(grpo.advantages[rows]):>22}   "
            f"{_signed(eb.advantages[rows]):>22}   {float(eb.shrinkage[rows][0]):.2f}"
        )
    metrics = eb.metrics
    print(
        f"\nprior: mu={metrics['prior_mean']:.3f} sigma2={metrics['sigma2']:.3f} "
        f"tau2={metrics['tau2']:.3f} mean shrinkage={metrics['shrinkage_mean']:.3f}"
    )
    print(
        f"groups with no learning signal: GRPO {grpo.metrics['zero_signal_group_frac']:.1%}, "
        f"EBPO {metrics['zero_signal_group_frac']:.1%}"
    )
    print(
        "all-fail groups that still get a signal: "
        f"GRPO {grpo.metrics['saturated_failure_signal_frac']:.1%}, "
        f"EBPO {metrics['saturated_failure_signal_frac']:.1%}"
    )
    return 0


def _signed(values: torch.Tensor) -> str:
    return " ".join(f"{x:+.2f}" for x in values.tolist())
