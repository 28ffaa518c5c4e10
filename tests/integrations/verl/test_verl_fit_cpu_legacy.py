"""verl's deprecated ``RayPPOTrainer.fit()`` with ebpo inside, on CPU (``ebpo verl smoke --trainer
legacy``; issue #19): the ``ebpo_topic`` configuration — ebpo's ``CurriculumSampler`` as verl's
train sampler, which only the legacy trainer accepts — uninterrupted and resumed from its step-2
checkpoint in one local Ray session (~1 min on 2 cores). verl's default path:
test_verl_fit_cpu.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tests.integrations.verl.conftest import assert_smoke_passed

from ebpo.estimators import make_estimator
from ebpo.lab.verl_cpu.settings import SmokeSettings

pytestmark = [pytest.mark.verl, pytest.mark.slow]

SETTINGS = {"steps": 4, "save_step": 2, "batch_size": 4, "group_size": 4}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, warm_start_cache):
    from ebpo.lab.verl_cpu.smoke import run_smoke

    work = tmp_path_factory.mktemp("verl-legacy")
    settings = SmokeSettings(
        work_dir=str(work),
        estimators=("ebpo_topic",),
        trainer="legacy",
        cache=str(warm_start_cache),
        **SETTINGS,
    )
    return run_smoke(settings, report=lambda line: None)


def test_every_legacy_smoke_check_passes(smoke):
    assert_smoke_passed(
        smoke,
        "entry point",
        "same advantages",
        "same metrics",
        "CurriculumSampler",
        "verl dumped its rollouts",
    )


def test_the_legacy_loop_trained_on_the_core_estimators_advantages(smoke):
    run, _ = smoke.runs["ebpo_topic"]
    entry = run.estimator_state["estimators"][0]
    reference = make_estimator(entry["name"], **entry["options"])
    for trace in run.trace:
        valid = trace.response_mask.sum(dim=-1) > 0
        result = reference(trace.rewards, np.array(trace.uids, dtype=object), mask=valid)
        expected = result.advantages.to(trace.advantages.dtype).unsqueeze(-1) * trace.response_mask
        torch.testing.assert_close(trace.advantages, expected, rtol=0, atol=1e-6)
    assert any(bool(t.advantages.abs().max() > 0) for t in run.trace)


def test_ebpo_replay_of_the_legacy_runs_rollout_dump_gives_what_verl_trained_with(smoke, tmp_path):
    """Issue #31, legacy trainer: its dump has no uid, so ``ebpo replay`` groups by prompt text;
    the groups, their rewards and the advantages of ``ebpo_batch`` (the ``ebpo_topic``
    configuration's estimator: batch prior, mean of group means) are those the actor was updated
    with, step by step."""
    from tests.integrations.verl.conftest import replay_the_runs_dump

    run, resumed = smoke.runs["ebpo_topic"]
    assert sorted(p.name for p in resumed.rollout_dir.iterdir()) == ["3.jsonl", "4.jsonl"]
    report = replay_the_runs_dump(run, "ebpo_batch", tmp_path, by_uid=False)
    assert report["inputs"]["key_columns"] == ["input"]
