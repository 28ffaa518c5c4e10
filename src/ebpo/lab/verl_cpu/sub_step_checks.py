"""The smoke's checks of a run with verl's sub-steps (``--parameter-sync-step N``,
``trainer.v1.sync.parameter_sync_step=N``): verl's ``PPOTrainer.step`` called the estimator and
updated the actor N times a step, each time on its own N-th of the step's prompts, and what verl
logged for the step under ``<estimator>/`` still counts the whole step
(:mod:`ebpo.integrations.verl.sub_steps`) while the plug-in's JSON-lines file holds one record per
call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ebpo.integrations.verl.state import METRICS_FILENAME
from ebpo.lab.verl_cpu.settings import Check, EstimatorRun, SmokeSettings
from ebpo.lab.verl_cpu.shared.results import RunResult

__all__ = ["per_call_records", "sub_step_checks"]


def per_call_records(a: RunResult) -> dict[int, list[dict[str, Any]]]:
    """``{global_step: [record, ...]}`` of the plug-in's JSON-lines file of run ``a`` (one record
    per estimator call, in call order; ``trainer.default_local_dir/ebpo_metrics.jsonl``)."""
    path = Path(a.run_dir) / "checkpoints" / METRICS_FILENAME
    out: dict[int, list[dict[str, Any]]] = {}
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            out.setdefault(int(record.get("global_step") or 0), []).append(record)
    return out


def sub_step_checks(settings: SmokeSettings, run: EstimatorRun, a: RunResult) -> list[Check]:
    """See module docstring; no checks without sub-steps or for verl's own estimators."""
    count = settings.parameter_sync_step
    if count <= 1 or not run.ours:
        return []
    prefix, per_sub_step = run.registry_name, settings.batch_size // count
    split, sums = [], []
    records = per_call_records(a)
    for trace in a.trace:
        masks = trace.sub_step_rows()
        real = ~trace.padding
        groups = [
            {u for u, m, r in zip(trace.uids, mask, real, strict=True) if m and r} for mask in masks
        ]
        disjoint = len(set().union(*groups)) == sum(len(g) for g in groups)
        split.append(
            len(masks) == count and disjoint and all(len(g) == per_sub_step for g in groups)
        )
        calls = records.get(trace.step, [])
        logged = a.metrics.get(trace.step, {})
        total = sum(float(r.get(f"{prefix}/num_responses", 0)) for r in calls)
        sums.append(
            len(calls) == count
            and logged.get(f"{prefix}/num_responses") == total
            and logged.get(f"{prefix}/prior_count", -1) == calls[-1].get(f"{prefix}/prior_count")
            if calls
            else False
        )
    steps = [t.step for t in a.trace]
    return [
        Check(
            f"{run.name}: verl ran {count} sub-steps a step (parameter_sync_step), each on its own "
            f"{per_sub_step} prompts",
            bool(split) and all(split),
            f"steps with {count} disjoint sub-batches: {sum(split)} of {len(split)}",
        ),
        Check(
            f"{run.name}: under sub-steps verl logged the step's counts ({prefix}/num_responses "
            f"summed over the calls, {prefix}/prior_count after the last)",
            bool(sums) and all(sums) and len(sums) == settings.steps,
            f"steps {steps}: {[len(records.get(s, [])) for s in steps]} records in "
            f"{METRICS_FILENAME} (one per call); {sum(sums)} steps agree",
        ),
    ]
