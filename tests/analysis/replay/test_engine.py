"""``ebpo.analysis.replay.engine``: the per-step measurements against a slow loop over groups, the run's
summary against the same numbers computed on all responses at once, and the estimators' state
carried from step to step."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
import torch

from ebpo.analysis.replay.engine import (
    DEFAULT_ESTIMATORS,
    ESTIMATOR_FIELDS,
    Replay,
    estimator_names,
    replay_steps,
    summarize,
)
from ebpo.analysis.replay.sources import StepBatch
from ebpo.estimators import make_estimator
from ebpo.estimators.functional import SIGNAL_THRESHOLD


def random_step(
    rng: np.random.Generator, step: int, groups: int = 12, fail: float = 0.0
) -> StepBatch:
    """Uneven groups (1..6 responses), rewards ``fail`` / 1 with all-fail, all-pass and mixed
    groups, rows shuffled; one group of continuous rewards in [0, 1]."""
    sizes = rng.integers(1, 7, size=groups)
    index = np.repeat(np.arange(groups), sizes)
    rate = rng.choice([0.0, 1.0, 0.5, 0.3], size=groups)[index]
    rewards = np.where(rng.random(len(index)) < rate, 1.0, fail)
    rewards[index == 0] = rng.random(size=int((index == 0).sum()))
    order = rng.permutation(len(index))
    labels = pa.array([f"p{step}-{g}" for g in range(groups)])
    return StepBatch(step, rewards[order], index[order], labels, "memory", len(index))


def slow_record(batch: StepBatch, advantages: dict[str, torch.Tensor], shrinkage) -> dict:
    """The per-step numbers, one group at a time in plain Python."""
    groups = {}
    for row, g in enumerate(batch.group_index.tolist()):
        groups.setdefault(g, []).append(row)
    rewards = batch.rewards.tolist()
    fail = [
        g
        for g, rows in groups.items()
        if len(rows) > 1 and len({rewards[r] for r in rows}) == 1 and rewards[rows[0]] <= 0
    ]
    ok = [
        g
        for g, rows in groups.items()
        if len(rows) > 1 and len({rewards[r] for r in rows}) == 1 and rewards[rows[0]] > 0
    ]
    fail_rows = [r for g in fail for r in groups[g]]
    pass_rows = [r for g in ok for r in groups[g]]
    record = {
        "responses": len(rewards),
        "groups": len(groups),
        "singleton_groups": sum(len(rows) == 1 for rows in groups.values()),
        "all_fail_groups": len(fail),
        "all_pass_groups": len(ok),
        "all_fail_responses": len(fail_rows),
        "all_pass_responses": len(pass_rows),
        "group_size_min": min(len(r) for r in groups.values()),
        "group_size_max": max(len(r) for r in groups.values()),
        "estimators": {},
    }
    grpo = advantages["grpo"].tolist()
    for name, tensor in advantages.items():
        a = tensor.tolist()
        signal = [abs(x) > SIGNAL_THRESHOLD for x in a]
        silent = [g for g, rows in groups.items() if not any(signal[r] for r in rows)]
        diffs = [x - y for x, y in zip(a, grpo, strict=True)]
        s = shrinkage[name].tolist()
        record["estimators"][name] = {
            "nonzero_advantage_responses": sum(signal),
            "zero_signal_groups": len(silent),
            "signal_where_grpo_has_none": sum(
                sig and abs(y) <= SIGNAL_THRESHOLD for sig, y in zip(signal, grpo, strict=True)
            ),
            "all_fail_groups_with_signal": sum(g not in silent for g in fail),
            "all_fail_advantage_mean": sum(a[r] for r in fail_rows) / len(fail_rows)
            if fail_rows
            else None,
            "all_pass_advantage_mean": sum(a[r] for r in pass_rows) / len(pass_rows)
            if pass_rows
            else None,
            "shrinkage_mean": sum(s[groups[g][0]] for g in groups) / len(groups),
            "advantage_mean": sum(a) / len(a),
            "diff_to_grpo_rms": math.sqrt(sum(d * d for d in diffs) / len(diffs)),
            "diff_to_grpo_max_abs": max(abs(d) for d in diffs),
        }
    return record


NAMES = ["ebpo", "ebpo_within", "jspo_plus_plus", "rloo"]


@pytest.mark.parametrize(
    ("fail", "names"), [(0.0, [*NAMES, "ebpo_bb"]), (-1.0, NAMES)], ids=["0-1", "dapo-minus-1"]
)
def test_step_numbers_equal_a_loop_over_groups(fail, names):
    rng = np.random.default_rng(0)
    replay = Replay(names)
    for step in range(1, 6):
        batch = random_step(rng, step, fail=fail)
        record = replay.step(batch)
        results = replay.last_results
        expected = slow_record(
            batch,
            {n: r.advantages for n, r in results.items()},
            {n: r.shrinkage for n, r in results.items()},
        )
        for key, value in expected.items():
            if key != "estimators":
                assert record[key] == value, key
        for name, values in expected["estimators"].items():
            for key, value in values.items():
                assert record["estimators"][name][key] == pytest.approx(value, abs=1e-12), (
                    name,
                    key,
                )
        assert set(record["estimators"][names[0]]) == set(ESTIMATOR_FIELDS)
        assert record["all_fail_groups"] + record["all_pass_groups"] == record["all_equal_groups"]
        # GRPO is the reference: nothing differs from it, and it gives all-equal groups nothing
        grpo = record["estimators"]["grpo"]
        assert grpo["diff_to_grpo_max_abs"] == 0 and grpo["signal_where_grpo_has_none"] == 0
        assert grpo["all_fail_groups_with_signal"] == 0


def test_stateful_estimators_carry_their_state_across_steps():
    """The replay's estimators after N steps hold the state of one estimator fed the N steps in
    order (and not of N fresh ones)."""
    rng = np.random.default_rng(1)
    batches = [random_step(rng, s) for s in range(1, 5)]
    replay = Replay(["ebpo", "jspo_plus_plus"])
    replay_steps(iter(batches), replay)
    for name in ("ebpo", "jspo_plus_plus"):
        reference = make_estimator(name)
        for batch in batches:
            result = reference(torch.from_numpy(batch.rewards), torch.from_numpy(batch.group_index))
        assert replay.estimators[name].state_dict() == reference.state_dict()
        torch.testing.assert_close(
            replay.last_results[name].advantages, result.advantages, rtol=0, atol=0
        )
    fresh = make_estimator("ebpo")(
        torch.from_numpy(batches[-1].rewards), torch.from_numpy(batches[-1].group_index)
    )
    assert not torch.equal(fresh.advantages, replay.last_results["ebpo"].advantages)


def test_summary_equals_the_numbers_of_all_responses_at_once():
    rng = np.random.default_rng(2)
    batches = [random_step(rng, s, groups=int(rng.integers(3, 15))) for s in range(1, 8)]
    replay = Replay(["ebpo"])
    records, advantages = [], {"grpo": [], "ebpo": []}
    for batch in batches:
        records.append(replay.step(batch))
        for name in advantages:
            advantages[name].append(replay.last_results[name].advantages)
    summary = summarize(records)
    assert summary["steps"] == 7 and summary["first_step"] == 1 and summary["last_step"] == 7
    assert summary["responses"] == sum(len(b.rewards) for b in batches)
    assert summary["reward_mean"] == pytest.approx(
        np.concatenate([b.rewards for b in batches]).mean()
    )
    every = {name: torch.cat(values) for name, values in advantages.items()}
    ebpo = summary["estimators"]["ebpo"]
    assert ebpo["advantage_mean"] == pytest.approx(float(every["ebpo"].mean()), abs=1e-12)
    assert ebpo["advantage_std"] == pytest.approx(float(every["ebpo"].std()), rel=1e-12)
    diff = every["ebpo"] - every["grpo"]
    assert ebpo["diff_to_grpo_rms"] == pytest.approx(float(diff.square().mean().sqrt()), rel=1e-12)
    assert ebpo["diff_to_grpo_max_abs"] == pytest.approx(float(diff.abs().max()))
    assert ebpo["nonzero_advantage_frac"] == pytest.approx(
        float((every["ebpo"].abs() > SIGNAL_THRESHOLD).double().mean())
    )
    fail = torch.cat([torch.from_numpy(_rows_in(b, "fail")) for b in batches])
    assert ebpo["all_fail_advantage_mean"] == pytest.approx(
        float(every["ebpo"][fail].mean()), abs=1e-12
    )


def _rows_in(batch: StepBatch, kind: str) -> np.ndarray:
    out = np.zeros(len(batch.rewards), dtype=bool)
    for g in np.unique(batch.group_index):
        rows = batch.group_index == g
        values = batch.rewards[rows]
        if (
            rows.sum() > 1
            and (values == values[0]).all()
            and ((values[0] <= 0) == (kind == "fail"))
        ):
            out |= rows
    return out


def test_estimator_names_put_grpo_first_and_refuse_unknown_names():
    assert estimator_names(["ebpo", "grpo", "ebpo"]) == ["grpo", "ebpo"]
    assert estimator_names(DEFAULT_ESTIMATORS) == list(DEFAULT_ESTIMATORS)
    assert estimator_names(["reinforce_pp_baseline"]) == ["grpo", "reinforce_pp_baseline"]
    with pytest.raises(ValueError, match="unknown estimator 'ebpo_typo'; expected one of"):
        estimator_names(["ebpo_typo"])


def test_no_steps_is_an_error():
    with pytest.raises(ValueError, match="no steps"):
        replay_steps(iter([]), Replay(["ebpo"]))


def test_spo_tracks_each_prompt_id_across_steps_and_the_comparators_replay():
    """Every estimator a replay can feed runs; SPO's tracker is keyed by the step's prompt ids
    (here the same prompts every step), as one SPO fed those keys in order."""
    rng = np.random.default_rng(2)
    batches = []
    for s in range(1, 5):
        batch = random_step(rng, s)
        labels = pa.array([f"prompt-{g}" for g in range(batch.num_groups)])  # stable across steps
        batches.append(StepBatch(s, batch.rewards, batch.group_index, labels, "memory", batch.rows))
    replay = Replay(["grpo_bn", "spo", "krpo"])
    replay_steps(iter(batches), replay)
    reference = make_estimator("spo")
    for batch in batches:
        keys = [f"prompt-{g}" for g in batch.group_index]
        result = reference(
            torch.from_numpy(batch.rewards), torch.from_numpy(batch.group_index), prompt_keys=keys
        )
    assert replay.estimators["spo"].state_dict() == reference.state_dict()
    assert reference.state_dict()["prompts"]["keys"].__len__() == batches[0].num_groups
    torch.testing.assert_close(replay.last_results["spo"].advantages, result.advantages)


def test_an_estimator_that_needs_token_counts_is_refused_before_any_step():
    with pytest.raises(ValueError, match="estimator 'opo' needs the number of tokens"):
        estimator_names(["ebpo", "opo"])
