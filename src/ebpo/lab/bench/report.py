"""The files of ``ebpo bench``'s results folder, from the summary of its finished cells
(:func:`ebpo.lab.bench.summary.aggregate`): ``summary.json``; ``paired.csv`` (every paired
difference of a contrast, method − baseline, with its 95% interval); ``table_best_lr.csv`` /
``table_equal_lr.csv`` (held-out Pass@1 levels per topic / tier); ``lr_sweep.csv``; the plots
(:mod:`ebpo.lab.bench.plots`); and ``results.md``, which shows the tables, links the plots and
says first why the results do not compare the methods when they do not (:func:`caveats`: a smoke
test, cells that learned nothing).
The JSON and CSV files hold Pass@1 as a fraction in [0, 1] (differences too: 0.05 = 5 points);
``results.md`` and the plots show it in %. Every file is written atomically.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ebpo.integrations.trl.signal import PATIENCE
from ebpo.lab.bench.config import BenchConfig
from ebpo.lab.bench.plots import write_plots
from ebpo.lab.bench.summary import PAIRED_COLUMNS
from ebpo.utils.files import atomic_write, write_json

__all__ = ["caveats", "write_report"]


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
    by_contrast: dict[str, dict[str, Mapping[str, Any]]] = {}
    for r in selected:
        by_contrast.setdefault(r["contrast"], {})[r["checkpoint"]] = r
    checkpoints = list(
        dict.fromkeys(r["checkpoint"] for r in selected if r["checkpoint"] != "steps_to_target")
    )
    body = []
    for contrast, by_checkpoint in by_contrast.items():
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
            [
                contrast,
                f"{first['lr']:g} / {first['reference_lr']:g}",
                first["seeds"],
                *cells,
                steps,
            ]
        )
    headers = [
        "method − baseline",
        "lr / baseline lr",
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
    images = write_plots(summary, config, out) if plots and summary["cells_finished"] else []
    with atomic_write(out / "results.md") as f:
        f.write(_results_markdown(summary, config, images))
    return out / "results.md"


def caveats(summary: Mapping[str, Any]) -> list[str]:
    """One line for each reason the results do not compare the methods: a smoke test
    (``--quick``), cells that learned nothing measurable, cells without a learning signal. Shown
    at the top of results.md and at the end of the console output."""
    cfg, learning = summary["config"], summary["learning"]
    lines = []
    if cfg.get("smoke_test"):
        warm = cfg["train_options"].get("warm_start_steps")
        lines.append(
            f"Smoke test (--quick), not evidence: {len(cfg['seeds'])} seeds × {cfg['steps']} RL "
            f"steps of {cfg['prompts_per_step']} prompts"
            + (f" from a {warm}-step warm start" if warm else "")
            + " check that the bench runs end to end; the differences say nothing about the "
            "methods. The comparison is `ebpo bench` (`ebpo docs results`)."
        )
    n, unchanged, silent = learning["cells"], learning["unchanged"], learning["no_signal"]
    if n and len(unchanged) == n:
        lines.append(
            f"No learning: in all {n} cells held-out Pass@1 is the same at every evaluation, so "
            "every paired difference is 0 by construction — not a sign that the methods are equal."
        )
    elif unchanged:
        lines.append(
            f"{len(unchanged)} of {n} cells learned nothing measurable (held-out Pass@1 the same "
            f"at every evaluation: {_some(unchanged)}); their differences say nothing about the "
            "methods."
        )
    if silent:
        lines.append(
            f"{len(silent)} of {n} cells went {PATIENCE} or more RL steps in a row without any "
            f"learning signal (every group's rewards equal, e.g. all 0: {_some(silent)})."
        )
    return lines


def _some(labels: Sequence[str], shown: int = 4) -> str:
    more = len(labels) - shown
    return "; ".join(labels[:shown]) + (f"; and {more} more" if more > 0 else "")


def _multiplicity(rows: Sequence[Mapping[str, Any]]) -> str:
    """How many Pass@1 intervals the tables hold, and how many would exclude 0 by chance."""
    intervals = [
        r
        for r in rows
        if r["checkpoint"] != "steps_to_target"
        and math.isfinite(r["ci_low"])
        and math.isfinite(r["ci_high"])
    ]
    if not intervals:
        return ""
    excluding = sum(r["ci_low"] > 0 or r["ci_high"] < 0 for r in intervals)
    return (
        f"The tables hold {len(intervals)} Pass@1 intervals; if no method differed from its "
        f"baseline, about {0.05 * len(intervals):.1f} of them would exclude 0 by chance at 95 %, "
        f"and {excluding} do. They share the baselines' runs and the checkpoints of a run, so they "
        "are not independent either: one interval whose bound is just above 0 is weak evidence on "
        "its own."
    )


def _results_markdown(
    summary: Mapping[str, Any], config: BenchConfig, images: Sequence[Path]
) -> str:
    lines = [
        *_header_lines(summary),
        *_paired_lines(summary, config),
        *_level_lines(summary),
        *_sweep_lines(summary),
    ]
    if images:
        lines.append("\n## Plots\n")
        lines += [f"![{p.stem}]({p.name})" for p in images]
    return "\n".join(lines) + "\n"


def _header_lines(summary: Mapping[str, Any]) -> list[str]:
    """Title, what was run, wall time, and the caveats in bold."""
    cfg = summary["config"]
    wall = summary["cell_wall_time_s"]
    return [
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
        *(f"\n**{line}**" for line in caveats(summary)),
    ]


def _paired_lines(summary: Mapping[str, Any], config: BenchConfig) -> list[str]:
    """The paired differences of the contrasts: at the validation-chosen rates, then at equal rates."""
    cfg = summary["config"]
    lines = [
        "\n## Paired differences (method − baseline)\n",
        "Each seed's method and baseline share the warm start and the prompt stream; the entry is the mean over "
        "seeds of (method − baseline) in held-out Pass@1 points, with a 95% paired Student-t interval. An "
        "interval that excludes 0 is a difference this bench can see. Steps to target: steps until held-out Pass@1 is "
        f"{100 * cfg['target_gain']:.0f} points above the warm start (negative = faster; runs that never reach it "
        "count at their last step). " + _multiplicity(summary["paired"]) + "\n",
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
                f"### G = {g}, method and baseline both at learning rate {lr:g}\n",
                _paired_markdown(summary["paired"], "equal_lr", g, lr),
                "",
            ]
    return lines


def _level_lines(summary: Mapping[str, Any]) -> list[str]:
    """Held-out Pass@1 levels per G at the validation-chosen learning rate (not paired)."""
    lines = [
        "\n## Held-out Pass@1 levels (%, mean ± 95% CI over seeds, not paired), validation-chosen learning rate\n",
    ]
    for g in summary["config"]["group_sizes"]:
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
    return lines


def _sweep_lines(summary: Mapping[str, Any]) -> list[str]:
    """The learning-rate sweep: validation and held-out Pass@1 of every rate, the chosen one starred."""
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
    return [
        "## Learning-rate sweep (Pass@1 %, validation chooses; * = chosen)\n",
        _markdown(["method", "G", "lr", "validation", "held-out", "seeds"], sweep_rows)
        if sweep_rows
        else "(no finished cells)",
    ]


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
