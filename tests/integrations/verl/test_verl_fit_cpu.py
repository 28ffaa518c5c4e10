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

verl's sub-steps and the two-output agent loop: test_verl_fit_cpu_shapes.py (4 more runs, a module
of their own so that CI runs them beside these).

``jspo_plus_plus`` and ``ebpo_topic`` on this path: ``ebpo verl smoke --all`` (the same code; not
run here for CI time). The legacy ``RayPPOTrainer`` path: test_verl_fit_cpu_legacy.py."""

from __future__ import annotations

import shutil
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
    launches = [full.launch, resumed.launch, no_callback.launch, stop.launch]
    return {
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
            assert (entry["options"]["prior"], entry["options"]["prior_mean"]) == (
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
