"""``ebpo train``: the main job (see :mod:`ebpo.lab.job`). With no arguments it runs the built-in
default: the tiny model on the built-in arithmetic task, warm start, then EBPO with G = 4."""

from __future__ import annotations

import argparse

from ebpo.lab.job import BUILTIN_MODEL, TrainJobConfig, run_train_job
from ebpo.utils.files import storage_error

_DEFAULTS = TrainJobConfig()


def _tiers(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError as error:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated digit counts, got {text!r}"
        ) from error


def _topics(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(",") if v.strip())


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
    d = _DEFAULTS
    parser.add_argument(
        "--estimator",
        default=d.estimator,
        help="preset (grpo, dr_grpo, dapo, entropy_mech, rloo, jspo, ebpo, ebpo_batch, ebpo_bb) "
        "or estimator name (default: %(default)s)",
    )
    parser.add_argument(
        "--group-size",
        type=int,
        default=d.group_size,
        help="completions per prompt, G >= 2 (default: %(default)s)",
    )
    parser.add_argument(
        "--steps", type=int, default=d.steps, help="RL steps (default: %(default)s)"
    )
    parser.add_argument(
        "--prompts-per-step",
        type=int,
        default=d.prompts_per_step,
        help="prompts per RL step; prompts x group size at most 65,536 (default: %(default)s)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=d.seed,
        help="random seed, 0 .. 2**31-1: warm start, prompt stream, sampling (default: %(default)s)",
    )
    parser.add_argument(
        "--model",
        default=d.model,
        help=f"'{BUILTIN_MODEL}' (built-in), a Hugging Face causal LM id, a local directory, a .gguf file, "
        "or 'smollm2-135m' (default: %(default)s)",
    )
    parser.add_argument(
        "--dataset",
        default=d.dataset,
        help="built-in 'arithmetic' (reversed digits, for the tiny model) / 'arithmetic-word' (word "
        "problems, for instruct models), a registered dataset name (ebpo data list), or a "
        ".jsonl/.parquet file with prompt and answer columns (default: %(default)s)",
    )
    parser.add_argument(
        "--topics",
        type=_topics,
        default=d.topics,
        help=f"built-in task topics, comma-separated (default: {','.join(d.topics)})",
    )
    parser.add_argument(
        "--tiers",
        type=_tiers,
        default=d.tiers,
        help=f"built-in task tiers = operand digits, comma-separated, 1..15 (default: {','.join(map(str, d.tiers))})",
    )
    parser.add_argument(
        "--order",
        default=d.order,
        help="RL prompt order: shuffle, topic, difficulty, topic_then_difficulty (default: %(default)s)",
    )
    parser.add_argument(
        "--reward",
        default=d.reward,
        choices=("auto", "integer", "math"),
        help="auto: exact answer on the built-in task, ebpo.rewards.score_math otherwise; integer: "
        "the final integer; math: score_math (default: %(default)s)",
    )
    parser.add_argument(
        "--learning-rate",
        type=float,
        default=d.learning_rate,
        help="RL learning rate, at most 1.0 (default: %(default)s)",
    )
    parser.add_argument(
        "--eval-samples",
        type=int,
        default=d.eval_samples,
        help="samples per held-out problem for Pass@1, >= 8 (default: %(default)s)",
    )
    parser.add_argument(
        "--eval-problems",
        type=int,
        default=d.eval_problems,
        help="held-out problems per topic x tier cell (built-in) or in total (default: %(default)s)",
    )
    parser.add_argument(
        "--eval-every",
        type=int,
        default=d.eval_every,
        help="held-out Pass@1 every N steps, 0 = before/after only (default: %(default)s)",
    )
    parser.add_argument(
        "--max-completion-length",
        type=int,
        default=d.max_completion_length,
        help="max new tokens per completion, 0 = auto (default: %(default)s)",
    )
    parser.add_argument(
        "--warm-start-steps",
        type=int,
        default=None,
        help="supervised warm-start steps (default: 2500 for the built-in model, 0 otherwise)",
    )
    parser.add_argument(
        "--output-dir",
        default=None,
        help="run directory (default: runs/<estimator>-<dataset>-g<G>-s<seed>-<time>)",
    )
    parser.add_argument(
        "--cache-dir", default=None, help="warm-start cache (default: $EBPO_CACHE or ~/.cache/ebpo)"
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --output-dir from its last checkpoint",
    )
    mode.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the run already in --output-dir (after everything else has loaded); only the "
        "files the run created go",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars or tables")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    config = TrainJobConfig(
        estimator=args.estimator,
        group_size=args.group_size,
        steps=args.steps,
        prompts_per_step=args.prompts_per_step,
        seed=args.seed,
        model=args.model,
        dataset=args.dataset,
        topics=args.topics,
        tiers=args.tiers,
        order=args.order,
        reward=args.reward,
        learning_rate=args.learning_rate,
        eval_samples=args.eval_samples,
        eval_problems=args.eval_problems,
        eval_every=args.eval_every,
        max_completion_length=args.max_completion_length,
        warm_start_steps=args.warm_start_steps,
        output_dir=args.output_dir,
        cache_dir=args.cache_dir,
        resume=args.resume,
        overwrite=args.overwrite,
        progress=not args.quiet,
    )
    try:
        result = run_train_job(config)  # a ValueError is a user error: one line, exit 2 (ebpo.cli)
    except OSError as error:  # a full disk is one line too; anything else is a bug
        if storage_error(error) is None:
            raise
        where = f" {error.filename!r}" if error.filename else ""
        raise ValueError(
            f"cannot write{where}: {error.strerror or error}; once there is space, continue the run "
            "with --resume"
        ) from error
    return 130 if result["status"] == "interrupted" else 0
