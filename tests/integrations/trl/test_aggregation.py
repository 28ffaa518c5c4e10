"""Reward aggregation for EBPOTrainer against slow, obviously-correct references written from TRL 1.16's
documented behaviour (per-function group normalisation of GDPO, NaN = reward function returned None)."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

pytest.importorskip("trl")

from trl.trainer.utils import nanstd  # noqa: E402

from ebpo.integrations.trl.aggregation import (  # noqa: E402
    combine_rewards,
    group_nanstd,
    lone_response_rows,
    unscorable_rows,
    zero_variance_groups,
)

pytestmark = pytest.mark.trl


def random_rewards(seed: int, num_groups: int, group_size: int, num_funcs: int) -> torch.Tensor:
    """Binary / continuous / constant columns, with None (NaN) sprinkled unevenly, whole rows included."""
    generator = torch.Generator().manual_seed(seed)
    n = num_groups * group_size
    columns = []
    for k in range(num_funcs):
        kind = k % 3
        if kind == 0:
            column = torch.randint(0, 2, (n,), generator=generator).float()
        elif kind == 1:
            column = torch.randn(n, generator=generator)
        else:
            column = torch.full((n,), 0.5)
        columns.append(column)
    rewards = torch.stack(columns, dim=1)
    holes = torch.rand(n, num_funcs, generator=generator) < 0.25
    rewards[holes] = torch.nan
    rewards[torch.rand(n, generator=generator) < 0.1] = torch.nan  # whole rows: unscorable
    return rewards


def reference_normalize_then_sum(
    rewards: torch.Tensor, weights: list[float], group_size: int
) -> list[float]:
    """Per group and per reward function: (r − mean) / (unbiased std + 1e-4) over the scored values;
    a function with fewer than two scored values in the group contributes nothing; weighted sum over
    the functions that scored the row; NaN when none did."""
    rows = rewards.tolist()
    out = []
    for start in range(0, len(rows), group_size):
        group = rows[start : start + group_size]
        for row in group:
            if all(math.isnan(v) for v in row):
                out.append(math.nan)
                continue
            total = 0.0
            for k, value in enumerate(row):
                scored = [r[k] for r in group if not math.isnan(r[k])]
                if math.isnan(value) or len(scored) < 2:
                    continue
                total += (
                    weights[k]
                    * (value - statistics.fmean(scored))
                    / (statistics.stdev(scored) + 1e-4)
                )
            out.append(total)
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("group_size", "num_funcs"), [(2, 1), (4, 3), (5, 2)])
def test_normalize_then_sum_matches_the_per_group_reference(seed, group_size, num_funcs):
    rewards = random_rewards(seed, num_groups=7, group_size=group_size, num_funcs=num_funcs)
    weights = [1.0, -0.5, 2.0][:num_funcs]
    ours = combine_rewards(
        rewards, torch.tensor(weights), aggregation="normalize_then_sum", num_generations=group_size
    )
    expected = torch.tensor(
        reference_normalize_then_sum(rewards, weights, group_size), dtype=torch.float32
    )
    torch.testing.assert_close(ours, expected, equal_nan=True, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("group_size", "num_funcs"), [(2, 1), (4, 3), (5, 2)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_group_nanstd_is_trls_nanstd_to_the_last_bit(seed, group_size, num_funcs, dtype):
    """The module keeps TRL out of its imports with its own copy of TRL's nanstd: same bits."""
    rewards = random_rewards(seed, num_groups=7, group_size=group_size, num_funcs=num_funcs)
    grouped = rewards.to(dtype).view(-1, group_size, num_funcs)
    ours, trls = group_nanstd(grouped), nanstd(grouped, dim=1, keepdim=True)
    assert ours.dtype == trls.dtype and ours.shape == trls.shape == (7, 1, num_funcs)
    assert torch.equal(ours.isnan(), trls.isnan())
    assert torch.equal(ours.nan_to_num(-1.0), trls.nan_to_num(-1.0))


@pytest.mark.parametrize("seed", range(4))
def test_sum_then_normalize_is_the_weighted_sum_of_what_was_scored(seed):
    rewards = random_rewards(seed, num_groups=6, group_size=4, num_funcs=3)
    weights = [1.0, -0.5, 2.0]
    ours = combine_rewards(rewards, torch.tensor(weights))
    expected = [
        math.nan
        if all(math.isnan(v) for v in row)
        else sum(w * v for w, v in zip(weights, row, strict=True) if not math.isnan(v))
        for row in rewards.tolist()
    ]
    torch.testing.assert_close(ours, torch.tensor(expected), equal_nan=True)


def test_combine_rewards_rejects_unknown_aggregation_and_missing_group_size():
    rewards = torch.ones(4, 1)
    with pytest.raises(ValueError, match="multi_objective_aggregation must be one of"):
        combine_rewards(rewards, torch.ones(1), aggregation="mean")
    with pytest.raises(ValueError, match="num_generations"):
        combine_rewards(rewards, torch.ones(1), aggregation="normalize_then_sum")


def test_unscorable_rows_look_at_the_given_columns_only():
    nan = float("nan")
    # column 1 plays the overlong punishment: always a number
    rewards = torch.tensor([[nan, -0.5], [1.0, -0.5], [nan, 0.0], [0.0, nan]])
    assert unscorable_rows(rewards).tolist() == [False, False, False, False]
    assert unscorable_rows(rewards, slice(0, 1)).tolist() == [True, False, True, False]


def test_lone_response_rows():
    nan = float("nan")
    rewards = torch.tensor(
        [1.0, nan, nan, nan, 0.0, 1.0, nan, nan, nan, nan, nan, nan, nan, 0.5, nan, 2.0]
    )
    assert lone_response_rows(rewards, 4).tolist() == [
        True,
        False,
        False,
        False,  # one scored: lone
        False,
        False,
        False,
        False,  # two scored
        False,
        False,
        False,
        False,  # none scored
        False,
        False,
        False,
        False,  # two scored
    ]


def test_zero_variance_groups_handles_nan():
    nan = float("nan")
    rewards = torch.tensor(
        [1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, nan, 1.0, nan, nan, 0.0, nan, 1.0, 1.0]
    )
    assert zero_variance_groups(rewards, 4).tolist() == [True, False, True, False]
