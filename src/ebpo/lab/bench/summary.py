"""What ``ebpo bench`` concludes from its finished cells (:mod:`ebpo.lab.bench.cells`):
:func:`aggregate` gives the summary that :mod:`ebpo.lab.bench.report` writes out.

* **Learning rates**: per (method, G) the rate of the sweep with the best mean *validation* Pass@1
  over seeds (ties to the smaller rate); the held-out split chooses nothing.
* **Paired differences** (``paired.csv``, ``paired.png``, ``paired_equal_lr.png``,
  ``contrasts.png``): for every contrast ``method − baseline`` of the config
  (:meth:`~ebpo.lab.bench.config.BenchConfig.comparisons`; by default every method against GRPO),
  G and seed, the method's held-out Pass@1 minus the baseline's, at each checkpoint step and at the
  end, and the difference in steps-to-target; mean over the seeds both have, with a 95% Student-t
  interval. Two comparisons: ``best_lr`` (each at its validation-chosen rate) and ``equal_lr``
  (both at the same rate, for every rate of the sweep).
* **Tables**: held-out Pass@1 per topic / tier / overall, mean ± 95% CI over seeds (not paired:
  for reading levels, not differences), and the learning-rate sweep.
* **Curves**: seed-mean held-out Pass@1 and training metrics over steps with 95% bands.

Steps-to-target: for each seed the target is the warm start's held-out Pass@1 (shared by every
method of the seed) plus ``target_gain``; the step is interpolated between evaluations. A run
that never reaches it counts as reaching it at its last step (a censored value: the difference
is then conservative), and the rows say how many runs reached it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ebpo.analysis.paired import mean_ci, paired_difference, steps_to_target
from ebpo.lab.bench.cells import CURVE_KEYS
from ebpo.lab.bench.config import BenchConfig, CellSpec
from ebpo.lab.bench.contrasts import Contrast

__all__ = [
    "PAIRED_COLUMNS",
    "aggregate",
    "learning_check",
    "paired_rows",
    "select_learning_rates",
]

#: columns of paired.csv
PAIRED_COLUMNS = (
    "comparison",
    "contrast",
    "method",
    "baseline",
    "G",
    "lr",
    "reference_lr",
    "checkpoint",
    "seeds",
    "mean_diff",
    "ci_low",
    "ci_high",
    "reached",
    "reference_reached",
)

Key = tuple[str, int, float]


def _by_key(cells: Iterable[Mapping[str, Any]]) -> dict[Key, dict[int, Mapping[str, Any]]]:
    """``{(method, G, lr): {seed: cell}}``."""
    grouped: dict[Key, dict[int, Mapping[str, Any]]] = {}
    for cell in cells:
        s = cell["spec"]
        grouped.setdefault((s["method"], int(s["group_size"]), float(s["learning_rate"])), {})[
            int(s["seed"])
        ] = cell
    return grouped


def select_learning_rates(
    cells: Iterable[Mapping[str, Any]], *, split: str = "validation"
) -> dict[tuple[str, int], dict[str, Any]]:
    """The best learning rate per (method, G): highest mean ``split`` Pass@1 over seeds.

    ``split`` is ``"validation"`` for the bench (the argument exists so that tests can show the
    choice differs from what the held-out split would pick). Ties go to the smaller rate.
    Returns ``{(method, G): {"lr", "score", "scores": {lr: mean}}}``.
    """
    if split not in ("validation", "heldout"):
        raise ValueError(f"split must be 'validation' or 'heldout', got {split!r}")
    scores: dict[tuple[str, int], dict[float, float]] = {}
    for (method, g, lr), by_seed in _by_key(cells).items():
        value = mean_ci([r[split]["overall"] for r in by_seed.values()])["mean"]
        if math.isfinite(value):
            scores.setdefault((method, g), {})[lr] = value
    best = {}
    for key, by_lr in scores.items():
        lr = max(
            sorted(by_lr), key=lambda rate: by_lr[rate]
        )  # max keeps the first (smallest) of ties
        best[key] = {"lr": lr, "score": by_lr[lr], "scores": dict(sorted(by_lr.items()))}
    return best


# ====================================================================== paired differences
def _pass1_at(cell: Mapping[str, Any], checkpoint: int | str) -> float | None:
    if checkpoint == "final":
        return float(cell["heldout"]["overall"])
    curve = cell["eval_curve"]
    lookup = dict(zip(curve["step"], curve["pass1"], strict=True))
    value = lookup.get(checkpoint)
    return float(value) if value is not None else None


def _steps_to_target(cell: Mapping[str, Any], gain: float) -> tuple[float, bool]:
    """(steps to warm start + gain, reached?) — censored at the last step when not reached."""
    curve = cell["eval_curve"]
    target = curve["pass1"][0] + gain
    step = steps_to_target(curve["step"], curve["pass1"], target)
    return (float(curve["step"][-1]), False) if step is None else (step, True)


def paired_rows(cells: Iterable[Mapping[str, Any]], config: BenchConfig) -> list[dict[str, Any]]:
    """Every paired comparison of the config's contrasts (see the module docstring): rows with the
    keys of :data:`PAIRED_COLUMNS`. Pass@1 differences are in Pass@1 units (0.05 = 5 points);
    ``steps_to_target`` differences are in steps (negative: the method is faster)."""
    grouped = _by_key(cells)
    best = {key: value["lr"] for key, value in select_learning_rates(cells).items()}
    comparisons: list[tuple[str, Contrast, int, float, float]] = []
    for g in config.group_sizes:
        for contrast in config.comparisons():
            key, reference = (contrast.method, g), (contrast.baseline, g)
            if key in best and reference in best:
                comparisons.append(("best_lr", contrast, g, best[key], best[reference]))
            comparisons += [
                ("equal_lr", contrast, g, float(lr), float(lr)) for lr in config.reference_lrs
            ]
    rows = []
    for comparison, contrast, g, lr, ref_lr in comparisons:
        mine = grouped.get((contrast.method, g, lr), {})
        theirs = grouped.get((contrast.baseline, g, ref_lr), {})
        seeds = sorted(set(mine) & set(theirs))
        if seeds:
            base = {
                "comparison": comparison,
                "contrast": contrast.name,
                "method": contrast.method,
                "baseline": contrast.baseline,
                "G": g,
                "lr": lr,
                "reference_lr": ref_lr,
            }
            rows += _seed_differences(base, [(mine[s], theirs[s]) for s in seeds], config)
    return rows


def _seed_differences(
    base: Mapping[str, Any],
    pairs: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]],
    config: BenchConfig,
) -> list[dict[str, Any]]:
    """The rows of one (contrast, G, rates): Pass@1 at each checkpoint and steps-to-target, from
    the (method cell, baseline cell) of each paired seed."""
    rows = []
    checkpoints: list[int | str] = [*config.checkpoints, "final"]
    for checkpoint in checkpoints:
        scored = [(_pass1_at(a, checkpoint), _pass1_at(b, checkpoint)) for a, b in pairs]
        present = [(a, b) for a, b in scored if a is not None and b is not None]
        if present:
            stats = paired_difference([a for a, _ in present], [b for _, b in present])
            rows.append({
                **base, "checkpoint": str(checkpoint), "seeds": stats["n"], **_interval(stats),
                "reached": "", "reference_reached": "",
            })  # fmt: skip
    steps = [
        (_steps_to_target(a, config.target_gain), _steps_to_target(b, config.target_gain))
        for a, b in pairs
    ]
    stats = paired_difference([a for (a, _), _ in steps], [b for _, (b, _) in steps])
    rows.append({
        **base, "checkpoint": "steps_to_target", "seeds": stats["n"], **_interval(stats),
        "reached": sum(ok for (_, ok), _ in steps), "reference_reached": sum(ok for _, (_, ok) in steps),
    })  # fmt: skip
    return rows


def _interval(stats: Mapping[str, float]) -> dict[str, float]:
    return {"mean_diff": stats["mean_diff"], "ci_low": stats["ci_low"], "ci_high": stats["ci_high"]}


# ====================================================================== levels and curves
def _columns(cells: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """Table columns ``(label, section, key)``: topics, tiers, then the average."""
    topics: dict[str, None] = {}
    tiers: dict[str, None] = {}
    for cell in cells:
        topics.update(dict.fromkeys(cell["heldout"].get("topics", {})))
        tiers.update(dict.fromkeys(cell["heldout"].get("tiers", {})))
    columns = [(t, "topics", t) for t in sorted(topics)]
    columns += [(f"tier {t}", "tiers", t) for t in sorted(tiers, key=lambda t: (len(t), t))]
    return columns + [("avg", "overall", "")]


def _table(
    grouped,
    columns,
    chosen: Mapping[tuple[str, int], float],
    methods: Sequence[str],
    group_sizes: Sequence[int],
) -> list[dict[str, Any]]:
    """Rows ``{method, G, lr, seeds, <column>: {"mean", "ci", "n"}}`` at the chosen rate per (method, G)."""
    rows = []
    for g in group_sizes:
        for method in methods:
            lr = chosen.get((method, g))
            by_seed = grouped.get((method, g, lr), {}) if lr is not None else {}
            if not by_seed:
                continue
            row: dict[str, Any] = {"method": method, "G": g, "lr": lr, "seeds": sorted(by_seed)}
            for label, section, key in columns:
                row[label] = mean_ci(
                    [_column_value(r["heldout"], section, key) for r in by_seed.values()]
                )
            rows.append(row)
    return rows


def _column_value(evaluation: Mapping[str, Any], section: str, key: str) -> float:
    if section == "overall":
        return float(evaluation["overall"])
    value = evaluation.get(section, {}).get(key)
    return float(value) if isinstance(value, (int, float)) else math.nan


def _mean_curve(curves: Sequence[Mapping[str, list]], name: str) -> dict[str, list]:
    """Mean and 95% band over seeds, at the steps every seed has."""
    out: dict[str, list] = {"step": [], "mean": [], "lower": [], "upper": [], "n": []}
    if not curves:
        return out
    common = set(curves[0]["step"])
    for c in curves[1:]:
        common &= set(c["step"])
    lookup = [dict(zip(c["step"], c[name], strict=True)) for c in curves]
    for s in sorted(common):
        stats = mean_ci([d[s] for d in lookup])
        if stats["n"] == 0:
            continue
        half = stats["ci"] if math.isfinite(stats["ci"]) else 0.0
        for key, value in (
            ("step", s),
            ("mean", stats["mean"]),
            ("lower", stats["mean"] - half),
            ("upper", stats["mean"] + half),
            ("n", stats["n"]),
        ):
            out[key].append(value)
    return out


def learning_check(cells: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The cells that cannot inform a comparison: ``unchanged`` — held-out Pass@1 the same at every
    evaluation (the policy did not change what it answers: a paired difference of such cells is 0
    by construction); ``no_signal`` — the train job's notice that several steps in a row gave no
    group a learning signal (every group's rewards equal, e.g. all 0). Cell labels, in order."""
    unchanged, silent = [], []
    for cell in cells:
        label = CellSpec(**cell["spec"]).label()
        if len(set(cell["eval_curve"]["pass1"])) == 1:
            unchanged.append(label)
        if cell.get("no_signal"):
            silent.append(label)
    return {"cells": len(cells), "unchanged": unchanged, "no_signal": silent}


def aggregate(cells: Sequence[Mapping[str, Any]], config: BenchConfig) -> dict[str, Any]:
    """Everything the report shows, from the finished cells."""
    grouped = _by_key(cells)
    best = select_learning_rates(cells)
    best_lr = {key: value["lr"] for key, value in best.items()}
    columns = _columns(cells)
    methods, group_sizes = list(config.methods), list(config.group_sizes)
    curves: dict[str, dict[str, Any]] = {}
    for (method, g), lr in best_lr.items():
        records = list(grouped.get((method, g, lr), {}).values())
        entry = {"pass1": _mean_curve([r["eval_curve"] for r in records], "pass1")}
        for name in CURVE_KEYS:
            if all(name in r["curves"] for r in records):
                entry[name] = _mean_curve([r["curves"] for r in records], name)
        curves[f"{method}|{g}"] = entry
    sweep = [
        {
            "method": method, "G": g, "lr": lr,
            "validation": mean_ci([r["validation"]["overall"] for r in by_seed.values()]),
            "heldout": mean_ci([r["heldout"]["overall"] for r in by_seed.values()]),
            "chosen": best_lr.get((method, g)) == lr, "seeds": sorted(by_seed),
        }
        for (method, g, lr), by_seed in sorted(grouped.items())
    ]  # fmt: skip
    wall = [
        float(c["wall_time_s"]) for c in cells if isinstance(c.get("wall_time_s"), (int, float))
    ]
    equal = {
        lr: _table(
            grouped,
            columns,
            {(m, g): float(lr) for m in methods for g in group_sizes},
            methods,
            group_sizes,
        )
        for lr in config.reference_lrs
    }
    return {
        "config": {
            k: v for k, v in _config_dict(config).items() if k not in ("verbose", "threads")
        },
        "columns": [label for label, _, _ in columns],
        "cells_finished": len(cells),
        "cells_total": len(config.cells()),
        "cell_wall_time_s": mean_ci(wall) | {"total": sum(wall)},
        "lr_sweep": sweep,
        "best_lr": {f"{m}|{g}": v for (m, g), v in best.items()},
        "table_best_lr": _table(grouped, columns, best_lr, methods, group_sizes),
        "table_equal_lr": {f"{lr:g}": rows for lr, rows in equal.items()},
        "paired": paired_rows(cells, config),
        "learning": learning_check(cells),
        "curves": curves,
    }


def _config_dict(config: BenchConfig) -> dict[str, Any]:
    return dataclasses.asdict(config)
