"""KRPO against the port of grpo-composer's ``KalmanAdvantageFunction``, and its state."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

import ebpo
from tests.estimators.batches import assert_load_refused, assert_valid_rows_equal, fidelity_batches
from tests.estimators.comparator_references import ComposerKalman


@pytest.mark.parametrize(
    ("q", "r"), [(1e-5, 1e-2), (1e-4, 1.0)]
)  # its paper config, its verl default
def test_a_stream_of_uneven_batches_equals_the_reference(q, r):
    est = ebpo.make_estimator("krpo", process_noise=q, measurement_noise=r)
    reference = ComposerKalman(process_noise=q, measurement_noise=r)
    for rewards, ids, mask in fidelity_batches(seed=7, count=150):
        keep = np.ones(len(rewards), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
        if not keep.any():
            continue
        res = est(torch.tensor(rewards), ids, mask=mask)
        expected = reference.compute_advantages(rewards[keep])  # it has no mask: the valid rows
        assert_valid_rows_equal(res.advantages, keep, expected)
        assert est.estimate == pytest.approx(reference.x_hat, rel=1e-12)
        assert est.variance == pytest.approx(reference.P, rel=1e-12)


def test_update_false_a_failed_call_and_an_empty_batch_keep_the_state():
    est = ebpo.make_estimator("krpo")
    est(torch.tensor([1.0, 0.0]), [0, 0])
    before = est.state_dict()
    peek = est(torch.tensor([1.0, 1.0]), [0, 0], update=False)
    assert est.state_dict() == before
    assert torch.equal(peek.advantages, est(torch.tensor([1.0, 1.0]), [0, 0]).advantages)
    est.load_state_dict(before)
    with pytest.raises(ValueError, match="do not fit the output dtype float16"):
        est(torch.tensor([6e4, -6e4], dtype=torch.float16), [0, 1])
    est([1.0, 0.0], [0, 0], mask=[0, 0])
    assert est.state_dict() == before


def test_nan_rows_are_left_out_of_the_measurement():
    est, clean = ebpo.make_estimator("krpo", nan_policy="mask"), ebpo.make_estimator("krpo")
    est(torch.tensor([1.0, float("nan"), 0.0]), [0, 0, 1])
    clean(torch.tensor([1.0, 0.0]), [0, 1])
    assert est.state_dict() == clean.state_dict()


def test_state_round_trips_through_json_and_resumes_exactly():
    est = ebpo.make_estimator("krpo")
    batches = list(fidelity_batches(seed=8, count=40))
    for rewards, ids, mask in batches[:20]:
        est(torch.tensor(rewards), ids, mask=mask)
    twin = ebpo.make_estimator("krpo")
    twin.load_state_dict(json.loads(json.dumps(est.state_dict())))
    for rewards, ids, mask in batches[20:]:
        a = est(torch.tensor(rewards), ids, mask=mask).advantages
        assert torch.equal(a, twin(torch.tensor(rewards), ids, mask=mask).advantages)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s["options"].update(process_noise=0.1), "saved with process_noise=0.1"),
        (lambda s: s.update(variance=0.0), r"variance must be a number in \(0, 1\]"),
        (lambda s: s.update(estimate=float("nan")), "estimate must be a finite number"),
        (lambda s: s.update(estimate=None), "None exactly before the first"),
    ],
)
def test_a_state_no_run_writes_is_refused(edit, message):
    est = ebpo.make_estimator("krpo")
    est(torch.tensor([1.0, 0.0]), [0, 0])
    bad = copy.deepcopy(est.state_dict())
    edit(bad)
    assert_load_refused(est, bad, message)
