"""The field's comparators in the simulations: GRPO-BN, SPO and KRPO run in every study (SPO with
the bandit's prompt ids as keys, so its tracker follows each prompt across steps); OPO, which needs
token counts a simulated answer lacks, is refused up front."""

from __future__ import annotations

import math

import pytest
import torch

import ebpo
from ebpo.lab import simulation as sim
from ebpo.lab.simulation.common import seeded_generator
from ebpo.lab.simulation.specs import build_estimator, fresh_prompts
from tests.lab.simulation.helpers import SHARED

COMPARATORS = ["grpo_bn", "spo", "krpo"]


@pytest.mark.parametrize("name", COMPARATORS)
def test_the_bandit_trains_with_each_comparator(name):
    run = sim.run_bandit(sim.make_bandit(SHARED, 0), name, group_size=4, lr=30.0, steps=6, seed=0)
    assert all(math.isfinite(a) for a in run["train_acc"])


def test_spo_in_the_bandit_tracks_the_prompts_it_draws(monkeypatch):
    seen = []
    original = ebpo.estimators.SPO.__call__

    def spy(self, rewards, group_ids, **kwargs):
        seen.append(kwargs["prompt_keys"])
        return original(self, rewards, group_ids, **kwargs)

    monkeypatch.setattr(ebpo.estimators.SPO, "__call__", spy)
    bandit = sim.make_bandit(SHARED, 0)
    sim.run_bandit(bandit, "spo", group_size=4, lr=30.0, steps=4, seed=0)
    stream = sim.data_stream(bandit, 4, "shuffled", seeded_generator(0, 4, 0))
    for keys, drawn in zip(seen, stream, strict=True):
        assert torch.equal(keys, drawn.repeat_interleave(4))


def test_the_baseline_and_saturation_studies_take_the_comparators():
    rows = sim.baseline_quality(
        group_sizes=(4,), estimators=COMPARATORS, steps=3, prompts_per_step=16
    )
    assert {row["estimator"] for row in rows} >= set(COMPARATORS)
    rows = sim.saturation(estimators=COMPARATORS, steps=3, prompts_per_step=16)
    assert {row["estimator"] for row in rows} >= set(COMPARATORS)


def test_fresh_prompts_differ_every_step_and_only_spo_gets_them():
    ids = torch.arange(3).repeat_interleave(2)
    spo = build_estimator("spo")
    assert fresh_prompts(spo, ids, 0).tolist() == [0, 0, 1, 1, 2, 2]
    assert fresh_prompts(spo, ids, 2).tolist() == [6, 6, 7, 7, 8, 8]
    assert fresh_prompts(build_estimator("grpo"), ids, 1) is None


def test_opo_is_refused_for_lack_of_lengths():
    with pytest.raises(ValueError, match="'opo' needs the number of tokens of each response"):
        build_estimator("opo")
