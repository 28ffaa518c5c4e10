"""verl's default path on a CPU with the two shapes of a step that verl's own code gives and the
single-turn ``sync`` runs of test_verl_fit_cpu.py do not (issue 36, items 3 and 4). Two
``run_smoke`` calls, 4 ``main_ppo`` runs (a module of their own, so that CI runs them beside that
module's runs):

* ``ebpo`` with verl's sub-steps (``ebpo verl smoke --parameter-sync-step 2``): verl's own
  ``PPOTrainer.step`` calls the estimator twice a step, each on half the prompts, and folds the
  metrics with its ``MetricsAggregator`` — the mechanism of its async modes, which ebpo refuses;
* ``ebpo`` with the two-output agent loop (``ebpo verl smoke --agent-loop two_output``): every
  session of verl's ``AgentLoopWorkerTQ`` answers twice and the second answer scores; one empty
  and one failing session are injected in step 1 and in step 3 (after the checkpoint, so the
  resumed run repeats them).

Each uninterrupted, then resumed from its step-2 checkpoint with verl's default resume."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from tests.integrations.verl.conftest import assert_smoke_passed, assert_trained_on_core_advantages

from ebpo.estimators import make_estimator
from ebpo.lab.verl_cpu.settings import SmokeSettings

pytestmark = [pytest.mark.verl, pytest.mark.slow]

SETTINGS = {"steps": 4, "save_step": 2, "batch_size": 4, "group_size": 4}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, warm_start_cache):
    from ebpo.lab.verl_cpu.smoke import run_smoke

    def smoke(name, **shape):
        work = tmp_path_factory.mktemp(name)
        settings = SmokeSettings(
            work_dir=str(work),
            estimators=("ebpo",),
            cache=str(warm_start_cache),
            **SETTINGS,
            **shape,
        )
        return run_smoke(settings, report=lambda line: None)

    return {
        "sub_steps": smoke("verl-v1-sub-steps", parameter_sync_step=2),
        "two_output": smoke("verl-v1-two-output", agent_loop="two_output"),
    }


# ---------------------------------------------------------------------- sub-steps


def test_verls_sub_steps_ran_and_ebpo_logged_the_steps_counts(runs):
    """``parameter_sync_step=2`` (``+trainer.v1.sync.parameter_sync_step=2``, verl's own
    ``PPOTrainer.step`` running the sub-steps): every smoke check passes — the resumed run is
    exact —, each step trained two disjoint halves of its prompts, and verl's file logger has
    the step's counts (15 real rows, 4 groups), not a sub-step's mean."""
    from ebpo.lab.verl_cpu.shared.results import read_manifest

    smoke = runs["sub_steps"]
    assert_smoke_passed(smoke, "2 sub-steps a step", "the step's counts", "same advantages (exact)")
    full, resumed = smoke.runs["ebpo"]
    manifest = read_manifest(str(Path(full.run_dir) / "trace"))
    assert manifest["parameter_sync_step"] == 2
    assert manifest["methods"]["step"] == "verl.trainer.ppo.v1.trainer_base.PPOTrainer.step"
    for step in range(1, 5):
        assert full.metrics[step]["ebpo/num_responses"] == 15
        assert full.metrics[step]["ebpo/num_groups"] == 4
        assert full.metrics[step]["ebpo/prior_count"] == 15 * step
        # the short group (3 of 4 samples) falls in one sub-step; the count is the step's
        assert full.metrics[step]["ebpo/missing_sessions"] == 1
        assert sorted(set(full.trace[step - 1].sub_steps)) == [0, 1]
    assert resumed.metrics[4]["ebpo/prior_count"] == 60


def test_sub_steps_trained_on_the_core_estimators_advantages(runs):
    """The core estimator replayed one call per sub-step (8 calls), in verl's order, gives the
    advantages the actor trained on and the state the run saved."""
    assert_trained_on_core_advantages(runs["sub_steps"].runs["ebpo"][0], calls=8)


# ---------------------------------------------------------------------- two outputs a session
#: the two-output runs' injected sessions: (step, kind) — one empty and one failing session in
#: step 1 and in step 3, the first step after the checkpoint
INJECTED = {1: 2, 2: 0, 3: 2, 4: 0}


def _sessions(trace):
    """``{(uid, session): [rows]}`` of the real rows of a step."""
    real = (~trace.padding & (trace.response_mask.sum(dim=-1) > 0)).tolist()
    out = {}
    for row, keep in enumerate(real):
        if keep:
            out.setdefault((trace.uids[row], trace.session_ids[row]), []).append(row)
    return out


def test_two_outputs_every_smoke_check_passes(runs):
    """The smoke's checks on the two-output runs: the existing ones (verl's path, exact resume,
    padding rows, the estimator's counts, rollout dumps, weight sync) and the new ones."""
    smoke = runs["two_output"]
    assert_smoke_passed(
        smoke,
        "verl's default path ran",
        "same advantages",
        "same estimator state",
        "padding rows",
        "verl dumped its rollouts",
        "every session is one estimator row",
        "the empty and the failing sessions are absent",
        "ebpo/missing_sessions = the sessions injected",
    )


def test_two_outputs_ran_through_verls_agent_loop_manager(runs):
    """verl's own ``AgentLoopWorkerTQ`` stored the outputs (``_agent_loop_postprocess``: keys
    ``{uid}_{session}_{0,1}`` in verl's rollout dump, the final reward copied onto the first
    output), warned about the empty session and marked the failing one's prompt (``_run_prompt``):
    a loop of ours in verl's place would not write these."""
    full, resumed = runs["two_output"].runs["ebpo"]
    for run, steps in ((full, (1, 3)), (resumed, (3,))):
        console = Path(run.console).read_text(errors="replace")
        assert console.count("Empty output for prompt") == len(steps)
        assert console.count("Error in _run_prompt for uid=") == len(steps)
        assert "InjectedSessionError: session 3 of prompt" in console
    outputs = set()
    for line in (full.rollout_dir / "1.jsonl").read_text().splitlines():
        key = json.loads(line)["uid"]
        if not key.startswith("pad"):
            outputs.add(int(key.rsplit("_", 1)[1]))
    assert outputs == {0, 1}
    for trace in full.trace:
        for rows in _sessions(trace).values():
            assert len(rows) == 2 and len({float(trace.rewards[r]) for r in rows}) == 1


def test_two_outputs_the_estimator_saw_one_row_per_session(runs):
    """Reference: the core estimator replayed on ONE row per session (uid, session) of every step
    in order, its advantage broadcast to both outputs of the session; the actor was updated with
    exactly that, and the counts verl logged are sessions, not rows."""
    full, resumed = runs["two_output"].runs["ebpo"]
    entry = full.estimator_state["estimators"][0]
    reference = make_estimator(entry["name"], **entry["options"])
    for trace in full.trace:
        sessions = _sessions(trace)
        first = [rows[0] for rows in sessions.values()]
        uids = np.array([trace.uids[r] for r in first], dtype=object)
        result = reference(
            trace.rewards[first], uids, mask=torch.ones(len(first), dtype=torch.bool)
        )
        expected = torch.zeros(len(trace.uids))
        for advantage, rows in zip(result.advantages.tolist(), sessions.values(), strict=True):
            expected[rows] = advantage
        expected = expected.to(trace.advantages.dtype).unsqueeze(-1) * trace.response_mask
        torch.testing.assert_close(trace.advantages, expected, rtol=0, atol=1e-6)
        logged = full.metrics[trace.step]
        assert logged["ebpo/num_responses"] == len(sessions) == 16 - INJECTED[trace.step]
        assert sum(len(rows) for rows in sessions.values()) == 2 * len(sessions)
    assert reference.state_dict() == entry["state"]
    assert full.metrics[4]["ebpo/prior_count"] == 2 * 14 + 2 * 16
    assert resumed.metrics[3]["ebpo/prior_count"] == 16 + 14 + 14


def test_two_outputs_missing_sessions_are_counted_where_injected(runs):
    """``ebpo/missing_sessions`` in verl's file log: 2 in steps 1 and 3 (an empty and a failing
    session each), 0 in steps 2 and 4 — the resumed run repeats step 3's. The groups of the
    injected sessions trained on their 3 other sessions."""
    full, resumed = runs["two_output"].runs["ebpo"]
    assert {s: full.metrics[s]["ebpo/missing_sessions"] for s in range(1, 5)} == INJECTED
    assert {s: resumed.metrics[s]["ebpo/missing_sessions"] for s in (3, 4)} == {3: 2, 4: 0}
    for trace in full.trace:
        per_group = {}
        for uid, _ in _sessions(trace):
            per_group[uid] = per_group.get(uid, 0) + 1
        assert sorted(per_group.values()) == ([3, 3, 4, 4] if INJECTED[trace.step] else [4] * 4)


def test_two_outputs_ebpo_replay_of_the_dump_gives_what_verl_trained_with(runs, tmp_path):
    """``ebpo replay`` on the two-output run's dump: one row per session (the last output), the
    same advantages as the actor's, the same final prior."""
    from tests.integrations.verl.conftest import replay_the_runs_dump

    full, _ = runs["two_output"].runs["ebpo"]
    report = replay_the_runs_dump(full, "ebpo", tmp_path, by_uid=True, per_session=True)
    summary = report["summary"]
    assert (summary["responses"], summary["groups"]) == (60, 16)
    assert summary["merged_outputs"] == 60 and summary["padding_rows"] == 8
