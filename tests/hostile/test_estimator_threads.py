"""Estimators under concurrent use (issue #21 item 7): 4 threads × 50 batches into one estimator
lost updates silently (9,280 of 12,800 rewards counted). A call is now atomic with respect to the
state (the estimator's lock, see :mod:`ebpo.estimators.base`): these tests run real threads,
switching every microsecond, and compare with the same batches applied one at a time."""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from typing import Any

import numpy as np
import pytest
import torch

import ebpo

THREADS, BATCHES_PER_THREAD, GROUPS_PER_BATCH, GROUP_SIZE = 4, 50, 16, 4
ROWS = GROUPS_PER_BATCH * GROUP_SIZE  # 64 rewards a batch: 4 × 50 × 64 = 12,800 in all
#: (label, estimator, options): every stateful configuration, and a stateless one
CONCURRENT = [
    ("ebpo", "ebpo", {}),
    ("ebpo_bb", "ebpo_bb", {}),
    ("jspo_plus_plus", "jspo_plus_plus", {}),
    ("jspo_plus_plus-smoothed", "jspo_plus_plus", {"smooth_coef": 0.99}),
    ("ebpo-ema", "ebpo", {"prior": "ema", "half_life": 5.0}),
    ("ebpo-per-cluster", "ebpo", {"per_cluster": True, "min_cluster_groups": 2}),
    ("ebpo-batch-prior", "ebpo", {"prior": "batch"}),
    ("grpo", "grpo", {}),
]


def thread_batches() -> list[list[tuple[torch.Tensor, np.ndarray, list[str]]]]:
    """``[thread][batch] -> (rewards, group ids, clusters)``: 0/1 rewards, fresh ids per batch."""
    rng = np.random.default_rng(21)
    out = []
    for t in range(THREADS):
        mine = []
        for b in range(BATCHES_PER_THREAD):
            theta = rng.beta(2, 3, size=GROUPS_PER_BATCH)
            rewards = (rng.random((GROUPS_PER_BATCH, GROUP_SIZE)) < theta[:, None]).astype(float)
            ids = np.repeat(np.arange(GROUPS_PER_BATCH) + GROUPS_PER_BATCH * (t * 100 + b), 4)
            clusters = [f"topic{g % 3}" for g in ids]
            mine.append((torch.from_numpy(rewards.ravel()), ids, clusters))
        out.append(mine)
    return out


@contextlib.contextmanager
def fast_thread_switching():
    """Switch threads every microsecond (default 5 ms), so that races show up in every run."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def run_in_threads(est, batches, reader=None):
    """Each of THREADS real threads feeds its batches to ``est``, all starting together.

    Returns ``(order, results)``: ``order`` lists ``(thread, batch)`` in the order the calls ran
    ``_compute`` — recorded inside the call, i.e. under the estimator's lock — and ``results``
    maps ``(thread, batch)`` to the call's result. ``reader(est)``, if given, runs in a fifth
    thread until the others are done.
    """
    order: list[tuple[int, int]] = []
    results: dict[tuple[int, int], ebpo.AdvantageResult] = {}
    errors: list[BaseException] = []
    current = threading.local()
    compute = est._compute

    def recording(batch, *, update):
        order.append(current.id)
        return compute(batch, update=update)

    est._compute = recording  # shadows the method on this instance only
    start = threading.Barrier(THREADS + (reader is not None))
    done = threading.Event()

    def work(t: int) -> None:
        try:
            start.wait()
            for b, (rewards, ids, clusters) in enumerate(batches[t]):
                current.id = (t, b)
                results[t, b] = est(rewards, ids, clusters=clusters)
        except BaseException as error:  # reported by the test, not lost in the thread
            errors.append(error)

    def read() -> None:
        try:
            start.wait()
            while not done.is_set():
                reader(est)
        except BaseException as error:
            errors.append(error)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    extra = [threading.Thread(target=read)] if reader is not None else []
    with fast_thread_switching():
        for thread in workers + extra:
            thread.start()
        for thread in workers:
            thread.join(120)
        done.set()
        for thread in extra:
            thread.join(120)
    del est._compute
    assert not errors, errors
    assert len(results) == THREADS * BATCHES_PER_THREAD
    return order, results


def test_four_threads_count_every_reward_exactly():
    """The issue's reproduction: 4 threads × 50 batches of 64 rewards into one estimator counted
    9,280 rewards (ebpo), 7,360 (ebpo_bb), 136 steps (jspo_plus_plus) instead of 12,800 / 200."""
    batches = thread_batches()
    for name in ("ebpo", "ebpo_bb", "jspo_plus_plus"):
        est = ebpo.make_estimator(name)
        run_in_threads(est, batches)
        state = est.state_dict()
        assert state["steps"] == THREADS * BATCHES_PER_THREAD == 200, name
        if name != "jspo_plus_plus":
            assert state["global"]["rewards"]["count"] == THREADS * BATCHES_PER_THREAD * ROWS
            assert state["global"]["rewards"]["count"] == 12_800
            assert state["global"]["group_means"]["count"] == 200 * GROUPS_PER_BATCH


@pytest.mark.parametrize(("label", "name", "options"), CONCURRENT, ids=[c[0] for c in CONCURRENT])
def test_concurrent_calls_equal_the_same_calls_one_at_a_time(label, name, options):
    """After concurrent calls, the state and every call's result are bit for bit those of the
    same batches applied serially in the order the calls took the lock."""
    batches = thread_batches()
    est = ebpo.make_estimator(name, **options)
    order, results = run_in_threads(est, batches)
    serial = ebpo.make_estimator(name, **options)
    for t, b in order:
        rewards, ids, clusters = batches[t][b]
        expected = serial(rewards, ids, clusters=clusters)
        assert torch.equal(results[t, b].advantages, expected.advantages), (t, b)
        assert results[t, b].metrics == expected.metrics, (t, b)
    assert json.dumps(est.state_dict()) == json.dumps(serial.state_dict())


def test_order_free_statistics_equal_any_serial_order():
    """EBPO's history prior does not depend on the order of the batches: after concurrent calls
    its counts equal those of thread 0's batches, then thread 1's, … exactly, its means and M2
    up to float64 rounding."""
    batches = thread_batches()
    est = ebpo.make_estimator("ebpo")
    run_in_threads(est, batches)
    serial = ebpo.make_estimator("ebpo")
    for mine in batches:
        for rewards, group_ids, _ in mine:
            serial(rewards, group_ids)
    got, expected = est.state_dict()["global"], serial.state_dict()["global"]
    for key in ("rewards", "group_means", "group_variances"):
        assert got[key]["count"] == expected[key]["count"]
        assert got[key]["mean"] == pytest.approx(expected[key]["mean"], rel=1e-12, abs=1e-15)
        assert got[key]["m2"] == pytest.approx(expected[key]["m2"], rel=1e-12, abs=1e-15)
    assert est.steps == serial.steps == 200


def test_state_read_during_concurrent_calls_is_always_a_consistent_snapshot():
    """state_dict() taken while 4 threads call: every snapshot is the state after a whole number
    of calls (count = 64 × steps) and loads into a fresh estimator."""
    snapshots: list[dict[str, Any]] = []
    run_in_threads(
        ebpo.make_estimator("ebpo"),
        thread_batches(),
        reader=lambda e: snapshots.append(e.state_dict()),
    )
    assert snapshots
    for state in snapshots:
        assert state["global"]["rewards"]["count"] == ROWS * state["steps"]
        ebpo.make_estimator("ebpo").load_state_dict(state)
