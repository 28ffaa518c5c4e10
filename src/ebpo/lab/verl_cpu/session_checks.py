"""The two-output smoke (``ebpo verl smoke --agent-loop two_output``): which sessions fail on
purpose (:func:`fault_plan`) and the checks, made on each run's trace and logged metrics, that
verl's agent loop manager and ebpo's estimator handled them (:func:`two_output_checks`).

Every session of verl's ``AgentLoopWorkerTQ`` answers twice (:mod:`~ebpo.lab.verl_cpu.v1.two_output`):
two rows a session reach the actor. The checks show that the estimator saw ONE row per session
(``<name>/num_responses`` = the sessions present, not the rows), that both outputs of a session
were trained with one advantage and one reward (the final output's), that the sessions made to
return nothing or to raise are absent while the rest of their group trained, and that
``<name>/missing_sessions`` counted them — in the steps they were injected in, 0 in the others,
in the resumed run too.
"""

from __future__ import annotations

from typing import Any

from ebpo.lab.verl_cpu.settings import Check, EstimatorRun, SmokeSettings
from ebpo.lab.verl_cpu.shared import assets
from ebpo.lab.verl_cpu.shared.results import RunResult, StepTrace
from ebpo.lab.verl_cpu.shared.sessions import OUTPUTS, SessionFault

__all__ = ["fault_plan", "two_output_checks"]

#: a planned fault: the training step whose prompts hold it, and the fault
Planned = tuple[int, SessionFault]


def fault_plan(settings: SmokeSettings, run: EstimatorRun, files: dict[str, str]) -> list[Planned]:
    """An empty session (session 1: a middle one) and a failing session (the last one) on two
    prompts of step 1 and of the first step after the checkpoint, read from the run's training
    file in its order (``data.shuffle=False``: step ``s`` trains rows ``(s-1)·batch_size`` on);
    prompts whose id the validation file also has are passed over (the loop must not fail a
    validation session).

    Raises:
        ValueError: a step without two such prompts.
    """
    import pandas as pd  # heavy optional import

    ids = [
        str(info["id"])
        for info in pd.read_parquet(assets.train_file(files, run.order))["extra_info"]
    ]
    val_ids = {str(info["id"]) for info in pd.read_parquet(assets.val_file(files))["extra_info"]}
    size, n = settings.batch_size, settings.group_size
    plan: list[Planned] = []
    for step in sorted({1, settings.save_step + 1}):
        prompts = [p for p in ids[(step - 1) * size : step * size] if p not in val_ids]
        if len(prompts) < 2:
            raise ValueError(f"step {step} has no two training prompts outside the validation set")
        plan += [
            (step, SessionFault("empty", prompts[0], 1 % n)),
            (step, SessionFault("fail", prompts[1], n - 1)),
        ]
    return plan


def _sessions(trace: StepTrace) -> dict[tuple[str, int], list[int]]:
    """``{(uid, session): rows}`` of the real rows of one step (verl's padding left out)."""
    real = (~trace.padding & (trace.response_mask.sum(dim=-1) > 0)).tolist()
    out: dict[tuple[str, int], list[int]] = {}
    for row, keep in enumerate(real):
        if keep:
            out.setdefault((trace.uids[row], trace.session_ids[row]), []).append(row)
    return out


def _one_value(trace: StepTrace, rows: list[int]) -> bool:
    """The rows carry one reward and, on every response token, one advantage."""
    rewards = {float(trace.rewards[row]) for row in rows}
    tokens = {
        float(x)
        for row in rows
        for x in trace.advantages[row][trace.response_mask[row] > 0].tolist()
    }
    return len(rewards) == 1 and len(tokens) == 1


def _one_row_check(run: EstimatorRun, result: RunResult, what: str) -> Check:
    prefix = run.registry_name
    counts, bad = [], []
    for trace in result.trace:
        sessions = _sessions(trace)
        logged = result.metrics.get(trace.step, {}).get(f"{prefix}/num_responses")
        rows = sum(len(r) for r in sessions.values())
        counts.append(f"step {trace.step}: {len(sessions)} sessions, {rows} rows, {logged}")
        shaped = all(len(r) == OUTPUTS for r in sessions.values())
        one = all(_one_value(trace, r) for r in sessions.values())
        if not (sessions and shaped and one and logged == float(len(sessions))):
            bad.append(trace.step)
    return Check(
        f"{run.name} ({what}): every session is one estimator row ({prefix}/num_responses = "
        f"sessions present; its {OUTPUTS} outputs trained with the final output's advantage)",
        bool(result.trace) and not bad,
        "; ".join(counts) + (f"; WRONG at steps {bad}" if bad else ""),
    )


def _absent_check(
    settings: SmokeSettings,
    run: EstimatorRun,
    plan: list[Planned],
    result: RunResult,
    what: str,
    first_step: int,
) -> Check:
    """The faults of the steps from ``first_step`` on: absent, their groups' other sessions in."""
    traces = {t.step: t for t in result.trace}
    expected = [(step, f) for step, f in plan if step >= first_step]
    seen = []
    for step, fault in expected:
        trace = traces.get(step)
        present = (
            set()
            if trace is None
            else {
                s
                for (_, s), rows in _sessions(trace).items()
                if trace.prompt_ids[rows[0]] == fault.prompt_id
            }
        )
        if present == set(range(settings.group_size)) - {fault.session}:
            seen.append(f"{fault.kind} {fault.prompt_id}#{fault.session} at step {step}")
    return Check(
        f"{run.name} ({what}): the empty and the failing sessions are absent, the rest of their "
        "groups trained",
        bool(expected) and len(seen) == len(expected),
        f"{len(seen)} of {len(expected)} injected sessions absent with their groups' other "
        f"sessions present: {', '.join(seen) or 'none'}",
    )


def _missing_check(run: EstimatorRun, plan: list[Planned], result: RunResult, what: str) -> Check:
    key = f"{run.registry_name}/missing_sessions"
    logged: dict[int, Any] = {t.step: result.metrics.get(t.step, {}).get(key) for t in result.trace}
    want = {step: float(sum(s == step for s, _ in plan)) for step in logged}
    return Check(
        f"{run.name} ({what}): verl's file logger has {key} = the sessions injected in each step "
        "(0 in the others)",
        bool(logged) and logged == want and any(want.values()),
        f"logged {logged}, injected {want}",
    )


def two_output_checks(
    settings: SmokeSettings, run: EstimatorRun, plan: list[Planned], a: RunResult, b: RunResult
) -> list[Check]:
    """The checks of the module docstring on the uninterrupted run ``a`` and the resumed ``b``."""
    found = []
    for result, what, first in ((a, "uninterrupted", 1), (b, "resumed", settings.save_step + 1)):
        found += [
            _one_row_check(run, result, what),
            _absent_check(settings, run, plan, result, what, first),
            _missing_check(run, plan, result, what),
        ]
    return found
