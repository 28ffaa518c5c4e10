"""``ebpo grpo``: ``trl grpo`` with an ebpo estimator (:mod:`ebpo.integrations.trl.grpo_script`).
Every argument after ``grpo`` goes to TRL's own parser (GRPOConfig, ModelConfig, the dataset
mixture, ``--config recipe.yaml``) with ``EBPOConfig``'s ``--advantage_estimator`` and
``--estimator_options`` added."""

from __future__ import annotations

import argparse

SUMMARY = "trl grpo with an ebpo estimator: TRL's flags and YAML configs + --advantage_estimator"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("grpo", help=SUMMARY, add_help=False, prefix_chars="\0")
    parser.add_argument("trl_args", nargs=argparse.REMAINDER)
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    # heavy optional import: trl (the trl extra), and the trainer behind it
    from ebpo.integrations.trl.grpo_script import main

    return main(args.trl_args)
