"""SPO against the port of the EBPO authors' ``compute_spo_outcome_advantage`` and ``SPOTracker``,
and its per-prompt state: exact, bounded, untouched by failed calls, NaN and padding."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

import ebpo
from ebpo.estimators.validation import stable_key_hash
from tests.estimators.batches import assert_load_refused, assert_valid_rows_equal, fidelity_batches
from tests.estimators.comparator_references import AuthorsSPOTracker, authors_spo


def _close(actual, expected):
    torch.testing.assert_close(
        actual, torch.as_tensor(expected, dtype=torch.float64), atol=1e-9, rtol=1e-9
    )


@pytest.mark.parametrize(("normalize", "norm_adv_by_std"), [("batch", True), ("center", False)])
def test_one_call_with_fresh_keys_equals_the_authors_function(normalize, norm_adv_by_std):
    compared = 0
    for rewards, ids, mask in fidelity_batches(seed=4):
        keep = np.ones(len(rewards), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
        if keep.sum() < 2:
            continue
        est = ebpo.make_estimator("spo", normalize=normalize)
        res = est(torch.tensor(rewards), ids, mask=mask, prompt_keys=ids)
        expected = authors_spo(
            AuthorsSPOTracker(), rewards[keep], ids[keep], norm_adv_by_std_in_grpo=norm_adv_by_std
        )
        assert_valid_rows_equal(res.advantages, keep, expected)
        compared += 1
    assert compared > 250


def _stream(seed, steps=120, prompts=25):
    """Batches drawing a few of ``prompts`` prompts a step (uneven groups, lone responses,
    rewards in [0, 1] or outside it), rows shuffled."""
    rng = np.random.default_rng(seed)
    for step in range(steps):
        chosen = rng.choice(prompts, size=int(rng.integers(2, 9)), replace=False)
        ids = np.repeat(chosen, rng.integers(1, 7, size=len(chosen)))
        if step % 2:
            rewards = (rng.random(len(ids)) < rng.random()).astype(float)
        else:
            rewards = rng.normal(0.5, 0.7, size=len(ids))
        order = rng.permutation(len(ids))
        yield rewards[order], ids[order]


def test_a_stream_of_calls_equals_the_authors_tracker_with_stable_ids():
    est, tracker = ebpo.make_estimator("spo"), AuthorsSPOTracker()
    for rewards, ids in _stream(seed=1):
        res = est(torch.tensor(rewards), ids, prompt_keys=[f"prompt {i}" for i in ids])
        _close(res.advantages, authors_spo(tracker, rewards, ids))
    # the tracker's (α, β) per prompt are the authors' ones
    ours = est.state_dict()["prompts"]
    by_hash = dict(zip(ours["keys"], zip(ours["alpha"], ours["beta"], strict=True), strict=True))
    assert len(by_hash) == len(tracker.tracker)
    for uid, (alpha, beta) in tracker.tracker.items():
        assert by_hash[stable_key_hash(f"prompt {uid}")] == pytest.approx((alpha, beta), rel=1e-12)


def test_the_baseline_is_read_before_the_update_and_keyed_by_prompt_not_group():
    est = ebpo.make_estimator("spo", normalize="none")
    first = est(torch.tensor([1.0, 1.0]), ["uid-a", "uid-a"], prompt_keys=["p", "p"])
    assert first.baselines.tolist() == [0.5, 0.5]
    # n0 = 8: α = 0.9·4 + 1 = 4.6, β = 0.9·4 + 0 = 3.6; a fresh uid, the same prompt
    second = est(torch.tensor([0.0]), ["uid-b"], prompt_keys=["p"])
    assert second.baselines.item() == pytest.approx(4.6 / 8.2)


def test_update_false_and_a_failed_call_leave_the_state_untouched():
    est = ebpo.make_estimator("spo")
    est(torch.tensor([1.0, 0.0, 1.0]), [0, 0, 1], prompt_keys=["a", "a", "b"])
    before = est.state_dict()
    peek = est(torch.tensor([1.0, 1.0]), [0, 0], prompt_keys=["a", "a"], update=False)
    assert est.state_dict() == before
    again = est(torch.tensor([1.0, 1.0]), [0, 0], prompt_keys=["a", "a"], update=False)
    torch.testing.assert_close(peek.advantages, again.advantages)
    huge = torch.tensor([1e300, -1e300], dtype=torch.float64)  # the batch std overflows
    with pytest.raises(ValueError, match="rescale the rewards"):
        est(huge, [0, 1], prompt_keys=["a", "c"])
    with pytest.raises(ValueError, match="prompt_keys must be constant within a group"):
        est(torch.tensor([1.0, 0.0]), [0, 0], prompt_keys=["a", "b"])
    assert est.state_dict() == before


def test_nan_padding_and_empty_groups_never_reach_the_tracker():
    est = ebpo.make_estimator("spo", nan_policy="mask")
    rewards = torch.tensor([1.0, float("nan"), 0.0, 5.0, float("nan")])
    # row 3 is padding (masked, key None), group 2 has only a NaN row
    res = est(
        rewards, [0, 0, 1, 1, 2], mask=[1, 1, 1, 0, 1], prompt_keys=["a", "a", "b", None, "c"]
    )
    assert torch.isfinite(res.advantages).all()
    assert res.advantages[[1, 3, 4]].tolist() == [0.0, 0.0, 0.0]
    table = est.state_dict()["prompts"]
    assert sorted(table["keys"]) == sorted(stable_key_hash(k) for k in ("a", "b"))
    clean = ebpo.make_estimator("spo")
    clean(torch.tensor([1.0, 0.0]), [0, 1], prompt_keys=["a", "b"])
    assert est.state_dict() == clean.state_dict()


def test_a_call_with_no_valid_row_changes_nothing():
    est = ebpo.make_estimator("spo")
    res = est(torch.tensor([1.0, 0.0]), [0, 1], mask=[0, 0], prompt_keys=["a", "b"])
    assert not res.advantages.any()
    assert est.state_dict() == ebpo.make_estimator("spo").state_dict()


def test_state_round_trips_through_json_exactly():
    est = ebpo.make_estimator("spo")
    stream = list(_stream(seed=2, steps=60))
    for rewards, ids in stream[:30]:
        est(torch.tensor(rewards), ids, prompt_keys=ids)
    restored = ebpo.make_estimator("spo")
    restored.load_state_dict(json.loads(json.dumps(est.state_dict())))
    assert restored.state_dict() == est.state_dict()
    for rewards, ids in stream[30:]:
        a = est(torch.tensor(rewards), ids, prompt_keys=ids)
        b = restored(torch.tensor(rewards), ids, prompt_keys=ids)
        assert torch.equal(a.advantages, b.advantages)
    assert restored.state_dict() == est.state_dict()


def test_the_least_recently_seen_prompts_are_evicted_beyond_max_prompts():
    est = ebpo.make_estimator("spo", max_prompts=3, normalize="none")
    for key in ["a", "b", "c"]:
        est(torch.tensor([1.0]), [0], prompt_keys=[key])
    est(torch.tensor([1.0]), [0], prompt_keys=["a"])  # a is recent again; b is the oldest
    est(torch.tensor([1.0]), [0], prompt_keys=["d"])
    keys = set(est.state_dict()["prompts"]["keys"])
    assert keys == {stable_key_hash(k) for k in ("a", "c", "d")}
    assert est(torch.tensor([1.0]), [0], prompt_keys=["b"], update=False).baselines.item() == 0.5
    assert est(torch.tensor([1.0]), [0], prompt_keys=["a"], update=False).baselines.item() > 0.5


def test_prompt_keys_are_required_and_hashed_stably():
    est = ebpo.make_estimator("spo")
    assert est.uses_prompt_keys and est.carries_state
    assert not ebpo.make_estimator("grpo").uses_prompt_keys
    with pytest.raises(ValueError, match="prompt_keys is required by estimator 'spo'"):
        est(torch.tensor([1.0]), [0])
    with pytest.raises(ValueError, match="prompt_keys has 1 entries"):
        est(torch.tensor([1.0, 0.0]), [0, 0], prompt_keys=["a"])
    # a value every process agrees on (Python's own str hash is salted per process)
    assert stable_key_hash("What is 2 + 2?") == stable_key_hash("What is 2 + 2?")
    assert len({stable_key_hash(k) for k in ("1", 1, b"1", ("1",), None)}) == 5
    # the other estimators accept and ignore prompt keys
    grpo = ebpo.make_estimator("grpo")
    torch.testing.assert_close(
        grpo(torch.tensor([1.0, 0.0]), [0, 0], prompt_keys=["a", "a"]).advantages,
        grpo(torch.tensor([1.0, 0.0]), [0, 0]).advantages,
    )


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s["options"].update(rho=0.8), "saved with rho=0.8"),
        (lambda s: s["prompts"]["alpha"].__setitem__(0, -1.0), "alpha must hold finite numbers"),
        (lambda s: s["prompts"]["keys"].reverse(), "strictly increasing"),
        (lambda s: s["prompts"]["last_seen"].__setitem__(0, 99), r"last_seen must hold integers"),
        (lambda s: s["prompts"]["beta"].pop(), "the same length"),
        (lambda s: s.update(extra=1), "unknown key 'extra'"),
    ],
)
def test_a_state_no_run_writes_is_refused_and_the_state_kept(edit, message):
    est = ebpo.make_estimator("spo")
    est(torch.tensor([1.0, 0.0, 1.0]), [0, 1, 2], prompt_keys=["a", "b", "c"])
    bad = copy.deepcopy(est.state_dict())
    edit(bad)
    assert_load_refused(est, bad, message)


def test_a_state_larger_than_max_prompts_is_refused():
    big = ebpo.make_estimator("spo")
    big(torch.tensor([1.0, 0.0, 1.0]), [0, 1, 2], prompt_keys=["a", "b", "c"])
    with pytest.raises(ValueError, match="tracks 3 prompts, more than this estimator's"):
        ebpo.make_estimator("spo", max_prompts=2).load_state_dict(big.state_dict())


@pytest.mark.parametrize(
    ("option", "value"), [("rho", 1.0), ("rho", 0.0), ("rho_min", 1.0), ("max_prompts", 0)]
)
def test_options_out_of_range_are_refused(option, value):
    with pytest.raises(ValueError, match=option):
        ebpo.make_estimator("spo", **{option: value})
