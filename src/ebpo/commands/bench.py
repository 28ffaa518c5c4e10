"""``ebpo bench``: the paired comparison of estimators (see :mod:`ebpo.lab.bench.run`).

Runs the built-in CPU task of ``ebpo train`` for every (method, G, learning rate, seed) — every
method of a seed from the same warm start on the same prompt stream — chooses each method's
learning rate on the validation split, and writes ``paired.csv`` / ``paired.png`` /
``contrasts.png`` (the paired differences of ``--contrasts``, by default every method − GRPO, with
95% intervals), level tables, curves and ``results.md`` to ``--output-dir``.
Rerunning the same command skips finished cells, so a long run can be stopped and continued.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from ebpo.commands.estimator_module import (
    add_estimator_module_argument,
    import_estimator_module_of,
)
from ebpo.lab.bench import run as bench
from ebpo.lab.bench.cells import load_cells
from ebpo.lab.bench.config import BenchConfig
from ebpo.lab.bench.contrasts import CONTRAST_PRESETS, contrast_methods, parse_contrasts
from ebpo.lab.bench.methods import DEFAULT_METHODS, available_methods, method
from ebpo.lab.bench.report import caveats, write_report
from ebpo.lab.bench.summary import aggregate
from ebpo.utils.files import check_output_path


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "bench",
        help="paired comparison of estimators with real token-level RL: paired differences with intervals",
        description=(
            "Trains the built-in CPU task (ebpo train) for each method × G × learning rate × seed; every method "
            "of a seed shares the warm start and the prompt stream. Picks each method's learning rate on the "
            "validation split and writes paired.csv / paired.png / contrasts.png (method − baseline for each "
            "contrast, by default method − GRPO, in held-out Pass@1 at fixed steps and in steps-to-target, "
            "paired Student-t 95 % intervals), results.md, level tables and curves. Resumable per cell: "
            "rerun the same command to continue."
        ),
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke test (CI): grpo and ebpo, G=2, 2 seeds, 1 learning rate, 6 steps from a 40-step "
        "warm start; checks that the bench runs, its numbers are not evidence (about 20 s)",
    )
    parser.add_argument(
        "--output-dir",
        default=None,
        help="results folder (default: bench-results, or bench-results-quick with --quick)",
    )
    _add_grid_arguments(parser)
    _add_cell_arguments(parser)
    _add_run_arguments(parser)
    parser.set_defaults(func=run)
    return parser


def _add_grid_arguments(parser: argparse.ArgumentParser) -> None:
    """What is compared: methods, group sizes, seeds, learning rates."""
    parser.add_argument(
        "--estimators",
        default=None,
        help="comma-separated methods (default: the starred ones of --list)",
    )
    parser.add_argument(
        "--contrasts",
        default=None,
        help="the paired differences to read: METHOD-BASELINE,... (e.g. ebpo-grpo_bn,grpo_bn-grpo) or a "
        f"preset ({', '.join(CONTRAST_PRESETS)}; see --list); without --estimators the matrix is the "
        "methods they name (default: every method - grpo)",
    )
    parser.add_argument(
        "--group-sizes", default=None, help="comma-separated G values (default: 2,4,8)"
    )
    parser.add_argument(
        "--seeds", type=int, default=None, help="number of seeds, 0..N-1 (default: 5)"
    )
    parser.add_argument(
        "--lrs",
        default=None,
        help="comma-separated learning-rate sweep (default: 1.5e-4,3e-4,6e-4)",
    )


def _add_cell_arguments(parser: argparse.ArgumentParser) -> None:
    """How long each cell trains and how it is evaluated."""
    parser.add_argument(
        "--steps", type=int, default=None, help="RL steps per cell (default: 100; --quick: 6)"
    )
    parser.add_argument(
        "--prompts-per-step",
        type=int,
        default=None,
        help="prompts per RL step (default: 32; --quick: 8)",
    )
    parser.add_argument(
        "--eval-samples",
        type=int,
        default=None,
        help="samples per problem for Pass@1 (default: 16)",
    )
    parser.add_argument(
        "--eval-every",
        type=int,
        default=None,
        help="held-out Pass@1 every N steps for curves and checkpoints (default: 25)",
    )
    parser.add_argument(
        "--eval-problems",
        type=int,
        default=None,
        help="held-out / validation problems per (topic, tier) cell (default: 32)",
    )
    parser.add_argument(
        "--checkpoints",
        default=None,
        help="comma-separated steps at which paired differences are read besides the final one, "
        "multiples of --eval-every (default: 25,50)",
    )


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """How this process runs: its share of the cells, report only, listing, threads, output."""
    parser.add_argument(
        "--shard",
        default=None,
        help="K/N: run only every N-th cell from the K-th (1-based), to run N processes on one output dir in parallel",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="aggregate the finished cells and write the report; run nothing",
    )
    parser.add_argument("--list", action="store_true", help="list the methods and exit")
    add_estimator_module_argument(parser)
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads per process (default: 1; more threads are slower for this tiny model on a busy machine)",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="show each train job's progress bars and tables"
    )


def _csv(text: str, cast: Any, argument: str) -> tuple:
    try:
        values = tuple(cast(v.strip()) for v in text.split(",") if v.strip())
    except ValueError as error:
        raise ValueError(
            f"{argument} must be a comma-separated list, got {text!r} ({error})"
        ) from error
    if not values:
        raise ValueError(f"{argument} is empty")
    return values


def _shard(text: str | None) -> tuple[int, int] | None:
    """``"K/N"`` (1-based, as people count) -> ``(K - 1, N)``."""
    if text is None:
        return None
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError as error:
        raise ValueError(f"--shard must be K/N with 1 <= K <= N, got {text!r}") from error
    if not 1 <= k <= n:
        raise ValueError(f"--shard must be K/N with 1 <= K <= N, got {text!r}")
    return k - 1, n


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    """The :class:`ebpo.lab.bench.config.BenchConfig` of the parsed arguments (ValueError naming a bad one)."""
    overrides: dict[str, Any] = {}
    if args.output_dir is not None:
        overrides["output_dir"] = args.output_dir
    if args.contrasts is not None:
        methods, overrides["contrasts"] = parse_contrasts(args.contrasts)
        overrides["methods"] = methods or contrast_methods(overrides["contrasts"])
    if args.estimators is not None:
        overrides["methods"] = _csv(args.estimators, str, "--estimators")
    if args.group_sizes is not None:
        overrides["group_sizes"] = _csv(args.group_sizes, int, "--group-sizes")
    if args.seeds is not None:
        if args.seeds < 1:
            raise ValueError(f"--seeds must be at least 1, got {args.seeds}")
        overrides["seeds"] = tuple(range(args.seeds))
    if args.lrs is not None:
        overrides["learning_rates"] = _csv(args.lrs, float, "--lrs")
    if args.checkpoints is not None:
        overrides["checkpoints"] = _csv(args.checkpoints, int, "--checkpoints")
    for name in (
        "steps",
        "prompts_per_step",
        "eval_samples",
        "eval_every",
        "eval_problems",
        "threads",
    ):
        value = getattr(args, name)
        if value is not None:
            overrides[name] = value
    overrides["verbose"] = bool(args.verbose)
    config = BenchConfig.quick(**overrides) if args.quick else BenchConfig(**overrides)
    config.validate()
    return config


def run(args: argparse.Namespace) -> int:
    import_estimator_module_of(args)  # before the methods are read
    if args.list:
        for name in available_methods():
            default = "*" if name in DEFAULT_METHODS else " "
            print(f"{default} {name:<22} {method(name).description}")
        print("(* = in the default matrix)\n\ncontrast presets (--contrasts NAME):")
        for name, preset in CONTRAST_PRESETS.items():
            print(f"  {name:<22} {preset.description}; methods {', '.join(preset.methods)}")
        return 0
    config = config_from_args(args)  # ValueError: one line, exit 2 (ebpo.cli)
    shard = _shard(args.shard)
    started = time.time()
    out = check_output_path(config.output_dir, "--output-dir", kind="dir")
    if args.report_only:
        if not (out / "cells").is_dir():
            raise ValueError(
                f"--report-only: {config.output_dir!r} holds no bench cells "
                "(run ebpo bench with this --output-dir first)"
            )
        summary = aggregate(load_cells(config), config)
        path = write_report(summary, config)
        print(f"{summary['cells_finished']}/{summary['cells_total']} cells finished; wrote {path}")
        _print_caveats(summary)
        return 0
    total = len(bench.shard_cells(config.cells(), shard))
    print(
        f"ebpo bench: {total} cells{f' (shard {args.shard})' if shard else ''} "
        f"({len(config.methods)} methods × {len(config.group_sizes)} G × "
        f"{len(config.learning_rates)} lrs × {len(config.seeds)} seeds) → {config.output_dir}",
        flush=True,
    )
    try:
        summary = bench.run_bench(config, shard=shard)
    except KeyboardInterrupt:
        print(
            f"\ninterrupted: finished cells are kept; rerun the same command to continue ({config.output_dir})",
            file=sys.stderr,
        )
        return 130
    info = summary["bench"]
    report = Path(config.output_dir) / "results.md"
    print(report.read_text())
    print(
        f"ran {info['ran']} cells, skipped {info['skipped']} finished ones; "
        f"wall time {time.time() - started:.0f} s; wrote {report}"
    )
    _print_caveats(summary)
    return 0


def _print_caveats(summary: dict[str, Any]) -> None:
    """The report's reasons not to read the numbers as a comparison, again as the last lines."""
    for line in caveats(summary):
        print(f"note: {line}")
