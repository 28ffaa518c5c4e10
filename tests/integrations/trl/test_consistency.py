"""The cross-rank check of the estimator state: the digest tells apart states that differ in one
bit, and the check names the ranks that disagree and the step."""

from __future__ import annotations

import math
import types

import pytest
import torch

pytest.importorskip("trl")  # the package ebpo.integrations.trl imports trl

import ebpo  # noqa: E402
from ebpo.integrations.trl.consistency import (  # noqa: E402
    RanksDisagreeError,
    check_ranks_agree,
    gather_digests,
    state_digest,
)

pytestmark = pytest.mark.trl


def trained_state() -> dict:
    estimator = ebpo.make_estimator("ebpo")
    generator = torch.Generator().manual_seed(0)
    for _ in range(3):
        estimator(torch.randint(0, 2, (16,), generator=generator).float(), torch.arange(16) // 4)
    return estimator.state_dict()


def test_equal_states_have_equal_digests_whatever_the_key_order():
    state = trained_state()
    reordered = dict(reversed(list(state.items())))
    assert state_digest(state) == state_digest(reordered) == state_digest(trained_state())
    assert -(2**63) <= state_digest(state) < 2**63  # fits the int64 that is all-gathered


def test_one_bit_of_one_statistic_changes_the_digest():
    state = trained_state()
    nudged = {**state, "global": {**state["global"]}}
    rewards = dict(nudged["global"]["rewards"])
    rewards["mean"] = math.nextafter(rewards["mean"], math.inf)
    nudged["global"]["rewards"] = rewards
    assert state_digest(nudged) != state_digest(state)
    assert state_digest({**state, "steps": state["steps"] + 1}) != state_digest(state)


def test_agreeing_ranks_pass():
    check_ranks_agree([7, 7, 7, 7], global_step=3, micro_step=6)
    check_ranks_agree([-5], global_step=0, micro_step=0)


def test_disagreeing_ranks_are_named_with_the_step():
    with pytest.raises(RanksDisagreeError) as caught:
        check_ranks_agree([7, -1, 7, 9], global_step=3, micro_step=6)
    message = str(caught.value)
    assert "differs across the 4 processes" in message
    assert "global step 3 (micro-step 6)" in message
    assert f"ranks 0, 2: {7:016x}" in message
    assert "rank 1: ffffffffffffffff" in message and f"rank 3: {9:016x}" in message


def test_gather_digests_reads_every_process_in_rank_order():
    # a stand-in for accelerate's Accelerator on 3 processes: gather concatenates in rank order
    others = {0: 11, 2: -3}

    def gather(tensor):
        assert tensor.dtype == torch.int64 and tensor.shape == (1,)
        return torch.cat([torch.tensor([others[0]]), tensor, torch.tensor([others[2]])])

    accelerator = types.SimpleNamespace(device=torch.device("cpu"), gather=gather)
    assert gather_digests(accelerator, 2**62) == [11, 2**62, -3]
