"""What ``ebpo bench`` reports, from its finished cells (:mod:`ebpo.lab.bench`).

* **Learning rates**: per (method, G) the rate of the sweep with the best mean *validation* Pass@1
  over seeds (ties to the smaller rate); the held-out split chooses nothing.
* **Paired differences** (``paired.csv``, ``paired.png``, ``paired_equal_lr.png``): for every method, G and seed, the
  method's held-out Pass@1 minus GRPO's, at each checkpoint step and at the end, and the difference
  in steps-to-target; mean over the seeds both have, with a 95% Student-t interval. Two
  comparisons: ``best_lr`` (each at its validation-chosen rate) and ``equal_lr`` (both at the same
  rate, for every rate of the sweep).
* **Tables**: held-out Pass@1 per topic / tier / overall, mean ± 95% CI over seeds (not paired:
  for reading levels, not differences), and the learning-rate sweep.
* **Curves**: seed-mean held-out Pass@1 and training metrics over steps with 95% bands.

Steps-to-target: for each seed the target is the warm start's held-out Pass@1 (shared by every
method of the seed) plus ``target_gain``; the step is interpolated between evaluations. A run
that never reaches it counts as reaching it at its last step (a censored value: the difference
is then conservative), and the rows say how many runs reached it.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ebpo.utils.files import atomic_write, write_json
from ebpo.lab.bench import CURVE_KEYS, REFERENCE_METHOD, BenchConfig
from ebpo.lab.stats import mean_ci, paired_difference, steps_to_target

__all__ = ["PAIRED_COLUMNS", "aggregate", "paired_rows", "select_learning_rates", "write_report"]

#: columns of paired.csv
PAIRED_COLUMNS = ("comparison", "method", "G", "lr", "reference_lr", "checkpoint", "seeds", "mean_diff", "ci_low", "ci_high", "reached", "reference_reached")

Key = tuple[str, int, float]


def _by_key(cells: Iterable[Mapping[str, Any]]) -> dict[Key, dict[int, Mapping[str, Any]]]:
    """``{(method, G, lr): {seed: cell}}``."""
    grouped: dict[Key, dict[int, Mapping[str, Any]]] = {}
    for cell in cells:
        s = cell["spec"]
        grouped.setdefault((s["method"], int(s["group_size"]), float(s["learning_rate"])), {})[int(s["seed"])] = cell
    return grouped


def select_learning_rates(cells: Iterable[Mapping[str, Any]], *, split: str = "validation") -> dict[tuple[str, int], dict[str, Any]]:
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
        lr = max(sorted(by_lr), key=lambda rate: by_lr[rate])  # max keeps the first (smallest) of ties
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
    """Every paired comparison of a method with GRPO (see the module docstring): rows with the
    keys of :data:`PAIRED_COLUMNS`. Pass@1 differences are in Pass@1 units (0.05 = 5 points);
    ``steps_to_target`` differences are in steps (negative: the method is faster)."""
    grouped = _by_key(cells)
    best = {key: value["lr"] for key, value in select_learning_rates(cells).items()}
    comparisons: list[tuple[str, str, int, float, float]] = []
    for g in config.group_sizes:
        for method in config.methods:
            if method == REFERENCE_METHOD:
                continue
            if (method, g) in best and (REFERENCE_METHOD, g) in best:
                comparisons.append(("best_lr", method, g, best[(method, g)], best[(REFERENCE_METHOD, g)]))
            comparisons += [("equal_lr", method, g, float(lr), float(lr)) for lr in config.reference_lrs]
    checkpoints: list[int | str] = [*config.checkpoints, "final"]
    rows = []
    for comparison, method, g, lr, ref_lr in comparisons:
        mine, theirs = grouped.get((method, g, lr), {}), grouped.get((REFERENCE_METHOD, g, ref_lr), {})
        seeds = sorted(set(mine) & set(theirs))
        if not seeds:
            continue
        base = {"comparison": comparison, "method": method, "G": g, "lr": lr, "reference_lr": ref_lr, "seeds": len(seeds)}
        for checkpoint in checkpoints:
            pairs = [(_pass1_at(mine[s], checkpoint), _pass1_at(theirs[s], checkpoint)) for s in seeds]
            pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
            if pairs:
                stats = paired_difference([a for a, _ in pairs], [b for _, b in pairs])
                rows.append({**base, "checkpoint": str(checkpoint), "seeds": stats["n"], **_interval(stats), "reached": "", "reference_reached": ""})
        steps = [(_steps_to_target(mine[s], config.target_gain), _steps_to_target(theirs[s], config.target_gain)) for s in seeds]
        stats = paired_difference([a for (a, _), _ in steps], [b for _, (b, _) in steps])
        rows.append({
            **base, "checkpoint": "steps_to_target", **_interval(stats),
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


def _table(grouped, columns, chosen: Mapping[tuple[str, int], float], methods: Sequence[str], group_sizes: Sequence[int]) -> list[dict[str, Any]]:
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
                row[label] = mean_ci([_column_value(r["heldout"], section, key) for r in by_seed.values()])
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
        for key, value in (("step", s), ("mean", stats["mean"]), ("lower", stats["mean"] - half), ("upper", stats["mean"] + half), ("n", stats["n"])):
            out[key].append(value)
    return out


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
    wall = [float(c["wall_time_s"]) for c in cells if isinstance(c.get("wall_time_s"), (int, float))]
    equal = {lr: _table(grouped, columns, {(m, g): float(lr) for m in methods for g in group_sizes}, methods, group_sizes) for lr in config.reference_lrs}
    return {
        "config": {k: v for k, v in _config_dict(config).items() if k not in ("verbose", "threads")},
        "columns": [label for label, _, _ in columns],
        "cells_finished": len(cells),
        "cells_total": len(config.cells()),
        "cell_wall_time_s": mean_ci(wall) | {"total": sum(wall)},
        "lr_sweep": sweep,
        "best_lr": {f"{m}|{g}": v for (m, g), v in best.items()},
        "table_best_lr": _table(grouped, columns, best_lr, methods, group_sizes),
        "table_equal_lr": {f"{lr:g}": rows for lr, rows in equal.items()},
        "paired": paired_rows(cells, config),
        "curves": curves,
    }


def _config_dict(config: BenchConfig) -> dict[str, Any]:
    import dataclasses

    return dataclasses.asdict(config)


# ====================================================================== report
def _interval_text(row: Mapping[str, Any], scale: float, digits: int) -> str:
    """``+1.2 [-0.3, +2.7]`` (the interval left out when it is undefined, e.g. one seed)."""
    mean, low, high = (scale * row[k] for k in ("mean_diff", "ci_low", "ci_high"))
    if not math.isfinite(mean):
        return "—"
    text = f"{mean:+.{digits}f}"
    return text + (f" [{low:+.{digits}f}, {high:+.{digits}f}]" if math.isfinite(low) and math.isfinite(high) else "")


def _fmt(stats: Mapping[str, float]) -> str:
    mean, ci = stats.get("mean", math.nan), stats.get("ci", math.nan)
    if not math.isfinite(mean):
        return "—"
    return f"{100 * mean:.1f}" + (f" ± {100 * ci:.1f}" if math.isfinite(ci) else "")


def _markdown(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _paired_markdown(rows: Sequence[Mapping[str, Any]], comparison: str, g: int, lr: float | None = None) -> str:
    selected = [r for r in rows if r["comparison"] == comparison and r["G"] == g and (lr is None or r["lr"] == lr)]
    if not selected:
        return "(no paired seeds yet)"
    by_method: dict[str, dict[str, Mapping[str, Any]]] = {}
    for r in selected:
        by_method.setdefault(r["method"], {})[r["checkpoint"]] = r
    checkpoints = list(dict.fromkeys(r["checkpoint"] for r in selected if r["checkpoint"] != "steps_to_target"))
    body = []
    for method, by_checkpoint in by_method.items():
        first = next(iter(by_checkpoint.values()))
        cells = [_interval_text(by_checkpoint[c], 100, 1) if c in by_checkpoint else "—" for c in checkpoints]
        s = by_checkpoint.get("steps_to_target")
        steps = f"{_interval_text(s, 1, 0)} ({s['reached']}/{s['seeds']} vs {s['reference_reached']}/{s['seeds']})" if s else "—"
        body.append([method, f"{first['lr']:g} / {first['reference_lr']:g}", first["seeds"], *cells, steps])
    headers = ["method", "lr / GRPO lr", "seeds", *(f"Δ Pass@1 @ {c} (points)" for c in checkpoints), "Δ steps to target (reached)"]
    return _markdown(headers, body)


def write_report(summary: Mapping[str, Any], config: BenchConfig, *, plots: bool = True) -> Path:
    """Write ``summary.json``, ``paired.csv``, the level tables, the sweep, the PNG plots and
    ``results.md`` to the output folder (each file atomically)."""
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "summary.json", summary, allow_nan=True)
    _write_csv(out / "paired.csv", PAIRED_COLUMNS, [[r[c] for c in PAIRED_COLUMNS] for r in summary["paired"]])
    columns = summary["columns"]
    _write_table_csv(out / "table_best_lr.csv", summary["table_best_lr"], columns)
    _write_table_csv(out / "table_equal_lr.csv", [r for rows in summary["table_equal_lr"].values() for r in rows], columns)
    _write_csv(
        out / "lr_sweep.csv",
        ["method", "G", "lr", "validation_mean", "validation_ci", "heldout_mean", "heldout_ci", "seeds", "chosen"],
        [[r["method"], r["G"], r["lr"], r["validation"]["mean"], r["validation"]["ci"], r["heldout"]["mean"], r["heldout"]["ci"], len(r["seeds"]), r["chosen"]] for r in summary["lr_sweep"]],
    )
    images = _plots(summary, config, out) if plots and summary["cells_finished"] else []
    with atomic_write(out / "results.md") as f:
        f.write(_results_markdown(summary, config, images))
    return out / "results.md"


def _results_markdown(summary: Mapping[str, Any], config: BenchConfig, images: Sequence[Path]) -> str:
    cfg = summary["config"]
    wall = summary["cell_wall_time_s"]
    lines = [
        "# ebpo bench — results\n",
        f"Cells finished: {summary['cells_finished']} / {summary['cells_total']} · methods {', '.join(cfg['methods'])} · "
        f"G ∈ {{{', '.join(map(str, cfg['group_sizes']))}}} · seeds {list(cfg['seeds'])} · learning rates "
        f"{[float(lr) for lr in cfg['learning_rates']]} · {cfg['steps']} RL steps of {cfg['prompts_per_step']} fresh prompts · "
        f"held-out Pass@1 over {cfg['eval_samples']} samples per problem, {cfg['eval_problems']} problems per (topic, tier) cell.",
        f"Wall time per cell: {wall['mean']:.0f} s on average ({wall['total'] / 3600:.2f} h of cells in all)." if wall["n"] else "",
        f"\n**Partial results: {summary['cells_finished']} of {summary['cells_total']} cells.**" if summary["cells_finished"] < summary["cells_total"] else "",
        "\n## Paired differences to GRPO\n",
        "Each seed's method and GRPO share the warm start and the prompt stream; the entry is the mean over seeds "
        "of (method − GRPO) in held-out Pass@1 points, with a 95% paired Student-t interval. An interval that "
        "excludes 0 is a difference this bench can see. Steps to target: steps until held-out Pass@1 is "
        f"{100 * cfg['target_gain']:.0f} points above the warm start (negative = faster; runs that never reach it "
        "count at their last step).\n",
    ]
    for g in cfg["group_sizes"]:
        lines += [f"### G = {g}, each method at its validation-chosen learning rate\n", _paired_markdown(summary["paired"], "best_lr", g), ""]
    for g in cfg["group_sizes"]:
        for lr in config.reference_lrs:
            lines += [f"### G = {g}, method and GRPO both at learning rate {lr:g}\n", _paired_markdown(summary["paired"], "equal_lr", g, lr), ""]
    lines += [
        "\n## Held-out Pass@1 levels (%, mean ± 95% CI over seeds, not paired), validation-chosen learning rate\n",
    ]
    for g in cfg["group_sizes"]:
        selected = [r for r in summary["table_best_lr"] if r["G"] == g]
        body = [[r["method"], f"{r['lr']:g}", len(r["seeds"]), *(_fmt(r[c]) for c in summary["columns"])] for r in selected]
        lines += [f"### G = {g}\n", _markdown(["method", "lr", "seeds", *summary["columns"]], body) if body else "(no finished cells)", ""]
    sweep_rows = [
        [r["method"], r["G"], f"{r['lr']:g}" + (" *" if r["chosen"] else ""), _fmt(r["validation"]), _fmt(r["heldout"]), len(r["seeds"])]
        for r in summary["lr_sweep"]
    ]
    lines += ["## Learning-rate sweep (Pass@1 %, validation chooses; * = chosen)\n", _markdown(["method", "G", "lr", "validation", "held-out", "seeds"], sweep_rows) if sweep_rows else "(no finished cells)"]
    if images:
        lines.append("\n## Plots\n")
        lines += [f"![{p.stem}]({p.name})" for p in images]
    return "\n".join(lines) + "\n"


def _plots(summary: Mapping[str, Any], config: BenchConfig, out: Path) -> list[Path]:
    from ebpo.utils.plotting import moving_average, plot_intervals, plot_panels

    images = []
    # paired.png: each method at its validation-chosen rate; paired_equal_lr.png: method and GRPO
    # at the same rate (one row of panels per rate), which isolates the estimator from its rate
    for comparison, name, what in (("best_lr", "paired", "validation-chosen learning rates"), ("equal_lr", "paired_equal_lr", "method and GRPO at the same learning rate")):
        rows = sorted((r for r in summary["paired"] if r["comparison"] == comparison and r["checkpoint"] != "steps_to_target"), key=lambda r: (r["lr"] if comparison == "equal_lr" else 0.0, r["G"]))
        if not rows:
            continue
        panels: dict[str, dict[str, list]] = {}
        for r in rows:
            panel = f"G = {r['G']}" + (f", lr {r['lr']:g}" if comparison == "equal_lr" else "")
            series = f"step {r['checkpoint']}" if r["checkpoint"] != "final" else f"step {config.steps} (final)"
            panels.setdefault(panel, {}).setdefault(series, []).append((r["method"], 100 * r["mean_diff"], 100 * r["ci_low"], 100 * r["ci_high"]))
        ncols = len({r["G"] for r in rows})
        images.append(plot_intervals(out / f"{name}.png", panels, ncols=ncols, xlabel="held-out Pass@1, method − GRPO (points)", title=f"Paired difference to GRPO, 95% interval over seeds ({what})"))
    titles = {"pass1": "held-out Pass@1", "reward": "training reward", "grad_norm": "gradient norm", "entropy": "token entropy", "shrinkage": "EBPO mean shrinkage S"}
    for curve, title in titles.items():
        panels_c: dict[str, dict[str, tuple[list, list]]] = {}
        bands: dict[str, dict[str, tuple[list, list]]] = {}
        for key, entry in summary["curves"].items():
            method, g = key.split("|")
            data = entry.get(curve)
            if not data or not data["step"]:
                continue
            window = 1 if curve == "pass1" else max(1, len(data["step"]) // 15)
            panels_c.setdefault(f"G={g}", {})[method] = (data["step"], moving_average(data["mean"], window))
            bands.setdefault(f"G={g}", {})[method] = (moving_average(data["lower"], window), moving_average(data["upper"], window))
        if panels_c:
            ordered = dict(sorted(panels_c.items(), key=lambda item: int(item[0][2:])))
            name = "heldout_pass1" if curve == "pass1" else curve
            images.append(plot_panels(out / f"{name}.png", ordered, bands=bands, ncols=len(ordered), title=f"{title}, mean and 95% CI over seeds (validation-chosen learning rates)"))
    return images


def _write_table_csv(path: Path, rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> None:
    header = ["method", "G", "lr", "seeds"] + [f"{c}_{s}" for c in columns for s in ("mean", "ci95")]
    body = [[r["method"], r["G"], r["lr"], len(r["seeds"])] + [r[c][k] for c in columns for k in ("mean", "ci")] for r in rows]
    _write_csv(path, header, body)


def _write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    with atomic_write(path, newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
