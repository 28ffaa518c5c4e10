"""What a replay leaves behind: ``replay.json`` (every number, per step and for the run),
``replay.csv`` (one row per step and estimator), the console table and the one-line verdict.

``replay.json`` (``"format": "ebpo-replay"``, :data:`FORMAT_VERSION`; docs/replay.md documents
every field)::

    {"format": "ebpo-replay", "format_version": 1, "ebpo_version": ...,
     "inputs": {"paths": [...], "format": "verl" | "table", "files": N, "key_columns": [...],
                "reward_column": ..., "step_column": ...},
     "reference": "grpo", "signal_threshold": 1e-08,
     "estimators": {name: {"estimator": registered name, "options": {...}, "final_state": {...}}},
     "summary": {<input fields>, "steps", "first_step", "last_step",
                 "estimators": {name: {<estimator fields>}}},
     "verdict": "...",
     "steps": [{"step", "source", <input fields>, "estimators": {name: {<estimator fields>}}}]}

A number that does not exist (the mean advantage of all-fail responses in a step without any) is
``null`` in JSON and empty in the CSV.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ebpo import __version__
from ebpo.analysis.replay.engine import ESTIMATOR_FIELDS, INPUT_FIELDS, REFERENCE
from ebpo.estimators import AdvantageEstimator, estimator_spec
from ebpo.estimators.functional import SIGNAL_THRESHOLD
from ebpo.utils.file_sets import Writer
from ebpo.utils.files import atomic_write, write_json

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "console_table",
    "csv_text",
    "report",
    "report_writers",
    "verdict",
]

FORMAT = "ebpo-replay"
FORMAT_VERSION = 1
CSV_COLUMNS = ("step", "source", *INPUT_FIELDS, "estimator", *ESTIMATOR_FIELDS)


def report(
    inputs: dict[str, Any],
    estimators: dict[str, AdvantageEstimator],
    summary: dict[str, Any],
    records: Sequence[dict[str, Any]],
) -> dict[str, Any]:
    """The content of ``replay.json`` (module doc)."""
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "ebpo_version": __version__,
        "inputs": inputs,
        "reference": REFERENCE,
        "signal_threshold": SIGNAL_THRESHOLD,
        "estimators": {
            name: {
                "estimator": estimator_spec(name)[0],
                "options": estimator_spec(name)[1],
                "final_state": estimator.state_dict(),
            }
            for name, estimator in estimators.items()
        },
        "summary": summary,
        "verdict": verdict(summary, estimators),
        "steps": list(records),
    }


def csv_text(records: Sequence[dict[str, Any]]) -> str:
    """``replay.csv``: one row per step and estimator (:data:`CSV_COLUMNS`)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for record in records:
        head = [record["step"], record["source"], *(record[f] for f in INPUT_FIELDS)]
        for name, values in record["estimators"].items():
            writer.writerow(
                [*head, name, *("" if values[f] is None else values[f] for f in ESTIMATOR_FIELDS)]
            )
    return buffer.getvalue()


def report_writers(content: dict[str, Any]) -> dict[str, Writer]:
    """``replay.json`` and ``replay.csv`` as writers of a file set
    (:func:`ebpo.utils.file_sets.write_file_set`: the report is written all or nothing)."""
    text = csv_text(content["steps"])

    def write_csv(path: Path) -> None:
        with atomic_write(path) as handle:
            handle.write(text)

    return {"replay.json": lambda path: write_json(path, content), "replay.csv": write_csv}


def _headline_estimator(estimators: dict[str, AdvantageEstimator]) -> str | None:
    """The estimator the verdict speaks of: the first with an empirical-Bayes prior (EBPO's
    family), else the first besides GRPO, else none."""
    others = [name for name in estimators if name != REFERENCE]
    with_prior = [name for name in others if estimators[name].uses_prior]
    return next(iter(with_prior or others), None)


def verdict(summary: dict[str, Any], estimators: dict[str, AdvantageEstimator]) -> str:
    """One line: the responses GRPO gave no signal and how many of those the EBPO estimator (see
    :func:`_headline_estimator`) would have given one."""
    n = summary["responses"]
    reference = summary["estimators"][REFERENCE]
    silent = n - reference["nonzero_advantage_responses"]
    line = (
        f"GRPO gave no signal to {silent:,} of {n:,} responses ({_pct(silent, n)}; "
        f"{summary['all_fail_groups']:,} all-fail and {summary['all_pass_groups']:,} all-pass "
        f"groups of {summary['groups']:,})"
    )
    name = _headline_estimator(estimators)
    if name is None or not silent:
        return line + "."
    moved = summary["estimators"][name]["signal_where_grpo_has_none"]
    return line + f"; {name} would have given {moved:,} of them a signal ({_pct(moved, silent)})."


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "n/a"


def _number(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:+.{digits}f}"


def console_table(summary: dict[str, Any]) -> str:
    """The run's summary as a fixed-width table, one row per estimator."""
    n, groups = summary["responses"], summary["groups"]
    low, high = summary["group_size_min"], summary["group_size_max"]
    sizes = f"{low}" if low == high else f"{low}–{high}"
    lines = [
        f"replayed {summary['steps']:,} steps ({summary['first_step']} … {summary['last_step']}): "
        f"{n:,} responses in {groups:,} groups of {sizes}; all-fail groups "
        f"{_pct(summary['all_fail_groups'], groups)}, "
        f"all-pass {_pct(summary['all_pass_groups'], groups)}; mean reward "
        f"{summary['reward_mean']:.3f}",
        "",
    ]
    header = (
        "estimator",
        "A≠0",
        "zero-signal groups",
        "new signal vs GRPO",
        "A all-fail",
        "A all-pass",
        "shrinkage",
        "RMS Δ GRPO",
    )
    rows = [header]
    for name, values in summary["estimators"].items():
        rows.append(
            (
                name,
                _pct(values["nonzero_advantage_responses"], n),
                _pct(values["zero_signal_groups"], groups),
                f"{values['signal_where_grpo_has_none']:,}",
                _number(values["all_fail_advantage_mean"]),
                _number(values["all_pass_advantage_mean"]),
                f"{values['shrinkage_mean']:.3f}",
                f"{values['diff_to_grpo_rms']:.3f}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells))
    return "\n".join(lines)
