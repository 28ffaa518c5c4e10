"""What ``ebpo compare`` writes and prints: ``compare.json`` (the schema below), ``compare.csv``,
the verdict lines and a console table.

``compare.json``, format ``ebpo-compare`` version 1::

    {"format": "ebpo-compare", "version": 1,
     "baseline": "grpo", "metrics": [...], "metric_source": "evaluation", "smooth": 1,
     "accepted_differences": [setting keys],
     "runs": [{"path", "kind", "estimator", "seed"}, ...],
     "comparisons": [{"estimator", "metric", "seeds": [...],
                      "steps": [{"step", "pairs", "mean_diff", "ci_low", "ci_high", "p_value",
                                 "holm", "estimator_mean", "baseline_mean"}, ...],
                      "summaries": {"last_step" | "auc" | "steps_to_baseline_final": {same keys,
                                    "reached" for steps_to_baseline_final}},
                      "flags": {"identical_pairs": [seeds], "never_moved": bool},
                      "curves": {"step": [...], ESTIMATOR: {seed: [...]}, BASELINE: {seed: [...]}}}],
     "multiplicity": {"alpha", "intervals", "excluding_zero", "expected_by_chance",
                      "holm_excluding_zero"},
     "verdict": ["one line per estimator and metric", ...],
     "metric_note": "which metric, and why (a fallback to the training reward said)",
     "files": ["the report's files", ...]}  (added by the command that writes them)

Differences are estimator minus baseline, in the metric's units; ``ci_low`` / ``ci_high`` bound
the 95 % Student-t interval (null with one pair); ``holm``: the interval still excludes 0 after
Holm's correction over all ``intervals``. ``metric_source``: ``asked`` (``--metric``), ``all``,
``evaluation`` (the evaluation metrics every run logged) or ``training reward`` (none: the
fallback, not a held-out result; each verdict says so). ``flags``: seed pairs whose curves are
identical at every common step (the same run given twice?) and a metric that took one value at
every step of every run, common or not (no verdict: the line says why); both from two common steps
on. ``compare.csv`` holds the per-step and summary
rows.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ebpo.analysis.compare.differences import SUMMARIES
from ebpo.analysis.compare.pairing import EVAL_PATTERNS, Pairs

__all__ = [
    "CSV_COLUMNS", "FORMAT", "VERSION", "compare_csv", "console_table", "metric_note", "report",
    "verdict",
]  # fmt: skip

FORMAT, VERSION = "ebpo-compare", 1
CSV_COLUMNS = (
    "estimator", "baseline", "metric", "quantity", "step", "pairs", "mean_diff", "ci_low",
    "ci_high", "p_value", "holm", "estimator_mean", "baseline_mean", "reached",
)  # fmt: skip


def verdict(comparison: Mapping[str, Any], baseline: str, source: str = "asked") -> str:
    """One line: the difference at the last common step with its interval, and "not separated"
    whenever the interval covers 0 (or there is no interval: one pair); "no verdict" when the
    metric never moved or every pair is identical; what else weakens it in brackets (identical
    pairs, the training reward)."""
    row, flags = comparison["summaries"]["last_step"], comparison.get("flags", {})
    metric, estimator = comparison["metric"], comparison["estimator"]
    head = f"{estimator} − {baseline} on {metric} at step {row['step']}: {row['mean_diff']:+.4g}"
    notes = _notes(comparison, source)
    if flags.get("never_moved"):
        value = comparison["steps"][0]["baseline_mean"]
        moved = f"{metric} never moved: {value:.4g} at every step of every run"
        return f"{head}: no verdict ({moved}){notes}"
    identical = flags.get("identical_pairs", [])
    if identical and len(identical) == len(comparison["seeds"]):
        return (f"{head}: no verdict (every seed pair is identical at all {len(comparison['steps'])}"
                f" common steps: the same run given twice?){notes}")  # fmt: skip
    pairs = f"{row['pairs']} seed pair{'s' if row['pairs'] != 1 else ''}"
    if row["pairs"] < 2:
        why = "one pair gives no interval; run more seeds"
        return f"{head} over {pairs}: not separated ({why}){notes}"
    interval = f"95 % CI [{row['ci_low']:+.4g}, {row['ci_high']:+.4g}] over {pairs}"
    if row["ci_low"] <= 0 <= row["ci_high"]:
        return f"{head}, {interval}: not separated (the interval covers 0){notes}"
    side = "above" if row["ci_low"] > 0 else "below"
    holm = "and after" if row.get("holm") else "but not after"
    return f"{head}, {interval}: {estimator} {side} {baseline} ({holm} Holm's correction){notes}"


def _notes(comparison: Mapping[str, Any], source: str) -> str:
    notes = []
    identical = comparison.get("flags", {}).get("identical_pairs", [])
    if identical and len(identical) < len(comparison["seeds"]):
        notes.append(f"the runs of seed(s) {', '.join(identical)} are identical at all "
                     f"{len(comparison['steps'])} common steps: the same run given twice?")  # fmt: skip
    if source == "training reward":
        notes.append("the training reward, not a held-out result")
    return "".join(f" [{note}]" for note in notes)


def metric_note(metrics: Sequence[str], source: str) -> str:
    """Which metrics were compared and why: named, all, the evaluation, or the fallback."""
    names = ", ".join(metrics) or "none"
    return {
        "asked": f"compared {names} (--metric)",
        "all": f"compared {names} (--metric all: every metric every run logged)",
        "evaluation": f"compared {names}: the evaluation metrics every run logged",
        "training reward": (
            f"compared {names}, the training reward: no evaluation metric ("
            f"{', '.join(EVAL_PATTERNS)}) was logged by every run, so this is not a held-out "
            "result; evaluate during training to compare on one"
        ),
    }[source]


def report(
    pairs: Pairs,
    comparisons: Sequence[dict[str, Any]],
    multiplicity: Mapping[str, Any],
    *,
    metrics: Sequence[str],
    source: str = "asked",
    smooth: int,
    accepted: Sequence[str],
) -> dict[str, Any]:
    """The content of ``compare.json`` (NaN as null)."""
    runs = [
        {"path": str(run.path), "kind": run.kind, "estimator": run.estimator, "seed": run.seed}
        for seeds in pairs.runs.values()
        for run in seeds.values()
    ]
    content = {
        "format": FORMAT,
        "version": VERSION,
        "baseline": pairs.baseline,
        "metrics": list(metrics),
        "metric_source": source,
        "smooth": smooth,
        "accepted_differences": list(accepted),
        "runs": runs,
        "comparisons": list(comparisons),
        "multiplicity": dict(multiplicity),
        "verdict": [verdict(c, pairs.baseline, source) for c in comparisons],
        "metric_note": metric_note(metrics, source),
    }
    return _no_nan(content)


def _no_nan(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _no_nan(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_no_nan(v) for v in value]
    return value


def compare_csv(content: Mapping[str, Any]) -> str:
    """``compare.csv``: every per-step row (``quantity`` = step) and summary row."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for comparison in content["comparisons"]:
        head = {"estimator": comparison["estimator"], "baseline": content["baseline"],
                "metric": comparison["metric"]}  # fmt: skip
        rows = [("step", row) for row in comparison["steps"]]
        rows += [(name, comparison["summaries"][name]) for name in SUMMARIES]
        for quantity, row in rows:
            values = {**head, **row, "quantity": quantity}
            writer.writerow(["" if values.get(c) is None else values[c] for c in CSV_COLUMNS])
    return out.getvalue()


def console_table(content: Mapping[str, Any]) -> str:
    """The summaries of every comparison, one line each, for the terminal."""
    lines = [f"{'estimator':<12} {'metric':<28} {'summary':<24} {'pairs':>5}  difference [95 % CI]"]
    for comparison in content["comparisons"]:
        for name in SUMMARIES:
            row = comparison["summaries"][name]
            low, high = row["ci_low"], row["ci_high"]
            interval = "" if low is None else f" [{low:+.4g}, {high:+.4g}]"
            lines.append(
                f"{comparison['estimator']:<12} {comparison['metric'][:28]:<28} {name:<24} "
                f"{row['pairs']:>5}  {row['mean_diff']:+.4g}{interval}"
            )
    counts = content["multiplicity"]
    lines.append(
        f"{counts['intervals']} intervals computed; {counts['excluding_zero']} exclude 0 "
        f"(about {counts['expected_by_chance']:.1f} would by chance at 95 %); "
        f"{counts['holm_excluding_zero']} still do after Holm's correction"
    )
    return "\n".join(lines)
