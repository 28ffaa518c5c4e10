"""``ebpo grpo``: ``trl grpo`` with an ebpo estimator (:mod:`ebpo.commands.grpo.grpo_script`).
Every argument after ``grpo`` goes to TRL's own parser (GRPOConfig, ModelConfig, the dataset
mixture, ``--config recipe.yaml``) with ``EBPOConfig``'s ``--advantage_estimator`` and
``--estimator_options`` added.

``--dry-run`` (ebpo's own flag, :mod:`ebpo.commands.grpo.dry_run`) parses the same arguments,
builds the trainer on this CPU with a tiny local model and a few rows in place of the model and
the data, prints what the run would do and stops: ``ebpo grpo --config qwen3-1.7b/ebpo_batch
--dry-run`` checks a shipped recipe (:mod:`.recipes`: ``ebpo grpo recipe --list``) anywhere before
it goes to a GPU node."""

from __future__ import annotations

import argparse

from ebpo.commands.grpo.recipes import SUBCOMMANDS, resolve_config_name, run_subcommand

SUMMARY = (
    "trl grpo with an ebpo estimator: TRL's flags and YAML configs + --advantage_estimator "
    "(--dry-run: check a recipe on CPU)"
)


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("grpo", help=SUMMARY, add_help=False, prefix_chars="\0")
    parser.add_argument("trl_args", nargs=argparse.REMAINDER)
    parser.set_defaults(func=run)
    return parser


#: the spellings of ebpo's flag (TRL's parser never sees it; in a YAML it is an unknown key)
DRY_RUN_FLAGS = ("--dry-run", "--dry_run")


def run(args: argparse.Namespace) -> int:
    if args.trl_args and args.trl_args[0] in SUBCOMMANDS:
        return run_subcommand(args.trl_args)
    trl_args = resolve_config_name(args.trl_args)
    argv = [arg for arg in trl_args if arg not in DRY_RUN_FLAGS]
    if len(argv) == len(trl_args):
        # heavy optional import: trl (the trl extra), and the trainer behind it
        from ebpo.commands.grpo.grpo_script import main

        return main(argv)
    # heavy optional import: trl, transformers, datasets
    from ebpo.commands.grpo.dry_run import dry_run
    from ebpo.commands.grpo.grpo_script import config_source, describe_launch, parse_here

    built = dry_run(argv)
    launch_line, processes = describe_launch(argv)
    source = config_source(argv, "the command line")
    # a recipe this machine cannot run as it is: the line the real run stops with, last
    here = parse_here(argv)[3]
    print("\n".join([*built.summary(source, processes), launch_line, *([here] if here else [])]))
    return 0
