"""verl's default path with ebpo inside, run for real on a CPU (issue #27): ``python -m
verl.trainer.main_ppo`` → ``TaskRunnerV1`` → TransferQueue → ``PPOTrainerSync.fit()``, the actor on
2 data-parallel ranks (gloo). ``main_ppo`` runs shared by the module's tests (most of their time
is Ray and verl's actors starting):

* ``ebpo`` uninterrupted and resumed from its step-2 checkpoint (``ebpo verl smoke``'s runs and
  checks) with verl's default resume (``trainer.resume_mode=auto``, the relative
  ``default_local_dir=checkpoints``, started in the run folder), each dumping its rollouts with
  verl's own writer (``trainer.rollout_data_dir``), which ``ebpo replay`` reads back;
* ``ebpo`` resumed (``resume_mode=resume_path``) from that checkpoint WITHOUT ebpo's checkpoint callback (verl's default
  ``checkpoint_callback_class=null``): the plug-in restores the state from the folder verl
  resumed from, and the steps after the checkpoint are still exact;
* ``ebpo`` resumed from a copy of that checkpoint without the state file and without the
  callback: it stops at its first advantage call with one line naming the callback key.

The same ``run_smoke`` call also runs the ``ebpo`` and ``grpo`` recipes of ``ebpo verl recipe
--list`` (``ebpo verl smoke --recipe``), uninterrupted and resumed: every algorithm and actor key
of the recipe kept, the reference policy and verl's KL loss included (4 more ``main_ppo`` runs).

Two more ``run_smoke`` calls (4 more ``main_ppo`` runs) give the two shapes of a step that
verl's own code has and the single-turn ``sync`` runs lack (issue 36, items 3 and 4):

* ``ebpo`` with verl's sub-steps (``ebpo verl smoke --parameter-sync-step 2``): verl's own
  ``PPOTrainer.step`` calls the estimator twice a step, each on half the prompts, and folds the
  metrics with its ``MetricsAggregator`` — the mechanism of its async modes, which ebpo refuses;
* ``ebpo`` with the two-output agent loop (``ebpo verl smoke --agent-loop two_output``): every
  session of verl's ``AgentLoopWorkerTQ`` answers twice and the second answer scores; one empty
  and one failing session are injected in step 1 and in step 3 (after the checkpoint, so the
  resumed run repeats them).

All in one module, whose runs one CI worker makes while the other runs the rest of the suite
(split over two modules, the two workers ran verl's actors at once and CI took longer).

``jspo_plus_plus`` and ``ebpo_topic`` on this path: ``ebpo verl smoke --all`` (the same code; not
run here for CI time). The legacy ``RayPPOTrainer`` path: test_verl_fit_cpu_legacy.py."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from tests.integrations.verl.conftest import assert_smoke_passed, assert_trained_on_core_advantages

from ebpo.estimators import make_estimator
from ebpo.lab.verl_cpu.settings import ESTIMATORS, SmokeSettings

pytestmark = [pytest.mark.verl, pytest.mark.slow]

SETTINGS = {"steps": 4, "save_step": 2, "batch_size": 4, "group_size": 4}
NO_CALLBACK = ("trainer.checkpoint_callback_class=null",)
RECIPE_RUNS = ("ebpo", "grpo")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, warm_start_cache):
    from ebpo.lab.verl_cpu.checks import process_checks, resume_checks
    from ebpo.lab.verl_cpu.smoke import run_smoke, run_spec
    from ebpo.lab.verl_cpu.v1.fit import fit_v1

    work = tmp_path_factory.mktemp("verl-v1")
    settings = SmokeSettings(
        work_dir=str(work),
        estimators=("ebpo",),
        recipes=RECIPE_RUNS,
        cache=str(warm_start_cache),
        **SETTINGS,
    )
    smoke = run_smoke(settings, report=lambda line: None)
    files, model, ebpo = smoke.files, smoke.model_path, ESTIMATORS["ebpo"]
    full, resumed = smoke.runs["ebpo"]
    checkpoint = Path(full.run_dir) / "checkpoints" / "global_step_2"
    no_callback = fit_v1(
        run_spec(
            settings,
            ebpo,
            files,
            model,
            work / "ebpo" / "no-callback",
            str(checkpoint),
            NO_CALLBACK,
        )
    )
    # the same checkpoint without ebpo's state file
    stripped = work / "stripped" / "global_step_2"
    shutil.copytree(checkpoint, stripped)
    (stripped / "ebpo_estimator_state.json").unlink()
    stop = fit_v1(
        run_spec(settings, ebpo, files, model, work / "ebpo" / "stop", str(stripped), NO_CALLBACK)
    )
    # the two shapes of a step the single-turn sync runs lack (4 more main_ppo runs): verl's
    # sub-steps and the two-output agent loop
    shapes = {
        name: run_smoke(
            replace(settings, work_dir=str(work / name), recipes=(), **shape),
            report=lambda line: None,
        )
        for name, shape in (
            ("sub_steps", {"parameter_sync_step": 2}),
            ("two_output", {"agent_loop": "two_output"}),
        )
    }
    launches = [full.launch, resumed.launch, no_callback.launch, stop.launch]
    launches += [run.launch for smoke in shapes.values() for run in smoke.runs["ebpo"]]
    return {
        **shapes,
        "settings": settings,
        "smoke": smoke,
        "no_callback": no_callback,
        "no_callback_checks": resume_checks(settings, ebpo, full, no_callback),
        "stop": stop,
        "process_checks": process_checks("every run of the module", launches),
    }


def test_every_smoke_check_passes(runs):
    smoke = runs["smoke"]
    assert_smoke_passed(
        smoke,
        "verl's default path ran",
        "same advantages",
        "same metrics",
        "same estimator state",
        "restored ebpo's state from the folder verl resumed from (trainer.resume_mode=auto",
        "padding rows",
        "reference log-probs and verl's KL loss",
        "the reference is the frozen initial policy",
        "the resumed run computed the same KL",
        "2 data-parallel CPU ranks",
        "weight sync",
        "verl dumped its rollouts",
        "127.0.0.1",
        "nothing left running",
    )


def test_verls_own_classes_ran_and_no_loop_method_of_ours(runs):
    """The manifest written inside the run: ``main_ppo``'s ``TaskRunnerV1`` built a trainer whose
    loop methods all resolve to verl's v1 modules (an overridden ``fit``, or the legacy
    ``RayPPOTrainer``, would show here), TransferQueue's controller was up."""
    from ebpo.lab.verl_cpu.shared.results import read_manifest
    from ebpo.lab.verl_cpu.v1.trainer import VERL_METHODS

    full, _ = runs["smoke"].runs["ebpo"]
    manifest = read_manifest(str(Path(full.run_dir) / "trace"))
    assert manifest["task_runner"]["class"] == "TaskRunnerV1"
    assert manifest["task_runner"]["file"].endswith("verl/trainer/main_ppo.py")
    assert set(manifest["methods"]) == set(VERL_METHODS)
    for name, where in manifest["methods"].items():
        assert where.startswith("verl.trainer.ppo.v1.trainer_"), (name, where)
    assert manifest["methods"]["fit"] == "verl.trainer.ppo.v1.trainer_base.PPOTrainer.fit"
    assert manifest["trainer_mode"] == "sync" and manifest["use_v1"] is True
    assert manifest["transfer_queue_controller"] is True
    assert "verl.trainer.ppo.v1.trainer_sync.PPOTrainerSync" in manifest["trainer_bases"]


def test_the_loop_trained_on_the_core_estimators_advantages(runs):
    """Reference: the core estimator replayed on the rewards and groups verl's loop produced (both
    ranks' rows, padding rows excluded), step after step so that its state carries across steps;
    broadcast over the response tokens. The plug-in inside verl must have handed the actor
    exactly that, and nothing to verl's padding rows."""
    assert_trained_on_core_advantages(runs["smoke"].runs["ebpo"][0], calls=4)


def test_ebpo_replay_of_the_runs_rollout_dump_gives_what_verl_trained_with(runs, tmp_path):
    """Issue #31: the rollouts verl's own writer dumped during the uninterrupted run (``{1..4}.jsonl``;
    the resumed run: 3 and 4), replayed by ``ebpo replay`` as the smoke's summary says: every
    group of every step gets the ``ebpo`` advantages the actor was updated with (verl's uid groups,
    its padding rows and the short groups included), and the replay's final prior is the one the
    run checkpointed at step 4. The smoke's ``ebpo`` is the ``ebpo`` variant (no options); its
    ``jspo_plus_plus`` sets ``smooth_coef=0.9``, which the variant of that name does not."""
    from tests.integrations.verl.conftest import replay_the_runs_dump

    full, resumed = runs["smoke"].runs["ebpo"]
    assert sorted(p.name for p in full.rollout_dir.iterdir()) == [
        f"{s}.jsonl" for s in (1, 2, 3, 4)
    ]
    assert sorted(p.name for p in resumed.rollout_dir.iterdir()) == ["3.jsonl", "4.jsonl"]
    report = replay_the_runs_dump(full, "ebpo", tmp_path, by_uid=True)
    summary = report["summary"]
    assert (summary["padding_rows"], summary["responses"], summary["groups"]) == (4, 60, 16)
    assert (summary["group_size_min"], summary["group_size_max"]) == (3, 4)


def test_uneven_groups_and_every_real_row_counted_once(runs):
    """Every 4th prompt has 3 samples (verl's ``__rollout_n__``): 15 real rows a step, padded to
    16 for the 2 ranks. The history prior counts the real rows of every step once — resumed
    run included: restored at step 2, then steps 3 and 4. ``ebpo/missing_sessions`` counts
    against ``rollout.n``: the short group's missing sample, 1 a step."""
    full, resumed = runs["smoke"].runs["ebpo"]
    per_step = 3 * 4 + 3
    for step in range(1, 5):
        assert full.metrics[step]["ebpo/num_responses"] == per_step
        assert full.metrics[step]["ebpo/prior_count"] == step * per_step
        # counted against rollout.n: the short group's missing sample counts (documented)
        assert full.metrics[step]["ebpo/missing_sessions"] == 1
    assert resumed.metrics[3]["ebpo/prior_count"] == 3 * per_step
    sizes = {}
    for uid, pad in zip(full.trace[0].uids, full.trace[0].padding.tolist(), strict=True):
        if not pad:
            sizes[uid] = sizes.get(uid, 0) + 1
    assert sorted(sizes.values()) == [3, 4, 4, 4]


def test_verl_logged_our_metrics_next_to_its_own(runs):
    """ebpo's statistics reach verl's ``Tracking`` (the file backend) through the v1 trainer's
    ``metrics`` dict: this fails if that channel breaks (e.g. verl renames the dict)."""
    full, _ = runs["smoke"].runs["ebpo"]
    assert any(key.startswith("val-core/") for key in full.metrics[0])  # validation before training
    for step in range(1, SETTINGS["steps"] + 1):
        logged = full.metrics[step]
        assert "ebpo/shrinkage_mean" in logged and "actor/pg_loss" in logged, sorted(logged)
        assert logged["training/global_step"] == step
        # One mini-batch per step: the update's log-probs are the old ones before the optimizer
        # moves (computed through verl's TransferQueue round trip), so a misaligned token shows.
        assert abs(logged["actor/ppo_kl"]) < 1e-6 and logged["actor/pg_clipfrac"] == 0.0


@pytest.mark.parametrize("recipe", RECIPE_RUNS)
def test_a_recipe_trained_with_its_estimator_reference_policy_and_kl_loss(runs, recipe):
    """``ebpo verl smoke --recipe``: verl's trainer computed the reference log-probs
    (``_compute_ref_log_prob``, the CPU worker's frozen initial model) and the actor's loss carried
    verl's KL term with the recipe's coefficient; the advantages the actor trained on are the
    recipe's estimator's, replayed here on the run's rewards (``grpo``: verl's own
    ``compute_grpo_outcome_advantage``; ``ebpo`` with the recipe's batch prior: the core
    estimator), so a recipe run that fell back to another estimator fails here."""
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    from ebpo.lab.verl_cpu.settings import recipe_run

    full, resumed = runs["smoke"].runs[f"recipe_{recipe}"]
    run = recipe_run(recipe)
    assert run.kl_loss and [t.step for t in full.trace] == [1, 2, 3, 4]
    kl = [full.metrics[step]["actor/kl_loss"] for step in range(1, 5)]
    assert abs(kl[0]) < 1e-7 and all(x > 1e-7 for x in kl[1:]), kl  # KL grows once the actor moves
    assert {full.metrics[step]["actor/kl_coef"] for step in range(1, 5)} == {0.001}
    assert [resumed.metrics[step]["actor/kl_loss"] for step in (3, 4)] == kl[2:]
    for trace in full.trace:
        real = ~trace.padding & (trace.response_mask.sum(dim=-1) > 0)
        uids = np.array(trace.uids, dtype=object)
        if recipe == "grpo":
            scores = torch.zeros_like(trace.response_mask)
            last = (trace.response_mask.sum(dim=-1).long() - 1).clamp(min=0)
            scores[torch.arange(len(last)), last] = trace.rewards.to(scores.dtype)
            expected, _ = compute_grpo_outcome_advantage(
                scores[real],
                trace.response_mask[real],
                uids[real.numpy()],
                norm_adv_by_std_in_grpo=True,
            )
        else:
            (entry,) = full.estimator_state["estimators"]
            assert (entry["options"]["prior"], entry["options"]["prior_mean_from"]) == (
                "batch",
                "group_means",
            )
            result = make_estimator(entry["name"], **entry["options"])(
                trace.rewards, uids, mask=real
            )
            expected = (result.advantages.unsqueeze(-1) * trace.response_mask)[real]
        torch.testing.assert_close(
            trace.advantages[real], expected.to(trace.advantages.dtype), rtol=0, atol=1e-6
        )


def test_a_resume_without_the_callback_restores_the_state_and_stays_exact(runs):
    """verl's default ``checkpoint_callback_class=null`` on resume: the plug-in restores ebpo's
    prior from the folder verl resumed from (saved there by the first run's callback) — the steps
    after the checkpoint equal the uninterrupted run's, bit for bit. Its own later checkpoints
    carry no state (no callback: the warning says so)."""
    b = runs["no_callback"]
    assert b.ok, b.console
    compared = [c for c in runs["no_callback_checks"] if "same estimator state" not in c.name]
    failed = [f"{c.name}: {c.detail}" for c in compared if not c.ok]
    assert not failed and len(compared) == 5, "\n".join(failed)
    console = Path(b.console).read_text()
    assert "without ebpo's checkpoint callback; restored ebpo's state" in console
    assert b.metrics[3]["ebpo/prior_count"] == 3 * 15
    assert not (
        Path(b.run_dir) / "checkpoints" / "global_step_4" / "ebpo_estimator_state.json"
    ).exists()


def test_a_resume_without_any_state_stops_in_one_line(runs):
    """Resumed from a checkpoint without ebpo's state file and without the callback: the run stops
    at its first advantage call — before the actor trains step 3 — with one line naming the key."""
    stop = runs["stop"]
    assert stop.launch.returncode != 0
    lines = [
        line for line in Path(stop.console).read_text().splitlines() if "ebpo: verl resumed" in line
    ]
    assert lines, stop.console
    assert (
        "trainer.checkpoint_callback_class=ebpo.integrations.verl.checkpoint.EBPOCheckpointCallback"
        in lines[-1]
    )
    assert "holds no ebpo_estimator_state.json" in lines[-1]
    assert [t.step for t in stop.trace] == []  # the actor never trained


def test_every_run_listened_on_loopback_only_and_left_nothing_running(runs):
    """Every run of the module — the failing one included: Ray's head and agents,
    the workers, TransferQueue's ZMQ servers, the gloo store."""
    failed = [f"{c.name}: {c.detail}" for c in runs["process_checks"] if not c.ok]
    assert not failed, "\n".join(failed)
    kinds = {x.process.split(".")[0].split(":")[0] for x in runs["stop"].launch.listeners}
    assert {"gcs_server", "raylet"} <= kinds


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
