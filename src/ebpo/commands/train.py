"""``ebpo train``: the main job (see :mod:`ebpo.training`). With no arguments it runs the built-in
default: a tiny Llama on the built-in arithmetic family, EBPO, G = 4."""

from __future__ import annotations

import argparse

from ebpo.training import BUILTIN_MODEL, TrainJobConfig

_DEFAULTS = TrainJobConfig()


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "train",
        help="RL-train a causal LM with an ebpo estimator (no arguments: the built-in CPU default)",
        description=(
            "Warm start (built-in model), held-out Pass@1 before, RL on TRL with the chosen estimator, "
            "held-out Pass@1 after. Writes metrics.jsonl, TensorBoard logs, PNG plots, checkpoints, the "
            "final model and the estimator state to the run directory. Ctrl-C / SIGTERM saves a checkpoint; "
            "continue with --resume."
        ),
    )
    parser.add_argument("--estimator", default=_DEFAULTS.estimator, help="preset (grpo, dr_grpo, dapo, entropy_mech, rloo, jspo, ebpo, ebpo_bb) or estimator name (default: %(default)s)")
    parser.add_argument("--group-size", type=int, default=_DEFAULTS.group_size, help="completions per prompt, G >= 2 (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=_DEFAULTS.steps, help="RL steps (default: %(default)s)")
    parser.add_argument("--prompts-per-step", type=int, default=_DEFAULTS.prompts_per_step, help="prompts per RL step (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=_DEFAULTS.seed, help="random seed (default: %(default)s)")
    parser.add_argument("--model", default=_DEFAULTS.model, help=f"'{BUILTIN_MODEL}' (built-in), a Hugging Face causal LM id, a local directory, a .gguf file, or 'smollm2-135m' (default: %(default)s)")
    parser.add_argument("--dataset", default=_DEFAULTS.dataset, help="built-in 'arithmetic' / 'arithmetic-word', a registered dataset name (ebpo data list), or a .jsonl/.parquet file with prompt and answer columns (default: %(default)s)")
    parser.add_argument("--order", default=_DEFAULTS.order, help="data order: shuffle, topic, difficulty, topic_then_difficulty (default: %(default)s)")
    parser.add_argument("--reward", default=_DEFAULTS.reward, choices=("auto", "integer", "math"), help="integer: exact match of the final integer; math: ebpo.rewards.score_math; auto: integer for the built-in datasets, math otherwise (default: %(default)s)")
    parser.add_argument("--learning-rate", type=float, default=_DEFAULTS.learning_rate, help="RL learning rate (default: %(default)s)")
    parser.add_argument("--eval-samples", type=int, default=_DEFAULTS.eval_samples, help="samples per held-out problem for Pass@1, >= 8 (default: %(default)s)")
    parser.add_argument("--eval-problems", type=int, default=_DEFAULTS.eval_problems, help="held-out problems per topic x tier cell (built-in) or in total (default: %(default)s)")
    parser.add_argument("--eval-every", type=int, default=_DEFAULTS.eval_every, help="held-out Pass@1 every N steps, 0 = before/after only (default: %(default)s)")
    parser.add_argument("--max-completion-length", type=int, default=_DEFAULTS.max_completion_length, help="max new tokens per completion, 0 = auto (default: %(default)s)")
    parser.add_argument("--warm-start-steps", type=int, default=None, help="supervised warm-start steps (default: auto, built-in model only)")
    parser.add_argument("--output-dir", default=None, help="run directory (default: runs/<estimator>-<dataset>-g<G>-s<seed>-<time>)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--resume", action="store_true", help="continue the run in --output-dir from its last checkpoint")
    mode.add_argument("--overwrite", action="store_true", help="replace the run already in --output-dir")
    parser.add_argument("--quiet", action="store_true", help="no progress bars or tables")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from ebpo.training import run_train_job

    config = TrainJobConfig(
        estimator=args.estimator,
        group_size=args.group_size,
        steps=args.steps,
        prompts_per_step=args.prompts_per_step,
        seed=args.seed,
        model=args.model,
        dataset=args.dataset,
        order=args.order,
        reward=args.reward,
        learning_rate=args.learning_rate,
        eval_samples=args.eval_samples,
        eval_problems=args.eval_problems,
        eval_every=args.eval_every,
        max_completion_length=args.max_completion_length,
        warm_start_steps=args.warm_start_steps,
        output_dir=args.output_dir,
        resume=args.resume,
        overwrite=args.overwrite,
        progress=not args.quiet,
    )
    result = run_train_job(config)  # a ValueError is a user error: one line, exit 2 (ebpo.cli)
    return 130 if result["status"] == "interrupted" else 0
