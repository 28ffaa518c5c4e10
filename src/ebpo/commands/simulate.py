"""``ebpo simulate``: the simulation lab (no language model, seconds to a couple of minutes).

Writes ``results.md`` (Markdown tables) and PNG plots to ``--output-dir`` and prints the tables.
Each file is written atomically (:mod:`ebpo.utils.files`): a full disk ends in one line (exit 2)
and leaves every file either as it was or complete.
The experiments live in :mod:`ebpo.lab.simulation` and the sections of ``results.md`` (tables and
plots) in :mod:`ebpo.lab.simulation.report`; this module only chooses the experiments' sizes
(``--quick`` for CI) and writes the report.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch

from ebpo.commands.estimator_module import (
    add_estimator_module_argument,
    import_estimator_module_of,
)
from ebpo.lab.simulation import BASELINE_ESTIMATORS, build_estimator, report
from ebpo.utils.checks import check_int
from ebpo.utils.files import atomic_write, check_output_path, storage_error

EXPERIMENTS = ("baseline", "saturation", "bandit", "priors")
#: The section of ``results.md`` each experiment renders: ``(size, seed, out_dir, plots) -> text``.
SECTIONS = {
    "baseline": report.baseline_section,
    "saturation": report.saturation_section,
    "bandit": report.bandit_section,
    "priors": report.priors_section,
}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "simulate",
        help="simulated experiments: baseline quality, saturated failure, bandit learning",
        description=(
            "Simulated experiments showing when EBPO helps and when it does not: baseline MSE vs "
            "Theorem 3.3, signal on all-zero groups with/without batch normalisation, and a "
            "contextual-bandit policy trained by REINFORCE with each estimator (each at its own "
            "best learning rate, chosen on validation seeds). Reproducible by --seed."
        ),
    )
    parser.add_argument(
        "--experiments",
        default=",".join(EXPERIMENTS),
        help=f"comma-separated subset of {','.join(EXPERIMENTS)} (default: all)",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes (a few seconds; for CI)")
    parser.add_argument("--seed", type=int, default=0, help="base random seed (>= 0, default 0)")
    parser.add_argument(
        "--output-dir", default="simulate-results", help="where results.md and the PNGs go"
    )
    parser.add_argument(
        "--shared",
        action="store_true",
        help="bandit with shared parameters (prompt features; learning transfers between prompts) "
        "instead of a per-prompt table",
    )
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument(
        "--estimators",
        default=None,
        help="comma-separated estimator names (or specs name:option=value) added to the baseline "
        "and bandit experiments: your own, with --estimator-module",
    )
    add_estimator_module_argument(parser)
    parser.set_defaults(func=run)
    return parser


def settings(quick: bool) -> dict[str, dict[str, Any]]:
    """Sizes of each experiment for the default and the ``--quick`` run."""
    if quick:
        return {
            "baseline": {
                "group_sizes": (2, 4, 32),
                "steps": 4,
                "prompts_per_step": 64,
                "estimators": ("grpo", "rloo", "ebpo", "ebpo_within"),
            },
            "saturation": {"group_size": 4, "steps": 4, "prompts_per_step": 64},
            "bandit": {
                "estimators": ("grpo", "dr_grpo", "spo", "ebpo"),
                "group_sizes": (4,),
                "learning_rates": (30.0, 100.0, 300.0),
                "steps": 20,
                "validation": 1,
                "report": 2,
            },
            "priors": {
                "learning_rates": (30.0, 100.0, 300.0),
                "steps": 20,
                "validation": 1,
                "report": 2,
                "normalize": ("batch",),
            },
        }
    return {
        "baseline": {"group_sizes": (2, 4, 8, 16, 32), "steps": 15, "prompts_per_step": 256},
        "saturation": {"group_size": 4, "steps": 15, "prompts_per_step": 256},
        "bandit": {
            "estimators": (
                "grpo",
                "dr_grpo",
                "rloo",
                "reinforce_pp",
                "jspo",
                "grpo_bn",
                "spo",
                "ebpo",
                "ebpo_bb",
            ),
            "group_sizes": (2, 4, 16),
            "learning_rates": (30.0, 100.0, 300.0, 1000.0, 3000.0),
            "steps": 50,
            "validation": 1,
            "report": 3,
        },
        "priors": {
            "learning_rates": (30.0, 100.0, 300.0, 1000.0),
            "steps": 50,
            "validation": 1,
            "report": 3,
            "normalize": ("batch", "none"),
        },
    }


def check_args(args: argparse.Namespace) -> tuple[list[str], Path]:
    """(chosen experiments, output directory), checked before anything runs; ValueError naming the
    option otherwise (one line, exit 2)."""
    chosen = [e.strip() for e in str(args.experiments).split(",") if e.strip()]
    unknown = sorted(set(chosen) - set(EXPERIMENTS))
    if unknown or not chosen:
        raise ValueError(
            f"--experiments must be a comma-separated subset of {','.join(EXPERIMENTS)}, "
            f"got {args.experiments!r}"
        )
    check_int("--seed", args.seed, low=0)
    return chosen, check_output_path(args.output_dir, "--output-dir", kind="dir")


def extra_estimators(args: argparse.Namespace) -> tuple[str, ...]:
    """The specs of ``--estimators``, each built once to check it (ValueError naming it)."""
    specs = tuple(s.strip() for s in str(args.estimators or "").split(",") if s.strip())
    for spec in specs:
        try:
            build_estimator(spec)
        except ValueError as error:
            raise ValueError(f"--estimators {spec!r}: {error}") from None
    return specs


def with_estimators(size: dict[str, Any], name: str, extra: tuple[str, ...]) -> dict[str, Any]:
    """``size`` of experiment ``name`` with the ``--estimators`` added to its own (baseline and
    bandit only; the others compare fixed EBPO variants)."""
    if not extra or name not in ("baseline", "bandit"):
        return size
    own = tuple(size.get("estimators", BASELINE_ESTIMATORS))
    return {**size, "estimators": own + tuple(e for e in extra if e not in own)}


def run(args: argparse.Namespace) -> int:
    import_estimator_module_of(args)  # before the names are read
    chosen, out_dir = check_args(args)
    args.estimators = extra_estimators(args)
    try:
        return _run(args, chosen, out_dir)
    except OSError as error:  # a full disk: one line, exit 2; every file is the old or the new one
        failure = storage_error(error)
        if failure is None:
            raise
        raise failure from error


def _run(args: argparse.Namespace, chosen: list[str], out_dir: Path) -> int:
    # Small tensors: extra threads only add overhead on a shared machine.
    torch.set_num_threads(1)
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = not args.no_plots
    sizes = settings(args.quick)
    seed = int(args.seed)
    sections: list[str] = []
    start = time.perf_counter()
    timings: dict[str, float] = {}
    for name in EXPERIMENTS:
        if name not in chosen:
            continue
        t0 = time.perf_counter()
        size = (
            {**sizes[name], "shared": bool(args.shared)}
            if name in ("bandit", "priors")
            else sizes[name]
        )
        section = SECTIONS[name](with_estimators(size, name, args.estimators), seed, out_dir, plots)
        timings[name] = time.perf_counter() - t0
        sections.append(section)
        print(section, flush=True)
    wall = time.perf_counter() - start
    flags = (
        (" --quick" if args.quick else "")
        + (" --shared" if args.shared else "")
        + (f" --estimators {','.join(args.estimators)}" if args.estimators else "")
    )
    header = (
        "# ebpo simulate — results\n\n"
        f"Command: `ebpo simulate --experiments {','.join(chosen)} --seed {seed}{flags}` · "
        f"wall time {wall:.1f} s ({', '.join(f'{k} {v:.1f} s' for k, v in timings.items())}).\n"
        "See `ebpo docs simulation` for what each experiment shows and how to read it.\n"
    )
    path = out_dir / "results.md"
    with atomic_write(path) as f:
        f.write(header + "\n" + "\n".join(sections))
    print(f"wrote {path} ({wall:.1f} s)")
    return 0
