"""ebpo.lab.simulation.bandit: the contextual bandit is reproducible by seed, learns, and shows the
priors' behaviour (zero-signal groups, Proposition 3.8)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ebpo.lab import simulation as sim
from tests.lab.simulation.helpers import SHARED, SMALL


def test_bandit_is_reproducible_by_seed_and_learns():
    bandit = sim.make_bandit(SHARED, 3)
    a = sim.run_bandit(bandit, "ebpo", group_size=4, lr=30.0, steps=15, seed=3)
    b = sim.run_bandit(sim.make_bandit(SHARED, 3), "ebpo", group_size=4, lr=30.0, steps=15, seed=3)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    c = sim.run_bandit(bandit, "ebpo", group_size=4, lr=30.0, steps=15, seed=4)
    assert not np.array_equal(a["reward"], c["reward"])
    assert a["train_acc"][-1] > a["train_acc"][0] + 0.1
    assert a["heldout_acc"][-1] > a["heldout_acc"][0] + 0.05  # shared parameters transfer


def test_bandit_zero_signal_grpo_vs_ebpo():
    bandit = sim.make_bandit(SMALL, 0)
    grpo = sim.run_bandit(bandit, "grpo", group_size=4, lr=100.0, steps=10, seed=0)
    ebpo = sim.run_bandit(bandit, "ebpo", group_size=4, lr=100.0, steps=10, seed=0)
    assert np.isnan(grpo["heldout_acc"]).all()  # nothing transfers without shared parameters
    assert ebpo["train_acc"][-1] > ebpo["train_acc"][0] + 0.1
    assert grpo["zero_signal"].mean() > 0.2
    assert ebpo["zero_signal"].max() == 0.0
    assert np.isnan(grpo["prior_error"]).all() and np.isfinite(ebpo["prior_error"]).all()


def test_topic_order_lowers_prior_error_proposition_3_8():
    """A prior that follows the stream (batch prior) tracks the topic mean under topic order."""
    shuffled, topic = [], []
    for seed in (0, 1):
        bandit = sim.make_bandit(SMALL, seed)
        for order, out in (("shuffled", shuffled), ("topic", topic)):
            run = sim.run_bandit(
                bandit, "ebpo_batch", group_size=4, lr=100.0, steps=20, order=order, seed=seed
            )
            out.append(np.nanmean(run["prior_error"]))
    assert np.mean(topic) < 0.8 * np.mean(shuffled)


def test_per_cluster_prior_lowers_prior_error_without_reordering():
    errors = {}
    for spec in ("ebpo", "ebpo:per_cluster=true"):
        errors[spec] = np.mean(
            [
                np.nanmean(
                    sim.run_bandit(
                        sim.make_bandit(SMALL, s), spec, group_size=4, lr=100.0, steps=20, seed=s
                    )["prior_error"]
                )
                for s in (0, 1)
            ]
        )
    assert errors["ebpo:per_cluster=true"] < 0.8 * errors["ebpo"]


def test_data_stream_orders():
    bandit = sim.make_bandit(SMALL, 0)
    gen = torch.Generator().manual_seed(0)
    stream = sim.data_stream(bandit, 12, "topic", gen)
    per_epoch = SMALL.num_prompts // SMALL.prompts_per_step
    assert sorted(stream[:per_epoch].flatten().tolist()) == list(
        range(SMALL.num_prompts)
    )  # one epoch
    topics = bandit.topic[stream[:per_epoch].flatten()]
    assert int((topics[1:] != topics[:-1]).sum()) == SMALL.num_topics - 1  # contiguous topic blocks
    shuffled = bandit.topic[sim.data_stream(bandit, 6, "shuffled", gen).flatten()]
    assert int((shuffled[1:] != shuffled[:-1]).sum()) > 3 * SMALL.num_topics


def test_ebpo_bb_reports_its_prior_error_and_jspo_has_none():
    bandit = sim.make_bandit(SMALL, 0)
    bb = sim.run_bandit(bandit, "ebpo_bb", group_size=4, lr=100.0, steps=5, seed=0)
    jspo = sim.run_bandit(bandit, "jspo", group_size=4, lr=100.0, steps=5, seed=0)
    assert np.isfinite(bb["prior_error"]).all() and np.isfinite(bb["shrinkage"]).all()
    assert np.isnan(jspo["prior_error"]).all() and np.isnan(jspo["shrinkage"]).all()


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: sim.BanditConfig(num_prompts=100, prompts_per_step=32), "num_prompts"),
        (lambda: sim.BanditConfig(num_correct=16, num_answers=16), "num_correct"),
        (lambda: sim.BanditConfig(num_topics=0), "num_topics must be a positive integer"),
        (lambda: sim.BanditConfig(false_positive_rate=1.0), "false_positive_rate"),
        (
            lambda: sim.run_bandit(
                sim.make_bandit(SMALL, 0), "grpo", group_size=4, lr=-1.0, steps=2
            ),
            "lr",
        ),
        (
            lambda: sim.run_bandit(
                sim.make_bandit(SMALL, 0),
                "grpo",
                group_size=4,
                lr=1.0,
                steps=2,
                order="alphabetical",
            ),
            "order must be one of",
        ),
        (
            lambda: sim.run_bandit(
                sim.make_bandit(SMALL, 0), "grpo", group_size=1, lr=1.0, steps=2
            ),
            "group_size",
        ),
    ],
)
def test_bandit_rejects_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
