"""ebpo's metrics in a verl step of sub-steps (issue 36, item 3): verl's own ``PPOTrainer.step``
calls the estimator ``parameter_sync_step`` times and folds the calls' metrics with its own
``MetricsAggregator``; the logged counts must still be the step's. The real loop with sub-steps:
test_verl_fit_cpu.py (``parameter_sync_step=2``)."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from ebpo.estimators import make_estimator
from ebpo.integrations.verl.sub_steps import (
    BATCH_COUNTS,
    RUNNING_COUNTS,
    SubStepMetrics,
    sub_step_position,
)

pytestmark = pytest.mark.verl

SUB_STEPS = 4


def test_fold_sums_batch_counts_keeps_the_last_running_count_and_passes_the_rest():
    fold = SubStepMetrics()
    calls = [
        {"num_responses": 7.0, "num_groups": 2.0, "prior_count": 7.0, "reward_mean": 0.5},
        {"num_responses": 8.0, "num_groups": 2.0, "prior_count": 15.0, "reward_mean": 0.25},
    ]
    assert fold.fold("ebpo", calls[0], 0, 2) == {"reward_mean": 0.5}
    assert fold.fold("ebpo", calls[1], 1, 2) == {
        "num_responses": 15.0,
        "num_groups": 4.0,
        "prior_count": 15.0,
        "reward_mean": 0.25,
    }
    # a new step starts afresh, also after a step that never reached its last sub-step
    fold.fold("ebpo", calls[0], 0, 2)
    fold.fold("ebpo", calls[0], 0, 2)
    assert fold.fold("ebpo", calls[1], 1, 2)["num_responses"] == 15.0
    # estimators are summed apart; without sub-steps nothing changes
    assert fold.fold("jspo", calls[0], 0, 1) == calls[0]
    assert BATCH_COUNTS.isdisjoint(RUNNING_COUNTS)


def test_sub_step_position_reads_verls_trainer_attributes():
    trainer = types.SimpleNamespace(parameter_sync_step=4, local_trigger_step=3)
    assert sub_step_position(trainer) == (3, 4)
    assert sub_step_position(types.SimpleNamespace()) == (0, 1)  # legacy trainer
    with pytest.raises(ValueError, match="sub-step 4 of parameter_sync_step=4"):
        sub_step_position(types.SimpleNamespace(parameter_sync_step=4, local_trigger_step=4))


def _sub_batches(seed: int) -> list[tuple[torch.Tensor, np.ndarray]]:
    """Four sub-batches of uneven groups (sizes 2-4) with 0/1 rewards, uids fresh per prompt."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(SUB_STEPS):
        sizes = rng.integers(2, 5, size=3)
        uids = np.array([f"s{k}p{g}" for g, n in enumerate(sizes) for _ in range(n)], dtype=object)
        out.append((torch.tensor(rng.integers(0, 2, size=len(uids)), dtype=torch.float32), uids))
    return out


def _trainer_step(batches, tmp_path):
    """verl's ``PPOTrainerSync.step`` (its own code, sub-step loop and ``MetricsAggregator``) on a
    trainer whose ``_step_once`` computes advantages with verl's registered ``ebpo`` function and
    returns the sub-batch's rows."""
    from transfer_queue import KVBatchMeta
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.v1 import PPOTrainerSync

    trainer = object.__new__(PPOTrainerSync)
    trainer.config = OmegaConf.create(
        {
            "data": {"train_batch_size": 4 * SUB_STEPS},
            "algorithm": {"adv_estimator": "ebpo", "use_kl_in_reward": False},
            "trainer": {
                "default_local_dir": str(tmp_path),
                "resume_mode": "disable",
                "v1": {"trainer_mode": "sync", "sync": {"parameter_sync_step": SUB_STEPS}},
            },
        }
    )
    trainer.parameter_sync_step, trainer.global_steps = SUB_STEPS, 1
    trainer.prepare_step = lambda: {}
    advantage = core_algos.get_adv_estimator_fn("ebpo")

    def _step_once(self, metrics, timing_raw, sample_batch_size):
        rewards, uids = batches[self.local_trigger_step]
        scores = torch.zeros(len(uids), 3)
        scores[:, -1] = rewards
        advantage(
            token_level_rewards=scores,
            response_mask=torch.ones(len(uids), 3),
            index=uids,
            config=self.config.algorithm,
        )
        tags = [{} for _ in uids]
        keys = [f"{u}_{i}_0" for i, u in enumerate(uids)]
        return KVBatchMeta(partition_id="train", keys=keys, tags=tags)

    trainer._step_once = types.MethodType(_step_once, trainer)
    metrics: dict = {}
    PPOTrainerSync.step(trainer, metrics, {})
    return metrics


def test_verls_step_logs_the_steps_counts_through_its_own_aggregator(tmp_path):
    """Reference: the core estimator called on the four sub-batches in turn. verl's step logs
    ``ebpo/num_responses`` and ``ebpo/num_groups`` of the whole step, ``ebpo/prior_count`` after
    its last call, ``*_max``/``*_min`` the step's extremes and the rest as verl's row-weighted
    mean of the calls; verl's aggregator alone (the calls' metrics handed over as they are)
    would have logged the mean count of a call."""
    from verl.trainer.ppo.v1.utils import MetricsAggregator

    batches = _sub_batches(seed=3)
    logged = _trainer_step(batches, tmp_path)
    reference = make_estimator("ebpo")
    calls = [reference(rewards, uids).metrics for rewards, uids in batches]
    rows = [len(uids) for _, uids in batches]
    assert logged["ebpo/num_responses"] == sum(rows)
    assert logged["ebpo/num_groups"] == sum(c["num_groups"] for c in calls) == 3 * SUB_STEPS
    assert logged["ebpo/prior_count"] == calls[-1]["prior_count"] == sum(rows)
    assert logged["ebpo/shrinkage_max"] == max(c["shrinkage_max"] for c in calls)
    assert logged["ebpo/shrinkage_min"] == min(c["shrinkage_min"] for c in calls)
    weighted = sum(c["reward_mean"] * n for c, n in zip(calls, rows, strict=True)) / sum(rows)
    assert logged["ebpo/reward_mean"] == pytest.approx(weighted, rel=1e-12)
    # what the aggregator makes of counts left to its name rule
    plain = MetricsAggregator()
    for call, n in zip(calls, rows, strict=True):
        plain.add_step_metrics({f"ebpo/{k}": v for k, v in call.items()}, sample_count=n)
    averaged = plain.get_aggregated_metrics()
    assert averaged["ebpo/num_responses"] != sum(rows)
    assert averaged["ebpo/prior_count"] != sum(rows)
