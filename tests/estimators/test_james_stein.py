"""JSPO and JSPO++ against the per-prompt references of tests/reference.py (random batches:
shuffled rows, unequal group sizes, masks, singletons, continuous rewards, string ids) and against
ports of the authors' released code."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import ebpo
from tests import reference
from tests.estimators.batches import (
    as_tensor,
    batches,
    check,
    fidelity_batches,
    run_against_reference,
)


@settings(max_examples=80, deadline=None)
@given(batches(), st.sampled_from(["released_code", "project_page"]))
def test_jspo_matches_reference(batch, lambda_form):
    rewards, ids, mask, _ = batch
    res = ebpo.make_estimator("jspo", lambda_form=lambda_form)(as_tensor(rewards), ids, mask=mask)
    adv, base, lam = reference.jspo(rewards, ids, mask, lambda_form=lambda_form)
    check(res.advantages, adv)
    check(res.baselines, base)
    check(res.shrinkage, lam)


# ---------------------------------------------------------------------- fidelity to the authors' formulas
def max_delta_jspo(lambda_form: str = "released_code", seed: int = 0, count: int = 300) -> float:
    """max |Δadvantage| between ``jspo`` and the per-prompt reference of the authors' formula with
    our conventions on uneven groups, singletons and padding (``reference.jspo``)."""
    worst = 0.0
    for rewards, ids, mask in fidelity_batches(seed, count):
        res = ebpo.make_estimator("jspo", lambda_form=lambda_form)(
            torch.from_numpy(rewards), ids, mask=mask
        )
        expected, _, _ = reference.jspo(
            rewards.tolist(), ids.tolist(), mask, lambda_form=lambda_form
        )
        worst = max(worst, float((res.advantages - as_tensor(expected)).abs().max()))
    return worst


@pytest.mark.parametrize("lambda_form", ["released_code", "project_page"])
def test_jspo_equals_the_authors_formula_on_uneven_batches(lambda_form):
    assert max_delta_jspo(lambda_form) < 1e-12


def test_jspo_lambda_has_no_group_size_factor():
    """Issue #10 item 1, by hand, G = 2: the released code's λ has no (G−1)/G factor (ours had it,
    halving λ), and the project page's factor is (K−1)/K with K = 3 prompts."""
    rewards = [0.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    ids = [0, 0, 1, 1, 2, 2]
    # For prompt 0, the other prompts have means 0 and 1 (v = 0 each): μ = 0.5, s = 0.25, v = 0 → λ = 0.
    # For prompt 1: others (0.5, 1): μ = 0.75, s = 0.0625, v = (0.5/2 + 0)/2 = 0.125.
    v, s = 0.125, 0.0625
    lam = v / (v + s + 1e-6)
    res = ebpo.make_estimator("jspo")(rewards, ids)
    assert float(res.shrinkage[2]) == pytest.approx(lam, rel=1e-6)
    assert float(res.baselines[2]) == pytest.approx((1 - lam) * 0.0 + lam * 0.75, rel=1e-6)
    page = ebpo.make_estimator("jspo", lambda_form="project_page")(rewards, ids)
    assert float(page.shrinkage[2]) == pytest.approx(lam * 2 / 3, rel=1e-6)


@pytest.mark.parametrize("group_size", [2, 3])
def test_jspo_is_plain_rloo_when_the_other_prompts_do_not_vary(group_size):
    """v = s = 0 over the other prompts gives λ = 0 (the released code); ours used to set (G−1)/G.
    Exactly 0, not rounding residue: with G = 3 the leave-one-prompt-out mean of the noise terms
    used to come out as 1e-17, giving λ = 7e-12."""
    rewards = [0.0, 1.0, 1.0][:group_size] + [1.0] * 2 * group_size
    ids = np.repeat(np.arange(3), group_size)
    res = ebpo.make_estimator("jspo")(as_tensor(rewards), ids)
    rloo = ebpo.make_estimator("rloo")(as_tensor(rewards), ids)
    torch.testing.assert_close(
        res.advantages[:group_size], rloo.advantages[:group_size], atol=0, rtol=0
    )
    assert res.shrinkage[:group_size].abs().sum() == 0


def test_jspo_singleton_prompt_uses_the_other_prompts_mean():
    res = ebpo.make_estimator("jspo")([1.0, 0.0, 1.0, 0.5], [0, 1, 1, 2])
    assert float(res.baselines[3]) == pytest.approx(0.75)  # mean of the means 1.0 and 0.5
    assert float(res.shrinkage[3]) == 1.0
    alone = ebpo.make_estimator("jspo")([0.5], [0])
    assert float(alone.baselines[0]) == 0.0 and float(alone.advantages[0]) == 0.5


# ---------------------------------------------------------------------- the authors' released JSPO code
def authors_batches(seed: int = 0, count: int = 300, min_prompts: int = 2):
    """Random batches in the domain of the authors' functions (tests/reference.py, ``authors_jspo``):
    n prompts of m ≥ 2 responses each, rows contiguous by prompt, continuous or 0/1 rewards, a
    right-padded token mask [bs, T]. Each comes with what our estimator gets for the same batch: the
    rows shuffled, uuid-string ids, and in a third of the batches extra padding rows (mask False,
    junk or NaN rewards, existing or new ids) that must change nothing.

    Yields ``(scores, index, token_mask, ours)`` where ``ours = (rewards, ids, mask, order)``:
    ``rewards[j]`` is ``scores[order[j]]`` for the ``len(scores)`` real rows, padding after them.
    """
    rng = np.random.default_rng(seed)
    for _ in range(count):
        n, m = int(rng.integers(min_prompts, 13)), int(rng.integers(2, 9))
        prompt = np.repeat(np.arange(n), m)
        if rng.random() < 0.5:
            scores = (rng.random(n * m) < rng.beta(0.7, 0.7, size=n)[prompt]).astype(float)
        else:
            scores = rng.normal(rng.normal(size=n)[prompt], rng.uniform(0.1, 2.0))
        length = int(rng.integers(1, 7))
        token_mask = (
            np.arange(length)[None, :] < rng.integers(1, length + 1, size=n * m)[:, None]
        ).astype(float)
        uids = np.array([f"{rng.integers(2**32):08x}-uid-{p}" for p in range(n)], dtype=object)
        order = rng.permutation(n * m)
        rewards, ids, mask = scores[order], uids[prompt[order]], None
        if rng.random() < 1 / 3:
            pad = int(rng.integers(1, 5))
            junk = rng.choice([np.nan, 7.0, -3.0, 0.0, 1.0], size=pad)
            pad_ids = np.array(
                [uids[0] if rng.random() < 0.5 else f"pad-{i}" for i in range(pad)], dtype=object
            )
            rewards, ids = np.concatenate([rewards, junk]), np.concatenate([ids, pad_ids])
            mask = np.arange(n * m + pad) < n * m
        yield scores, prompt, token_mask, (rewards, ids, mask, order)


def ours_on_tokens(est: ebpo.AdvantageEstimator, scores, token_mask, ours) -> torch.Tensor:
    """``est`` on the shuffled/padded batch, put back in the authors' row order and broadcast onto
    the tokens as the verl integration does (A[i, t] = A_i · response_mask[i, t])."""
    rewards, ids, mask, order = ours
    res = est(torch.from_numpy(rewards), ids, mask=mask)
    assert res.advantages[len(scores) :].abs().sum() == 0  # padding rows
    per_row = torch.empty(len(scores), dtype=torch.float64)
    per_row[torch.from_numpy(order)] = res.advantages[: len(scores)]
    return per_row.unsqueeze(-1) * torch.from_numpy(token_mask)


def max_delta_authors_jspo(
    lambda_form: str = "released_code", seed: int = 0, count: int = 300
) -> float:
    """max |Δadvantage| (token level) between ``jspo`` and the port of the authors' function."""
    worst = 0.0
    for scores, prompt, token_mask, ours in authors_batches(seed, count):
        expected, _, _, _ = reference.authors_jspo(
            scores.tolist(), prompt.tolist(), token_mask.tolist()
        )
        est = ebpo.make_estimator("jspo", lambda_form=lambda_form, nan_policy="mask")
        got = ours_on_tokens(est, scores, token_mask, ours)
        worst = max(worst, float((got - torch.tensor(expected, dtype=torch.float64)).abs().max()))
    return worst


def max_delta_authors_jspo_plus_plus(smooth_coef: float, seed: int = 0, steps: int = 300) -> float:
    """max |Δadvantage| (token level) over a run of ``steps`` batches between one ``jspo_plus_plus``
    estimator and the port of the authors' function with its history list."""
    est = ebpo.make_estimator("jspo_plus_plus", smooth_coef=smooth_coef, nan_policy="mask")
    history: list[tuple[float, float]] = []
    worst = 0.0
    for scores, prompt, token_mask, ours in authors_batches(seed, steps):
        expected, lam, _, _ = reference.authors_jspo_plus_plus(
            scores.tolist(), prompt.tolist(), token_mask.tolist(), history, smooth_coef
        )
        got = ours_on_tokens(est, scores, token_mask, ours)
        worst = max(worst, float((got - torch.tensor(expected, dtype=torch.float64)).abs().max()))
    assert est.steps == len(history) == steps
    return worst


def test_jspo_equals_the_authors_released_code():
    """Issue #10 item 1, against a port of compute_jspo_outcome_advantage (tests/reference.py): 300
    batches of 2-12 prompts × 2-8 responses, 0/1 or continuous rewards, rows shuffled, uuid ids,
    padding rows in a third of them, advantages broadcast onto right-padded token masks."""
    assert max_delta_authors_jspo("released_code") < 1e-12
    # the project page's (K−1)/K is a different estimator, not a rounding difference
    assert max_delta_authors_jspo("project_page", count=50) > 1e-2


def test_jspo_with_a_single_prompt_is_rloo_where_the_released_code_gives_nan():
    """A deliberate difference: with no other prompt their shrinkage target is the mean of an empty
    selection (NaN, and so is every advantage); ours takes λ = 0, plain RLOO."""
    scores, prompt, mask = [1.0, 0.0, 0.0, 1.0], [0, 0, 0, 0], [[1.0]] * 4
    authors, _, _, _ = reference.authors_jspo(scores, prompt, mask)
    assert all(math.isnan(row[0]) for row in authors)
    res = ebpo.make_estimator("jspo")(scores, prompt)
    torch.testing.assert_close(
        res.advantages, ebpo.make_estimator("rloo")(scores, prompt).advantages, rtol=0, atol=0
    )
    assert res.shrinkage.abs().sum() == 0


@pytest.mark.parametrize("smooth_coef", [0.0, 0.99])
def test_jspo_plus_plus_equals_the_authors_code_step_by_step(smooth_coef):
    """Issue #10 item 1 (jspo_plus_plus): one estimator over 300 steps against the port of
    compute_jspo_plus_plus_outcome_advantage with its history, unsmoothed and with the authors'
    js_smooth_coef = 0.99 (by step 300 the time-weighted EMA keeps 0.97 of the past per step)."""
    assert max_delta_authors_jspo_plus_plus(smooth_coef) < 1e-12


@pytest.mark.parametrize(("smooth_coef", "steps"), [(0.3, 1000), (1.0, 300)])
def test_jspo_plus_plus_smoothing_over_a_long_run(smooth_coef, steps):
    """Small coefficients only bite after many steps (w = sqrt(c) is raised to 1642.65/(t − 1)):
    at step 1000, c = 0.3 keeps 0.37 of the past per step; c = 1 (w capped at 0.999) keeps 0.995
    at step 300. Compared at every step."""
    assert max_delta_authors_jspo_plus_plus(smooth_coef, seed=1, steps=steps) < 1e-12


def test_jspo_plus_plus_by_hand():
    """Means 2/3, 1/3, 1: μ = 2/3, s = 2/27, v = mean(var/3) = 2/27, so λ = 1/2 (up to eps)."""
    rewards, ids = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0], [0, 0, 0, 1, 1, 1, 2, 2, 2]
    res = ebpo.make_estimator("jspo_plus_plus")(as_tensor(rewards), ids)
    lam = (2 / 27) / (4 / 27 + 1e-6)
    assert res.metrics["jspo_lambda"] == pytest.approx(lam, rel=1e-12)
    assert res.metrics["jspo_mean"] == pytest.approx(2 / 3, rel=1e-12)
    # row 0: leave-one-out mean (0 + 1)/2
    assert float(res.baselines[0]) == pytest.approx((1 - lam) * 0.5 + lam * 2 / 3, rel=1e-12)


def test_jspo_plus_plus_smooths_lambda_and_mean_with_the_time_weighted_ema():
    """Two steps, coef 0.99: the second λ and μ used are (d·x_1 + x_2)/(d + 1), d = 0.99^(1642.65/2)."""
    est = ebpo.make_estimator("jspo_plus_plus", smooth_coef=0.99)
    first = est([1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1])
    second = est([1.0, 0.0, 0.0, 0.0, 1.0, 1.0], [0, 0, 1, 1, 2, 2])
    d = 0.99 ** (1642.65 / 2)
    for key, batch_key in (("jspo_lambda", "jspo_lambda_batch"), ("jspo_mean", "jspo_batch_mean")):
        expected = (d * first.metrics[batch_key] + second.metrics[batch_key]) / (d + 1)
        assert second.metrics[key] == pytest.approx(expected, rel=1e-12)
        assert second.metrics[key] != second.metrics[batch_key]


def test_jspo_plus_plus_resumes_exactly_from_a_saved_state():
    """The smoothing history is in state_dict() (the authors' lives in process memory): a run
    interrupted, saved as JSON and resumed gives bit-for-bit the uninterrupted run."""
    stream = [(ours[0], ours[1], ours[2]) for _, _, _, ours in authors_batches(seed=3, count=40)]
    whole = ebpo.make_estimator("jspo_plus_plus", smooth_coef=0.99, nan_policy="mask")
    expected = [whole(torch.from_numpy(r), ids, mask=mask).advantages for r, ids, mask in stream]
    first = ebpo.make_estimator("jspo_plus_plus", smooth_coef=0.99, nan_policy="mask")
    for r, ids, mask in stream[:25]:
        first(torch.from_numpy(r), ids, mask=mask)
    resumed = ebpo.make_estimator("jspo_plus_plus", smooth_coef=0.99, nan_policy="mask")
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    for (r, ids, mask), advantages in zip(stream[25:], expected[25:], strict=True):
        torch.testing.assert_close(
            resumed(torch.from_numpy(r), ids, mask=mask).advantages, advantages, rtol=0, atol=0
        )
    assert json.dumps(resumed.state_dict()) == json.dumps(whole.state_dict())


@settings(max_examples=60, deadline=None)
@given(
    st.lists(batches(), min_size=1, max_size=5),
    st.sampled_from([0.0, 0.5, 0.99, 1.0]),
    st.lists(st.booleans(), min_size=5, max_size=5),
)
def test_jspo_plus_plus_matches_reference_over_several_steps(stream, smooth_coef, updates):
    """Uneven groups, singletons, masks, shuffled rows and update=False, against the per-prompt
    reference of our definition (tests/reference.py, ReferenceJSPOPlusPlus)."""
    est = ebpo.make_estimator("jspo_plus_plus", smooth_coef=smooth_coef)
    ref = reference.ReferenceJSPOPlusPlus(smooth_coef=smooth_coef)
    for res, (_, _, _, stats) in run_against_reference(est, ref, stream, updates):
        if stats is not None:
            assert res.metrics["jspo_lambda"] == pytest.approx(stats["lambda"], rel=1e-9, abs=1e-12)
            assert res.metrics["jspo_v"] == pytest.approx(stats["v"], rel=1e-9, abs=1e-12)
            assert res.metrics["jspo_s"] == pytest.approx(stats["s"], rel=1e-9, abs=1e-12)
    assert est.steps == len(ref.history)
