"""The estimator contract, for every registered estimator: masked rows, singleton and empty
groups, output dtype, bad batches that change nothing, the traits (uses_prior, a call changing the state,
uses_clusters, uses_token_counts) a caller may rely on, and the state lock (copies, subclasses)."""

from __future__ import annotations

import copy
import json
import pickle
import threading

import numpy as np
import pytest
import torch

import ebpo

#: every estimator class, by its own name, with its defaults (a named method such as ebpo_batch is
#: its class with options: tests/estimators/test_names.py)
CLASS_NAMES = sorted({ebpo.estimator_spec(name)[0] for name in ebpo.available_estimators()})


@pytest.mark.parametrize("name", CLASS_NAMES)
def test_masked_rows_get_zero_and_do_not_matter(name):
    """Padding rows (any reward, even NaN) change nothing: same result as the batch without them."""
    rewards = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    ids = ["a", "a", "b", "b", "c", "c", "d", "d"]
    est_full, est_padded = ebpo.make_estimator(name), ebpo.make_estimator(name)
    full = est_full(rewards, ids, prompt_keys=ids, token_counts=[2] * 8)
    padded = est_padded(
        rewards + [float("nan"), 1.0],
        ids + ["pad-0", "a"],
        mask=[True] * 8 + [False, False],
        prompt_keys=ids + ["pad-0", "a"],
        token_counts=[2] * 10,
    )
    torch.testing.assert_close(padded.advantages[:8], full.advantages)
    assert padded.advantages[8:].abs().sum() == 0
    assert json.dumps(est_full.state_dict()) == json.dumps(est_padded.state_dict())


@pytest.mark.parametrize("name", CLASS_NAMES)
def test_singleton_and_fully_masked_groups_are_valid(name):
    est = ebpo.make_estimator(name)
    ids = [0, 1, 1, 2]
    side = {"prompt_keys": ids, "token_counts": [3, 1, 4, 1]}
    res = est([1.0, 0.0, 1.0, 0.5], ids, mask=[True, True, True, False], **side)
    assert torch.isfinite(res.advantages).all()
    assert res.advantages[3] == 0
    side = {"prompt_keys": [0, 0], "token_counts": [3, 1]}
    fully_masked = est([1.0, 0.0], [0, 0], mask=[False, False], **side)
    assert fully_masked.advantages.abs().sum() == 0


@pytest.mark.parametrize("name", CLASS_NAMES)
def test_output_follows_input_dtype_and_shape(name):
    est = ebpo.make_estimator(name)
    r32 = torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=torch.float32)
    keys = {"prompt_keys": [0, 0, 1, 1], "token_counts": [3, 1, 4, 1]}
    res = est(r32, torch.tensor([0, 0, 1, 1]), **keys)
    assert res.advantages.dtype == torch.float32 and res.advantages.shape == (4,)
    res64 = est(r32.double(), np.array([0, 0, 1, 1]), **keys)
    assert res64.advantages.dtype == torch.float64
    for value in res.metrics.values():
        assert isinstance(value, float)


# ---------------------------------------------------------------------- bad batches change nothing
@pytest.mark.parametrize("name", CLASS_NAMES)
def test_overflowing_batch_is_rejected_before_any_state_changes(name):
    """Issue #11 item 4: est([0, 1e200, 0, 1e200], [0, 0, 1, 1]) returned inf/NaN, and EBPO's prior
    became NaN so that every later batch got zero advantages."""
    est = ebpo.make_estimator(name)
    good = ([1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1])
    keys = {"prompt_keys": good[1], "token_counts": [3, 1, 4, 1]}
    fresh = ebpo.make_estimator(name)
    est(*good, **keys)
    fresh(*good, **keys)
    before = json.dumps(est.state_dict())
    with pytest.raises(ValueError, match="too large|overflow|\\[0, 1\\]"):
        est([0, 1e200, 0, 1e200], [0, 0, 1, 1], **keys)
    assert json.dumps(est.state_dict()) == before
    torch.testing.assert_close(
        est(*good, **keys).advantages, fresh(*good, **keys).advantages, rtol=0, atol=0
    )


@pytest.mark.parametrize(
    "name", ["grpo", "rloo", "dr_grpo", "jspo", "reinforce_pp_baseline", "ebpo"]
)
def test_advantages_that_do_not_fit_fp16_are_refused(name):
    """Issue #11 item 7: fp16 rewards of ±60000 gave ±inf in rloo."""
    est = (
        ebpo.make_estimator(name, normalize="none") if name == "ebpo" else ebpo.make_estimator(name)
    )
    rewards = torch.tensor([60000.0, -60000.0, -60000.0, -60000.0], dtype=torch.float16)
    ids = [0, 0, 0, 0]
    if name in ("grpo", "reinforce_pp_baseline"):  # their advantages are ±1.7 / ±1.5: they fit
        assert torch.isfinite(est(rewards, ids).advantages).all()
        return
    before = est.state_dict()
    with pytest.raises(ValueError, match="do not fit the output dtype float16"):
        est(rewards, ids)
    assert est.state_dict() == before
    assert torch.isfinite(est(rewards.float(), ids).advantages).all()


# ---------------------------------------------------------------------- traits
#: (uses_prior, a call changes the state, uses_clusters, uses_token_counts) of each registered estimator,
#: with its defaults and, where the option exists, with per-cluster priors / token whitening
TRAITS = [
    ("dr_grpo", {}, (False, False, False, False)),
    ("ebpo", {}, (True, True, False, False)),
    ("ebpo", {"per_cluster": True}, (True, True, True, False)),
    ("ebpo", {"prior": "batch"}, (True, True, False, False)),
    ("ebpo_bb", {}, (True, True, False, False)),
    ("ebpo_bb", {"per_cluster": True}, (True, True, True, False)),
    ("grpo", {}, (False, False, False, False)),
    ("grpo_bn", {}, (False, False, False, False)),
    ("jspo", {}, (False, False, False, False)),
    ("jspo_plus_plus", {}, (False, True, False, False)),
    ("krpo", {}, (False, True, False, False)),
    ("opo", {}, (False, False, False, True)),
    ("reinforce_pp_baseline", {}, (False, False, False, False)),
    ("reinforce_pp_baseline", {"whiten": "tokens"}, (False, False, False, True)),
    ("rloo", {}, (False, False, False, False)),
    ("spo", {}, (False, True, False, False)),
]
#: the estimators that read prompt_keys (and require them)
PROMPT_KEY_USERS = {"spo"}
#: four groups of four; the first two groups (cluster "easy") succeed more than the last two
REWARDS = [1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0]
IDS = np.repeat(np.arange(4), 4)
CLUSTERS = ["easy"] * 8 + ["hard"] * 8
#: tokens per response, uneven
TOKENS = [3, 9, 1, 4, 7, 2, 5, 5, 8, 1, 6, 3, 2, 9, 4, 4]
EVERY_INPUT = {"clusters": CLUSTERS, "token_counts": TOKENS, "prompt_keys": IDS}


def test_the_trait_table_covers_every_registered_estimator():
    assert sorted({name for name, _, _ in TRAITS}) == CLASS_NAMES


@pytest.mark.parametrize(("name", "options", "traits"), TRAITS)
def test_traits_of_every_estimator(name, options, traits):
    est = ebpo.make_estimator(name, **options)
    assert (est.uses_prior, est.uses_clusters, est.uses_token_counts) == (traits[0], *traits[2:])


@pytest.mark.parametrize(("name", "options", "traits"), TRAITS)
def test_an_estimator_with_a_prior_reports_it(name, options, traits):
    res = ebpo.make_estimator(name, **options)(REWARDS, IDS, **EVERY_INPUT)
    assert ("prior_mean" in res.metrics) == traits[0]
    assert ("shrinkage_mean" in res.metrics) == traits[0]


@pytest.mark.parametrize(("name", "options", "traits"), TRAITS)
def test_a_call_changes_the_state_of_the_stateful_estimators_only(name, options, traits):
    est = ebpo.make_estimator(name, **options)
    before = json.dumps(est.state_dict())
    est(REWARDS, IDS, **EVERY_INPUT, update=False)
    assert json.dumps(est.state_dict()) == before
    est(REWARDS, IDS, **EVERY_INPUT)
    assert (json.dumps(est.state_dict()) != before) == traits[1]


@pytest.mark.parametrize(("name", "options", "traits"), TRAITS)
def test_a_state_holds_the_declared_keys_and_loads_back(name, options, traits):
    """state_keys (what a load checks a state against) is what state_dict writes, before and
    after a call; a stateless estimator writes its name alone."""
    est = ebpo.make_estimator(name, **options)
    for _ in range(2):
        state = est.state_dict()
        declared = ["options", *est.state_keys] if est.state_keys else []
        assert list(state) == ["estimator", *declared]
        ebpo.make_estimator(name, **options).load_state_dict(json.loads(json.dumps(state)))
        est(REWARDS, IDS, **EVERY_INPUT)


@pytest.mark.parametrize(("name", "options", "traits"), TRAITS)
def test_uses_clusters_is_whether_the_estimator_reads_them(name, options, traits):
    tokens = {"token_counts": TOKENS} if traits[3] else {}
    tokens["prompt_keys"] = IDS
    with_clusters = ebpo.make_estimator(name, **options)(REWARDS, IDS, clusters=CLUSTERS, **tokens)
    if traits[2]:
        with pytest.raises(ValueError, match="clusters is required"):
            ebpo.make_estimator(name, **options)(REWARDS, IDS, **tokens)
        return
    without = ebpo.make_estimator(name, **options)(REWARDS, IDS, **tokens)
    torch.testing.assert_close(with_clusters.advantages, without.advantages, rtol=0, atol=0)


@pytest.mark.parametrize(("name", "options", "traits"), TRAITS)
def test_uses_token_counts_is_whether_the_estimator_reads_them(name, options, traits):
    clusters = {"clusters": CLUSTERS} if traits[2] else {}
    clusters["prompt_keys"] = IDS
    with_tokens = ebpo.make_estimator(name, **options)(
        REWARDS, IDS, token_counts=TOKENS, **clusters
    )
    if traits[3]:
        with pytest.raises(ValueError, match="token_counts is required"):
            ebpo.make_estimator(name, **options)(REWARDS, IDS, **clusters)
        equal = ebpo.make_estimator(name, **options)(
            REWARDS, IDS, token_counts=[4] * len(REWARDS), **clusters
        )
        assert not torch.allclose(with_tokens.advantages, equal.advantages)
        return
    without = ebpo.make_estimator(name, **options)(REWARDS, IDS, **clusters)
    torch.testing.assert_close(with_tokens.advantages, without.advantages, rtol=0, atol=0)


@pytest.mark.parametrize(("name", "options", "traits"), TRAITS)
def test_uses_prompt_keys_is_whether_the_estimator_reads_them(name, options, traits):
    est = ebpo.make_estimator(name, **options)
    assert est.uses_prompt_keys == (name in PROMPT_KEY_USERS)
    inputs = {"clusters": CLUSTERS, "token_counts": TOKENS}
    if est.uses_prompt_keys:
        with pytest.raises(ValueError, match="prompt_keys is required"):
            est(REWARDS, IDS, **inputs)
        return
    torch.testing.assert_close(
        est(REWARDS, IDS, **inputs, prompt_keys=[f"p{i}" for i in IDS]).advantages,
        ebpo.make_estimator(name, **options)(REWARDS, IDS, **inputs).advantages,
        rtol=0,
        atol=0,
    )


def test_per_cluster_priors_change_the_baselines():
    """The clusters an estimator reads matter: one prior per cluster moves each group's target."""
    clustered = ebpo.make_estimator("ebpo", per_cluster=True, min_cluster_groups=1)
    pooled = ebpo.make_estimator("ebpo")
    a = clustered(REWARDS, IDS, clusters=CLUSTERS).baselines
    b = pooled(REWARDS, IDS).baselines
    assert not torch.allclose(a, b)


# ---------------------------------------------------------------------- the state lock (issue #21)
@pytest.mark.parametrize(("name", "options", "traits"), TRAITS)
def test_copies_and_pickles_get_their_own_lock_and_continue_identically(name, options, traits):
    """TRL's resume and verl's state store copy estimators: deepcopy and pickle must keep working
    (a lock cannot be copied) and the copy must continue exactly as the original."""
    extra = EVERY_INPUT
    est = ebpo.make_estimator(name, **options)
    est(REWARDS, IDS, **extra)
    copies = [copy.deepcopy(est), pickle.loads(pickle.dumps(est)), copy.copy(est)]
    for twin in copies:
        assert twin._state_lock is not est._state_lock
        assert twin.state_dict() == est.state_dict()
    expected = est(REWARDS[::-1], IDS, **extra).advantages
    for twin in copies[:2]:
        torch.testing.assert_close(twin(REWARDS[::-1], IDS, **extra).advantages, expected)
        assert twin.state_dict() == est.state_dict()


class _Counter(ebpo.AdvantageEstimator):
    """A user's stateful estimator: its state methods take the estimator's lock, as documented."""

    def __init__(self, *, eps: float = 1e-6, nan_policy: str = "raise") -> None:
        super().__init__(eps=eps, nan_policy=nan_policy)
        self.reset()

    def reset(self) -> None:
        with self._state_lock:
            self.seen = 0

    def state_dict(self):
        with self._state_lock:
            return {"estimator": self.name, "seen": self.seen}

    def load_state_dict(self, state):
        with self._state_lock:
            self.seen = state["seen"]

    def _compute(self, batch, *, update):
        if update:
            self.seen += batch.num_valid
        zeros = torch.zeros_like(batch.rewards)
        return zeros, zeros, zeros, {}


@pytest.mark.parametrize(
    "name", ["a user's subclass", "ebpo", "ebpo_bb", "jspo_plus_plus", "spo", "krpo"]
)
@pytest.mark.parametrize("method", ["state_dict", "load_state_dict", "reset", "__call__"])
def test_state_methods_and_calls_wait_for_the_lock(method, name):
    """The state_dict / load_state_dict / reset of every stateful estimator (and every call)
    wait for the estimator's lock."""
    est = _Counter() if name == "a user's subclass" else ebpo.make_estimator(name)
    saved = est.state_dict()
    call = {
        "state_dict": lambda: est.state_dict(),
        "load_state_dict": lambda: est.load_state_dict(saved),
        "reset": lambda: est.reset(),
        "__call__": lambda: est([1.0, 0.0], [0, 0], prompt_keys=[0, 0]),
    }[method]
    done = threading.Event()
    worker = threading.Thread(target=lambda: (call(), done.set()))
    with est._state_lock:
        worker.start()
        assert not done.wait(0.2), f"{method} ran while another thread held the state lock"
    worker.join(5)
    assert done.is_set()


#: estimators whose later calls depend on the earlier ones (``carries_state``) and whose state
#: forgets per call (``decays_per_call``), beyond their defaults in TRAITS
STATE_CASES = [
    *((name, options) for name, options, _ in TRAITS),
    ("ebpo", {"prior": "ema", "half_life": 2.0}),
    ("jspo_plus_plus", {"smooth_coef": 0.9}),
]
CARRIES = {("ebpo", ()), ("ebpo", (("per_cluster", True),)), ("ebpo_bb", ())}
CARRIES |= {("ebpo_bb", (("per_cluster", True),)), ("ebpo", (("half_life", 2.0), ("prior", "ema")))}
CARRIES |= {("jspo_plus_plus", (("smooth_coef", 0.9),)), ("spo", ()), ("krpo", ())}
DECAYS = {
    ("ebpo", (("half_life", 2.0), ("prior", "ema"))),
    ("jspo_plus_plus", (("smooth_coef", 0.9),)),
    ("krpo", ()),
}


@pytest.mark.parametrize(("name", "options"), STATE_CASES)
def test_carries_state_is_whether_an_earlier_call_changes_a_later_one(name, options):
    """What a resumed run loses without the checkpointed state: run a second batch after a first
    one, and alone; the advantages differ exactly when ``carries_state``."""
    key = (name, tuple(sorted(options.items())))
    first = [1.0] * 13 + [0.0] * 3  # another batch before: mostly successes
    kwargs = EVERY_INPUT
    warm = ebpo.make_estimator(name, **options)
    for _ in range(200):  # JSPO++'s time-weighted EMA all but forgets its first ~50 steps
        warm(first, IDS, **kwargs)
    after = warm(REWARDS, IDS, **kwargs).advantages
    alone = ebpo.make_estimator(name, **options)(REWARDS, IDS, **kwargs).advantages
    assert warm.carries_state == (key in CARRIES)
    assert (not torch.equal(after, alone)) == warm.carries_state
    assert warm.decays_per_call == (key in DECAYS)
    assert warm.reward_range == ((0.0, 1.0) if name == "ebpo_bb" else None)
