"""verl's own ``RayPPOTrainer.fit()`` on CPU with ebpo inside (issue #19): one uninterrupted run and
one run resumed from its step-2 checkpoint per estimator configuration (``ebpo``,
``jspo_plus_plus``, ``ebpo_topic``), shared by every test of this module (~2 min on 2 cores)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ebpo.estimators import make_estimator
from ebpo.lab.verl_cpu.settings import ESTIMATORS, SmokeSettings

pytestmark = [pytest.mark.verl, pytest.mark.slow]

SETTINGS = {"steps": 4, "save_step": 2, "batch_size": 4, "group_size": 4}


@pytest.fixture(scope="module")
def ray_cluster():
    """One local Ray instance for the module: the smoke and the control run below use it (each
    ``ray_session`` inside joins it instead of starting and stopping its own)."""
    from ebpo.lab.verl_cpu.run import ray_session

    with ray_session(num_cpus=2):
        yield


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, ray_cluster):
    from ebpo.lab.verl_cpu.smoke import run_smoke

    work = tmp_path_factory.mktemp("verl-smoke")
    settings = SmokeSettings(
        work_dir=str(work), estimators=tuple(ESTIMATORS), cache=str(work / "cache"), **SETTINGS
    )
    return run_smoke(settings, report=lambda line: None)


def test_every_smoke_check_passes(smoke):
    failed = [f"{check.name}: {check.detail}" for check in smoke.checks if not check.ok]
    assert not failed, "\n".join(failed)
    names = " | ".join(check.name for check in smoke.checks)
    for what in ("same advantages", "same metrics", "same estimator state", "CurriculumSampler"):
        assert what in names


@pytest.mark.parametrize("name", ["ebpo", "jspo_plus_plus"])
def test_the_loop_trained_on_the_core_estimators_advantages(smoke, name):
    """Reference: the core estimator replayed on the rewards and groups verl's loop produced, step
    after step (so its state carries across steps as the plug-in's must), then broadcast over the
    response tokens. The plug-in inside verl must have handed the actor exactly that."""
    run, _ = smoke.runs[name]
    entry = run.estimator_state["estimators"][0]
    reference = make_estimator(entry["name"], **entry["options"])
    assert [t.step for t in run.trace] == [1, 2, 3, 4]
    nonzero = 0
    for trace in run.trace:
        scores = trace.token_level_rewards.sum(dim=-1)
        valid = trace.response_mask.sum(dim=-1) > 0
        result = reference(scores, np.array(trace.uids, dtype=object), mask=valid)
        expected = result.advantages.to(trace.advantages.dtype).unsqueeze(-1) * trace.response_mask
        torch.testing.assert_close(trace.advantages, expected, rtol=0, atol=1e-6)
        nonzero += int(trace.advantages.abs().max() > 0)
    assert nonzero >= 1  # the comparison saw real signal
    assert reference.state_dict() == entry["state"]


def test_the_resumed_prior_came_from_the_checkpoint(smoke):
    """Run B starts at step 3 in a fresh trainer: its prior holds 3 steps of responses (restored
    at step 2, plus step 3), not 1 — and equals run A's."""
    a, b = smoke.runs["ebpo"]
    per_step = SETTINGS["batch_size"] * SETTINGS["group_size"]
    assert b.metrics[3]["ebpo/prior_count"] == a.metrics[3]["ebpo/prior_count"] == 3 * per_step
    assert b.metrics[4]["ebpo/prior_count"] == 4 * per_step


def test_verl_logged_our_metrics_next_to_its_own(smoke):
    a, _ = smoke.runs["ebpo"]
    assert any(key.startswith("val-core/") for key in a.metrics[0])  # validation before training
    for step in range(1, SETTINGS["steps"] + 1):
        logged = a.metrics[step]
        assert "ebpo/shrinkage_mean" in logged and "actor/pg_loss" in logged, sorted(logged)
        assert logged["training/global_step"] == step
        # One mini-batch per step: the update's log-probs are the old ones (computed through
        # verl's no-padding round trip) before the optimizer moves, so a misaligned token shows here.
        assert abs(logged["actor/ppo_kl"]) < 1e-6 and logged["actor/pg_clipfrac"] == 0.0


def test_topic_order_survives_the_mid_epoch_resume(smoke):
    a, b = smoke.runs["ebpo_topic"]
    prompts_a = [t.prompt_ids for t in a.trace if t.step > SETTINGS["save_step"]]
    prompts_b = [t.prompt_ids for t in b.trace]
    assert prompts_a == prompts_b and prompts_a


def test_without_the_checkpoint_callback_the_resumed_prior_starts_empty(smoke, tmp_path):
    """The control that shows the resume comparison can fail: the same resume with
    ``trainer.checkpoint_callback_class=null`` (verl's default) restores the actor and the
    dataloader but not the EBPO prior, so step 3 differs from the uninterrupted run."""
    from ebpo.lab.verl_cpu.run import ray_session, start_task_runner
    from ebpo.lab.verl_cpu.smoke import fit_once

    a, _ = smoke.runs["ebpo"]
    settings = SmokeSettings(work_dir=str(tmp_path), **SETTINGS)
    checkpoint = next(path for path in a.checkpoints if path.endswith("global_step_2"))
    with ray_session():
        c = fit_once(
            start_task_runner(),
            settings,
            ESTIMATORS["ebpo"],
            smoke.files,
            smoke.model_path,
            tmp_path / "no-callback",
            checkpoint,
            extra=("trainer.checkpoint_callback_class=null",),
        )
    per_step = SETTINGS["batch_size"] * SETTINGS["group_size"]
    assert [t.step for t in c.trace] == [3, 4]
    assert c.trace[0].prompt_ids == a.trace[2].prompt_ids  # same data and samples ...
    assert torch.equal(c.trace[0].token_level_rewards, a.trace[2].token_level_rewards)
    assert c.metrics[3]["ebpo/prior_count"] == per_step  # ... but a prior of one step
    ebpo_c = {k: v for k, v in c.metrics[3].items() if k.startswith("ebpo/")}
    ebpo_a = {k: v for k, v in a.metrics[3].items() if k.startswith("ebpo/")}
    assert ebpo_c != ebpo_a and c.estimator_state != a.estimator_state
