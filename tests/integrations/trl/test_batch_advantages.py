"""batch_advantages, the trainer's arithmetic without a trainer: tables of small generation batches
with advantages worked out by hand, each lone-row policy against its definition on the estimator,
DAPO's filter, and which policy every estimator gets."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")

import ebpo  # noqa: E402
from ebpo.integrations.trl import batch_advantages as module  # noqa: E402
from ebpo.integrations.trl.aggregation import lone_response_rows  # noqa: E402
from ebpo.integrations.trl.batch_advantages import (  # noqa: E402
    LoneRowPolicy,
    batch_advantages,
)
from ebpo.integrations.trl.estimator_settings import (  # noqa: E402
    lone_row_policy,
    trl_estimator_kwargs,
)
from ebpo.integrations.trl.trainer import has_lone_response_baseline  # noqa: E402

pytestmark = pytest.mark.trl

NAN = math.nan
TRL_EPS = 1e-4
#: TRL's GRPO with scale_rewards="batch": the lone row of group 0 counts in the batch std
BATCH_STD_WITH_LONE = math.sqrt(0.3)  # rewards 1, 1, 0, 0, 1: mean 0.6, unbiased variance 0.3
BATCH_STD_WITHOUT = math.sqrt(1 / 3)  # rewards 1, 0, 0, 1
GDPO_ONE = 2 / (math.sqrt(2) + TRL_EPS)  # weight 2 × (3 − 2) / (std of {3, 1} + 1e-4)

# id, reward matrix, weights, G, estimator and options, aggregation, policy, advantages, GRPO's
# zero-signal fraction
CASES = [
    (
        "dr_grpo: weighted sum of two functions, minus the group mean",
        [[1, 0], [0, 0], [2, 2], [0, 2]], [1.0, 0.5], 2, ("dr_grpo", {}),
        "sum_then_normalize", LoneRowPolicy.TRL_GRPO_OWN, [0.5, -0.5, 1.0, -1.0], 0.0,
    ),
    (
        "rloo: the lone row is left out (0), the unscored row too",
        [[1], [NAN], [1], [0]], [1.0], 2, ("rloo", {}),
        "sum_then_normalize", LoneRowPolicy.LEAVE_OUT, [0.0, 0.0, 1.0, -1.0], 0.0,
    ),
    (
        "rloo: a lone row kept has the singleton baseline 0",
        [[1], [NAN], [1], [0]], [1.0], 2, ("rloo", {}),
        "sum_then_normalize", LoneRowPolicy.PRIOR, [1.0, 0.0, 1.0, -1.0], 0.0,
    ),
    (
        "dr_grpo: the lone row is scored, then set to 0 as GRPOTrainer does",
        [[1], [NAN], [1], [0]], [1.0], 2, ("dr_grpo", {}),
        "sum_then_normalize", LoneRowPolicy.TRL_GRPO, [0.0, 0.0, 0.5, -0.5], 0.0,
    ),
    (
        "grpo, batch scale: the lone row counts in the batch's std",
        [[1], [NAN], [1], [0], [0], [1]], [1.0], 2, ("grpo", {"scale": "batch"}),
        "sum_then_normalize", LoneRowPolicy.TRL_GRPO,
        [0.0, 0.0, 0.5 / (BATCH_STD_WITH_LONE + TRL_EPS), -0.5 / (BATCH_STD_WITH_LONE + TRL_EPS),
         -0.5 / (BATCH_STD_WITH_LONE + TRL_EPS), 0.5 / (BATCH_STD_WITH_LONE + TRL_EPS)], 0.0,
    ),
    (
        "grpo, batch scale: left out, the lone row is not in the std",
        [[1], [NAN], [1], [0], [0], [1]], [1.0], 2, ("grpo", {"scale": "batch"}),
        "sum_then_normalize", LoneRowPolicy.LEAVE_OUT,
        [0.0, 0.0, 0.5 / (BATCH_STD_WITHOUT + TRL_EPS), -0.5 / (BATCH_STD_WITHOUT + TRL_EPS),
         -0.5 / (BATCH_STD_WITHOUT + TRL_EPS), 0.5 / (BATCH_STD_WITHOUT + TRL_EPS)], 0.0,
    ),
    (
        "grpo, group scale: a constant group gets 0 and counts as no signal",
        [[1], [0], [1], [1]], [1.0], 2, ("grpo", {}),
        "sum_then_normalize", LoneRowPolicy.TRL_GRPO_OWN,
        [0.5 / (math.sqrt(0.5) + TRL_EPS), -0.5 / (math.sqrt(0.5) + TRL_EPS), 0.0, 0.0], 0.5,
    ),
    (
        "dr_grpo after GDPO's per-function group normalisation",
        [[3], [1], [5], [5]], [2.0], 2, ("dr_grpo", {}),
        "normalize_then_sum", LoneRowPolicy.TRL_GRPO, [GDPO_ONE, -GDPO_ONE, 0.0, 0.0], 0.5,
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("matrix", "weights", "G", "spec", "aggregation", "policy", "expected", "grpo_zero"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_advantages_by_hand(matrix, weights, G, spec, aggregation, policy, expected, grpo_zero):
    name, options = spec
    estimator = ebpo.make_estimator(name, nan_policy="mask", eps=TRL_EPS, **options)
    batch = batch_advantages(
        torch.tensor(matrix, dtype=torch.float32),
        torch.tensor(weights),
        G,
        estimator,
        policy,
        aggregation=aggregation,
    )
    torch.testing.assert_close(batch.advantages.double(), torch.tensor(expected).double())
    assert batch.metrics["grpo_zero_signal_group_frac"] == grpo_zero
    assert batch.metrics["grpo_zero_signal_group_frac"] == batch.metrics["zero_variance_group_frac"]
    assert list(batch.metrics)[-1] == "grpo_zero_signal_group_frac"  # logged after the estimator's
    assert batch.keeps_trls_advantages == (policy is LoneRowPolicy.TRL_GRPO_OWN)
    assert batch.dropped_groups is None and batch.dropped_rows is None
    lone = lone_response_rows(batch.rewards, G)
    if lone.any():
        assert batch.estimator_rewards[lone].isnan().all() == (policy is LoneRowPolicy.LEAVE_OUT)


def patchy_rewards(seed: int, num_groups: int = 6, G: int = 4) -> torch.Tensor:
    """0/1 rewards with unscored rows, whole unscored groups and lone rows."""
    generator = torch.Generator().manual_seed(seed)
    rewards = torch.randint(0, 2, (num_groups * G, 1), generator=generator).float()
    rewards[torch.rand(num_groups * G, generator=generator) < 0.3] = torch.nan
    rewards[G : 2 * G] = torch.nan  # group 1: unscored
    rewards[2 * G] = 1.0  # group 2: one lone row
    rewards[2 * G + 1 : 3 * G] = torch.nan
    return rewards


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(
    ("name", "policy"),
    [
        ("ebpo", LoneRowPolicy.PRIOR),
        ("ebpo_bb", LoneRowPolicy.PRIOR),
        ("rloo", LoneRowPolicy.LEAVE_OUT),
        ("jspo", LoneRowPolicy.LEAVE_OUT),
        ("grpo", LoneRowPolicy.TRL_GRPO),
        ("grpo", LoneRowPolicy.TRL_GRPO_OWN),
        ("dr_grpo", LoneRowPolicy.TRL_GRPO),
    ],
)
def test_each_policy_is_its_definition_on_the_estimator(name, policy, seed):
    """PRIOR: the estimator on every scored row; LEAVE_OUT: on the rows without the lone ones;
    TRL_GRPO*: on every scored row, then 0 for the lone ones. Unscored rows: always 0."""
    G = 4
    rewards = patchy_rewards(seed, G=G)
    flat = rewards.view(-1)
    lone = lone_response_rows(flat, G)
    assert lone.any()
    kwargs = trl_estimator_kwargs(name, {}, None)
    ours, reference = ebpo.make_estimator(name, **kwargs), ebpo.make_estimator(name, **kwargs)
    for _ in range(2):  # twice: the second call sees the state the first left
        batch = batch_advantages(rewards, torch.ones(1), G, ours, policy)
        seen = flat.masked_fill(lone, torch.nan) if policy is LoneRowPolicy.LEAVE_OUT else flat
        expected = reference(seen, torch.arange(flat.numel()) // G)
        advantages = expected.advantages
        if policy.follows_trl_grpo:
            advantages = advantages.masked_fill(lone, 0.0)
        assert torch.equal(batch.advantages, advantages)
        assert (batch.advantages[flat.isnan()] == 0).all()
        assert ((batch.advantages[lone] != 0).all()) == (policy is LoneRowPolicy.PRIOR)
        assert {k: v for k, v in batch.metrics.items() if k in expected.metrics} == expected.metrics
        assert ours.state_dict() == reference.state_dict()


def test_update_false_leaves_the_estimators_state_alone():
    estimator = ebpo.make_estimator("ebpo", nan_policy="mask")
    rewards = patchy_rewards(0)
    batch_advantages(rewards, torch.ones(1), 4, estimator, LoneRowPolicy.PRIOR)
    before = estimator.state_dict()
    batch_advantages(rewards, torch.ones(1), 4, estimator, LoneRowPolicy.PRIOR, update=False)
    assert estimator.state_dict() == before
    batch_advantages(rewards, torch.ones(1), 4, estimator, LoneRowPolicy.PRIOR)
    assert estimator.state_dict() != before


# The user's reward and the overlong punishment (column 1): group 0 agrees on the accuracy only.
FILTER_MATRIX = [[1, 0], [1, -0.5], [0, 0], [1, 0], [1, 0], [1, 0]]
FILTER_CASES = [
    ("accuracy: the user's functions only", "accuracy", [True, False, True]),
    ("reward: overlong punishment included", "reward", [False, False, True]),
]


@pytest.mark.parametrize(
    ("metric", "dropped"), [c[1:] for c in FILTER_CASES], ids=[c[0] for c in FILTER_CASES]
)
def test_dapo_filter_drops_groups_whose_compared_rewards_agree(metric, dropped):
    estimator = ebpo.make_estimator("ebpo", nan_policy="mask")
    batch = batch_advantages(
        torch.tensor(FILTER_MATRIX),
        torch.ones(2),
        2,
        estimator,
        LoneRowPolicy.PRIOR,
        filter_metric=metric,
        user_columns=slice(0, 1),
    )
    assert batch.dropped_groups.tolist() == dropped
    assert batch.dropped_rows.tolist() == [d for d in dropped for _ in range(2)]
    assert batch.metrics["filtered_group_frac"] == pytest.approx(sum(dropped) / 3)
    assert list(batch.metrics)[-2:] == ["grpo_zero_signal_group_frac", "filtered_group_frac"]
    # the filter only masks the loss: the estimator saw every group
    assert batch.rewards.tolist() == [1.0, 0.5, 0.0, 1.0, 1.0, 1.0]


def test_an_unknown_filter_metric_is_refused_before_the_estimator_runs():
    estimator = ebpo.make_estimator("ebpo", nan_policy="mask")
    before = estimator.state_dict()
    with pytest.raises(ValueError, match="filter_metric must be None or one of"):
        batch_advantages(
            torch.ones(4, 1), torch.ones(1), 2, estimator, LoneRowPolicy.PRIOR, filter_metric="acc"
        )
    assert estimator.state_dict() == before


POLICY_CASES = [
    ("grpo", {}, "sum_then_normalize", LoneRowPolicy.TRL_GRPO_OWN),
    ("dr_grpo", {}, "sum_then_normalize", LoneRowPolicy.TRL_GRPO_OWN),
    ("grpo", {"scale": "batch"}, "sum_then_normalize", LoneRowPolicy.TRL_GRPO_OWN),
    ("grpo", {"eps": 1e-6}, "sum_then_normalize", LoneRowPolicy.TRL_GRPO),  # not TRL's eps
    ("grpo", {}, "normalize_then_sum", LoneRowPolicy.TRL_GRPO_OWN),  # batch scale, as TRL
    ("dr_grpo", {}, "normalize_then_sum", LoneRowPolicy.TRL_GRPO),  # TRL divides, dr_grpo not
    ("ebpo", {}, "sum_then_normalize", LoneRowPolicy.PRIOR),
    ("ebpo", {"prior": "batch"}, "sum_then_normalize", LoneRowPolicy.PRIOR),
    ("ebpo_bb", {}, "sum_then_normalize", LoneRowPolicy.PRIOR),
    ("rloo", {}, "sum_then_normalize", LoneRowPolicy.LEAVE_OUT),
    ("jspo", {}, "sum_then_normalize", LoneRowPolicy.LEAVE_OUT),
    ("jspo_plus_plus", {}, "sum_then_normalize", LoneRowPolicy.LEAVE_OUT),
    ("reinforce_pp_baseline", {}, "sum_then_normalize", LoneRowPolicy.LEAVE_OUT),
]


@pytest.mark.parametrize(("name", "options", "aggregation", "policy"), POLICY_CASES)
def test_lone_row_policy_of_each_estimator(name, options, aggregation, policy):
    estimator = ebpo.make_estimator(name, **trl_estimator_kwargs(name, options, None, aggregation))
    assert lone_row_policy(estimator, aggregation) is policy
    assert (policy is LoneRowPolicy.PRIOR) == has_lone_response_baseline(name)


def test_every_estimator_has_a_policy():
    for name in ebpo.available_estimators():
        estimator = ebpo.make_estimator(name, **trl_estimator_kwargs(name, {}, None))
        assert lone_row_policy(estimator, "sum_then_normalize") in LoneRowPolicy


ALLOWED_IMPORTS = {"__future__", "enum", "json", "dataclasses", "typing", "torch", "numpy", "ebpo"}


@pytest.mark.parametrize("name", ["batch_advantages.py", "aggregation.py"])
def test_the_arithmetic_imports_no_trainer_framework(name):
    """batch_advantages and the aggregation it uses import torch and the estimators, not TRL."""
    path = Path(module.__file__).with_name(name)
    tree = ast.parse(path.read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module)
    assert imported, path
    for name in imported:
        assert name.split(".")[0] in ALLOWED_IMPORTS, name
        if name.startswith("ebpo"):
            assert name.startswith(("ebpo.estimators", "ebpo.integrations.trl.aggregation")), name
