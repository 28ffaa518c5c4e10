"""The files of ``ebpo bench``'s results folder, from the summary of its finished cells
(:func:`ebpo.lab.bench.summary.aggregate`): ``summary.json``; ``paired.csv`` (every paired
difference to GRPO with its 95% interval); ``table_best_lr.csv`` / ``table_equal_lr.csv`` (held-out
Pass@1 levels per topic / tier); ``lr_sweep.csv``; the plots (``paired.png``,
``paired_equal_lr.png``, ``heldout_pass1.png`` and the training curves); and ``results.md``, which
shows the tables and links the plots. Every file is written atomically.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ebpo.lab.bench.config import BenchConfig
from ebpo.lab.bench.summary import PAIRED_COLUMNS
from ebpo.utils.files import atomic_write, write_json
from ebpo.utils.plotting import moving_average, plot_intervals, plot_panels

__all__ = ["write_report"]


def _interval_text(row: Mapping[str, Any], scale: float, digits: int) -> str:
    """``+1.2 [-0.3, +2.7]`` (the interval left out when it is undefined, e.g. one seed)."""
    mean, low, high = (scale * row[k] for k in ("mean_diff", "ci_low", "ci_high"))
    if not math.isfinite(mean):
        return "—"
    text = f"{mean:+.{digits}f}"
    return text + (
        f" [{low:+.{digits}f}, {high:+.{digits}f}]"
        if math.isfinite(low) and math.isfinite(high)
        else ""
    )


def _fmt(stats: Mapping[str, float]) -> str:
    mean, ci = stats.get("mean", math.nan), stats.get("ci", math.nan)
    if not math.isfinite(mean):
        return "—"
    return f"{100 * mean:.1f}" + (f" ± {100 * ci:.1f}" if math.isfinite(ci) else "")


def _markdown(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _paired_markdown(
    rows: Sequence[Mapping[str, Any]], comparison: str, g: int, lr: float | None = None
) -> str:
    selected = [
        r
        for r in rows
        if r["comparison"] == comparison and r["G"] == g and (lr is None or r["lr"] == lr)
    ]
    if not selected:
        return "(no paired seeds yet)"
    by_method: dict[str, dict[str, Mapping[str, Any]]] = {}
    for r in selected:
        by_method.setdefault(r["method"], {})[r["checkpoint"]] = r
    checkpoints = list(
        dict.fromkeys(r["checkpoint"] for r in selected if r["checkpoint"] != "steps_to_target")
    )
    body = []
    for method, by_checkpoint in by_method.items():
        first = next(iter(by_checkpoint.values()))
        cells = [
            _interval_text(by_checkpoint[c], 100, 1) if c in by_checkpoint else "—"
            for c in checkpoints
        ]
        s = by_checkpoint.get("steps_to_target")
        steps = (
            f"{_interval_text(s, 1, 0)} ({s['reached']}/{s['seeds']} vs {s['reference_reached']}/{s['seeds']})"
            if s
            else "—"
        )
        body.append(
            [method, f"{first['lr']:g} / {first['reference_lr']:g}", first["seeds"], *cells, steps]
        )
    headers = [
        "method",
        "lr / GRPO lr",
        "seeds",
        *(f"Δ Pass@1 @ {c} (points)" for c in checkpoints),
        "Δ steps to target (reached)",
    ]
    return _markdown(headers, body)


def write_report(summary: Mapping[str, Any], config: BenchConfig, *, plots: bool = True) -> Path:
    """Write ``summary.json``, ``paired.csv``, the level tables, the sweep, the PNG plots and
    ``results.md`` to the output folder (each file atomically)."""
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "summary.json", summary, allow_nan=True)
    _write_csv(
        out / "paired.csv",
        PAIRED_COLUMNS,
        [[r[c] for c in PAIRED_COLUMNS] for r in summary["paired"]],
    )
    columns = summary["columns"]
    _write_table_csv(out / "table_best_lr.csv", summary["table_best_lr"], columns)
    _write_table_csv(
        out / "table_equal_lr.csv",
        [r for rows in summary["table_equal_lr"].values() for r in rows],
        columns,
    )
    _write_csv(
        out / "lr_sweep.csv",
        [
            "method",
            "G",
            "lr",
            "validation_mean",
            "validation_ci",
            "heldout_mean",
            "heldout_ci",
            "seeds",
            "chosen",
        ],
        [
            [
                r["method"],
                r["G"],
                r["lr"],
                r["validation"]["mean"],
                r["validation"]["ci"],
                r["heldout"]["mean"],
                r["heldout"]["ci"],
                len(r["seeds"]),
                r["chosen"],
            ]
            for r in summary["lr_sweep"]
        ],
    )
    images = _plots(summary, config, out) if plots and summary["cells_finished"] else []
    with atomic_write(out / "results.md") as f:
        f.write(_results_markdown(summary, config, images))
    return out / "results.md"


def _results_markdown(
    summary: Mapping[str, Any], config: BenchConfig, images: Sequence[Path]
) -> str:
    cfg = summary["config"]
    wall = summary["cell_wall_time_s"]
    lines = [
        "# ebpo bench — results\n",
        f"Cells finished: {summary['cells_finished']} / {summary['cells_total']} · "
        f"methods {', '.join(cfg['methods'])} · "
        f"G ∈ {{{', '.join(map(str, cfg['group_sizes']))}}} · seeds {list(cfg['seeds'])} · learning rates "
        f"{[float(lr) for lr in cfg['learning_rates']]} · "
        f"{cfg['steps']} RL steps of {cfg['prompts_per_step']} fresh prompts · "
        f"held-out Pass@1 over {cfg['eval_samples']} samples per problem, "
        f"{cfg['eval_problems']} problems per (topic, tier) cell.",
        f"Wall time per cell: {wall['mean']:.0f} s on average ({wall['total'] / 3600:.2f} h of cells in all)."
        if wall["n"]
        else "",
        f"\n**Partial results: {summary['cells_finished']} of {summary['cells_total']} cells.**"
        if summary["cells_finished"] < summary["cells_total"]
        else "",
        "\n## Paired differences to GRPO\n",
        "Each seed's method and GRPO share the warm start and the prompt stream; the entry is the mean over seeds "
        "of (method − GRPO) in held-out Pass@1 points, with a 95% paired Student-t interval. An interval that "
        "excludes 0 is a difference this bench can see. Steps to target: steps until held-out Pass@1 is "
        f"{100 * cfg['target_gain']:.0f} points above the warm start (negative = faster; runs that never reach it "
        "count at their last step).\n",
    ]
    for g in cfg["group_sizes"]:
        lines += [
            f"### G = {g}, each method at its validation-chosen learning rate\n",
            _paired_markdown(summary["paired"], "best_lr", g),
            "",
        ]
    for g in cfg["group_sizes"]:
        for lr in config.reference_lrs:
            lines += [
                f"### G = {g}, method and GRPO both at learning rate {lr:g}\n",
                _paired_markdown(summary["paired"], "equal_lr", g, lr),
                "",
            ]
    lines += [
        "\n## Held-out Pass@1 levels (%, mean ± 95% CI over seeds, not paired), validation-chosen learning rate\n",
    ]
    for g in cfg["group_sizes"]:
        selected = [r for r in summary["table_best_lr"] if r["G"] == g]
        body = [
            [
                r["method"],
                f"{r['lr']:g}",
                len(r["seeds"]),
                *(_fmt(r[c]) for c in summary["columns"]),
            ]
            for r in selected
        ]
        lines += [
            f"### G = {g}\n",
            _markdown(["method", "lr", "seeds", *summary["columns"]], body)
            if body
            else "(no finished cells)",
            "",
        ]
    sweep_rows = [
        [
            r["method"],
            r["G"],
            f"{r['lr']:g}" + (" *" if r["chosen"] else ""),
            _fmt(r["validation"]),
            _fmt(r["heldout"]),
            len(r["seeds"]),
        ]
        for r in summary["lr_sweep"]
    ]
    lines += [
        "## Learning-rate sweep (Pass@1 %, validation chooses; * = chosen)\n",
        _markdown(["method", "G", "lr", "validation", "held-out", "seeds"], sweep_rows)
        if sweep_rows
        else "(no finished cells)",
    ]
    if images:
        lines.append("\n## Plots\n")
        lines += [f"![{p.stem}]({p.name})" for p in images]
    return "\n".join(lines) + "\n"


def _plots(summary: Mapping[str, Any], config: BenchConfig, out: Path) -> list[Path]:
    images = []
    # paired.png: each method at its validation-chosen rate; paired_equal_lr.png: method and GRPO
    # at the same rate (one row of panels per rate), which isolates the estimator from its rate
    for comparison, name, what in (
        ("best_lr", "paired", "validation-chosen learning rates"),
        ("equal_lr", "paired_equal_lr", "method and GRPO at the same learning rate"),
    ):
        rows = sorted(
            (
                r
                for r in summary["paired"]
                if r["comparison"] == comparison and r["checkpoint"] != "steps_to_target"
            ),
            key=lambda r: (r["lr"] if comparison == "equal_lr" else 0.0, r["G"]),
        )
        if not rows:
            continue
        panels: dict[str, dict[str, list]] = {}
        for r in rows:
            panel = f"G = {r['G']}" + (f", lr {r['lr']:g}" if comparison == "equal_lr" else "")
            series = (
                f"step {r['checkpoint']}"
                if r["checkpoint"] != "final"
                else f"step {config.steps} (final)"
            )
            panels.setdefault(panel, {}).setdefault(series, []).append(
                (r["method"], 100 * r["mean_diff"], 100 * r["ci_low"], 100 * r["ci_high"])
            )
        ncols = len({r["G"] for r in rows})
        images.append(
            plot_intervals(
                out / f"{name}.png",
                panels,
                ncols=ncols,
                xlabel="held-out Pass@1, method − GRPO (points)",
                title=f"Paired difference to GRPO, 95% interval over seeds ({what})",
            )
        )
    titles = {
        "pass1": "held-out Pass@1",
        "reward": "training reward",
        "grad_norm": "gradient norm",
        "entropy": "token entropy",
        "shrinkage": "EBPO mean shrinkage S",
    }
    for curve, title in titles.items():
        panels_c: dict[str, dict[str, tuple[list, list]]] = {}
        bands: dict[str, dict[str, tuple[list, list]]] = {}
        for key, entry in summary["curves"].items():
            method, g = key.split("|")
            data = entry.get(curve)
            if not data or not data["step"]:
                continue
            window = 1 if curve == "pass1" else max(1, len(data["step"]) // 15)
            panels_c.setdefault(f"G={g}", {})[method] = (
                data["step"],
                moving_average(data["mean"], window),
            )
            bands.setdefault(f"G={g}", {})[method] = (
                moving_average(data["lower"], window),
                moving_average(data["upper"], window),
            )
        if panels_c:
            ordered = dict(sorted(panels_c.items(), key=lambda item: int(item[0][2:])))
            name = "heldout_pass1" if curve == "pass1" else curve
            images.append(
                plot_panels(
                    out / f"{name}.png",
                    ordered,
                    bands=bands,
                    ncols=len(ordered),
                    title=f"{title}, mean and 95% CI over seeds (validation-chosen learning rates)",
                )
            )
    return images


def _write_table_csv(path: Path, rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> None:
    header = ["method", "G", "lr", "seeds"] + [
        f"{c}_{s}" for c in columns for s in ("mean", "ci95")
    ]
    body = [
        [r["method"], r["G"], r["lr"], len(r["seeds"])]
        + [r[c][k] for c in columns for k in ("mean", "ci")]
        for r in rows
    ]
    _write_csv(path, header, body)


def _write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    with atomic_write(path, newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
