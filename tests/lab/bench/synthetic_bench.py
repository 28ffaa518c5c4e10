"""Finished ``ebpo bench`` cells written by hand to a results folder (as
:func:`ebpo.lab.bench.cells.run_cell` writes them), for the tests of bench_summary and
bench_report: 2 methods × 1 G × 2 learning rates × 3 seeds with dyadic Pass@1 values, so that
the expected differences are exact."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ebpo.lab.bench.cells import CELL_FILE
from ebpo.lab.bench.config import BenchConfig, CellSpec
from ebpo.utils.files import write_json

T_975_DF2 = 4.302652729911275  # scipy.stats.t.ppf(0.975, 2)
SEEDS = (0, 1, 2)
START = 0.25  # every seed's warm start (step 0); with target_gain 0.25 the target is 0.5
#: (method, lr) -> (validation, [Pass@1 at step 2 per seed], [final Pass@1 per seed])
CELLS = {
    ("ebpo", 1e-4): (0.625, [0.375, 0.5, 0.625], [0.625, 0.75, 0.5]),
    ("ebpo", 3e-4): (0.375, [0.25, 0.25, 0.25], [0.25, 0.25, 0.25]),
    ("grpo", 1e-4): (0.25, [0.25, 0.25, 0.25], [0.25, 0.25, 0.25]),
    ("grpo", 3e-4): (0.5, [0.25, 0.375, 0.25], [0.5, 0.5, 0.375]),
}


def bench_config(tmp_path: Path) -> BenchConfig:
    return BenchConfig(
        methods=("grpo", "ebpo"),
        group_sizes=(2,),
        seeds=SEEDS,
        learning_rates=(1e-4, 3e-4),
        steps=4,
        eval_every=2,
        checkpoints=(2,),
        target_gain=0.25,
        output_dir=str(tmp_path / "bench"),
    )


def levels(overall: float) -> dict:
    return {"overall": overall, "topics": {"add": overall}, "tiers": {"1": overall}}


def write_cells(config: BenchConfig, skip: tuple[str, float, int] | None = None) -> None:
    """One finished cell.json per (method, lr, seed), as bench_cells.run_cell writes them."""
    for (method, lr), (validation, mid, final) in CELLS.items():
        for seed in SEEDS:
            if (method, lr, seed) == skip:
                continue
            spec = CellSpec(method, 2, lr, seed)
            steps = [1, 2, 3, 4]
            write_json(
                Path(config.output_dir) / spec.relative_dir() / CELL_FILE,
                {
                    "spec": dataclasses.asdict(spec),
                    "fingerprint": config.fingerprint(),
                    "status": "completed",
                    "wall_time_s": 10.0 + seed,
                    "validation": levels(validation),
                    "heldout": levels(final[seed]),
                    "heldout_before": levels(START),
                    "eval_curve": {"step": [0, 2, 4], "pass1": [START, mid[seed], final[seed]]},
                    "curves": {
                        "step": steps,
                        "reward": [0.125 * s for s in steps],
                        "entropy": [1.0 for _ in steps],
                        "grad_norm": [1.0 + seed for _ in steps],
                        "shrinkage": [0.5 if method == "ebpo" else None for _ in steps],
                    },
                },
            )
