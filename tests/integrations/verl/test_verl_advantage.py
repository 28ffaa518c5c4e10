"""verl's own compute_advantage with adv_estimator=ebpo/ebpo_bb/jspo/jspo_plus_plus vs the core estimators."""

from __future__ import annotations

import importlib
import json

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from tests.estimators.counting import count_estimators
from tests.integrations.verl.conftest import verl_batch

import ebpo

pytestmark = pytest.mark.verl

GROUPS = [4, 4, 3, 1, 4, 2, 5, 4, 4, 3]  # uneven, with a singleton


def _compute(data, name, **algorithm):
    from verl.trainer.ppo.ray_trainer import compute_advantage

    config = OmegaConf.create({"adv_estimator": name, **algorithm})
    return compute_advantage(data, adv_estimator=name, config=config).batch


def _reference(estimator, rewards, uids, valid, mask):
    """The core estimator on the non-padding rows ONLY (padding dropped, not masked), broadcast."""
    res = estimator(torch.tensor(rewards[valid], dtype=torch.float32), list(uids[valid]))
    expected = torch.zeros_like(mask)
    expected[torch.from_numpy(valid)] = res.advantages[:, None] * mask[torch.from_numpy(valid)]
    return expected


@pytest.mark.parametrize("continuous", [False, True])
def test_ebpo_matches_core_over_steps(continuous):
    # Three steps with fresh uids: the running (history) prior must evolve exactly as the core's.
    core = ebpo.make_estimator("ebpo", eps=1e-6, normalize="batch")
    for step in range(3):
        data, rewards, uids, valid = verl_batch(GROUPS, seed=step, continuous=continuous, step=step)
        out = _compute(data, "ebpo")
        mask = data.batch["response_mask"]
        expected = _reference(core, rewards, uids, valid, mask)
        torch.testing.assert_close(out["advantages"], expected, rtol=1e-6, atol=1e-7)
        assert torch.equal(out["returns"], out["advantages"])
        assert (out["advantages"][torch.from_numpy(~valid)] == 0).all()  # padding rows
        assert (out["advantages"][mask == 0] == 0).all()  # beyond each response
    # The prior is non-trivial by now, so the comparison above was not between two GRPOs.
    assert core.global_prior.rewards.count == 3 * sum(GROUPS)


def test_padding_rows_do_not_touch_the_prior():
    data, rewards, uids, valid = verl_batch(GROUPS, padding=0, seed=5)
    padded, *_ = verl_batch(GROUPS, padding=40, seed=5)
    a = _compute(data, "ebpo", ebpo={"prior": "history"})
    from ebpo.integrations.verl.state import STORE

    clean = STORE.state_dict()["estimators"][0]["state"]["global"]
    STORE.clear()
    _compute(padded, "ebpo", ebpo={"prior": "history"})
    with_padding = STORE.state_dict()["estimators"][0]["state"]["global"]
    # Same statistics (row order differs, so equal up to float rounding), counts exactly equal.
    for stat in ("rewards", "group_means", "group_variances"):
        assert with_padding[stat]["count"] == clean[stat]["count"]
        assert with_padding[stat] == pytest.approx(clean[stat], rel=1e-12, abs=1e-15)
    assert a["advantages"].abs().sum() > 0


def test_norm_adv_by_std_false_centres_only_and_explicit_option_wins():
    data, rewards, uids, valid = verl_batch(GROUPS, seed=1)
    mask = data.batch["response_mask"]
    centred = _compute(data, "ebpo", norm_adv_by_std_in_grpo=False, ebpo={"prior": "batch"})[
        "advantages"
    ]
    ref = _reference(
        ebpo.make_estimator("ebpo", prior="batch", normalize="center"), rewards, uids, valid, mask
    )
    torch.testing.assert_close(centred, ref, rtol=1e-6, atol=1e-7)
    explicit = _compute(
        data, "ebpo", norm_adv_by_std_in_grpo=False, ebpo={"prior": "batch", "normalize": "batch"}
    )
    ref = _reference(
        ebpo.make_estimator("ebpo", prior="batch", normalize="batch"), rewards, uids, valid, mask
    )
    torch.testing.assert_close(explicit["advantages"], ref, rtol=1e-6, atol=1e-7)
    assert not torch.allclose(explicit["advantages"], centred)


def test_epsilon_read_from_algorithm_config():
    data, rewards, uids, valid = verl_batch([2, 2, 2], padding=1, seed=2)
    out = _compute(data, "ebpo", epsilon=0.5, ebpo={"prior": "batch"})["advantages"]
    ref = _reference(
        ebpo.make_estimator("ebpo", prior="batch", eps=0.5),
        rewards,
        uids,
        valid,
        data.batch["response_mask"],
    )
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["ebpo_bb", "jspo"])
def test_other_estimators_match_core(name):
    core = ebpo.make_estimator(name)
    for step in range(2):
        data, rewards, uids, valid = verl_batch(GROUPS, seed=10 + step, step=step)
        out = _compute(data, name)["advantages"]
        torch.testing.assert_close(
            out,
            _reference(core, rewards, uids, valid, data.batch["response_mask"]),
            rtol=1e-6,
            atol=1e-7,
        )


#: the two ways to ask for JSPO++'s smoothing: our option section, or the JSPO authors' own key.
#: 0.999 (EMA base weight 0.999, its cap) smooths visibly within a few steps; the authors' 0.99
#: all but forgets the first steps (see ebpo.estimators.functional.time_weighted_ema_decay).
SMOOTH_COEF = 0.999
SMOOTHING_CONFIGS = {
    "ebpo.smooth_coef": {"ebpo": {"smooth_coef": SMOOTH_COEF}},
    "js_smooth_coef": {"js_smooth_coef": SMOOTH_COEF},
}


@pytest.mark.parametrize("continuous", [False, True])
@pytest.mark.parametrize("how", sorted(SMOOTHING_CONFIGS))
def test_jspo_plus_plus_matches_core_over_steps(how, continuous):
    """Four steps of shuffled rows, uneven groups (a singleton) and padding rows, fresh uids each
    step: the smoothed λ and mean carried by the store evolve exactly as the core estimator's."""
    core = ebpo.JSPOPlusPlus(smooth_coef=SMOOTH_COEF)
    unsmoothed = ebpo.JSPOPlusPlus()
    for step in range(4):
        data, rewards, uids, valid = verl_batch(
            GROUPS, seed=20 + step, continuous=continuous, step=step
        )
        mask = data.batch["response_mask"]
        out = _compute(data, "jspo_plus_plus", **SMOOTHING_CONFIGS[how])
        expected = _reference(core, rewards, uids, valid, mask)
        torch.testing.assert_close(out["advantages"], expected, rtol=1e-6, atol=1e-7)
        assert torch.equal(out["returns"], out["advantages"])
        assert (out["advantages"][torch.from_numpy(~valid)] == 0).all()  # padding rows
        assert (out["advantages"][mask == 0] == 0).all()  # beyond each response
        without_smoothing = _reference(unsmoothed, rewards, uids, valid, mask)
    # Not a comparison of two unsmoothed estimators: by step 4 the smoothing moved the advantages.
    assert (out["advantages"] - without_smoothing).abs().max() > 1e-3
    from ebpo.integrations.verl.state import STORE

    (entry,) = STORE.state_dict()["estimators"]
    assert entry["name"] == "jspo_plus_plus" and entry["options"]["smooth_coef"] == SMOOTH_COEF
    assert entry["state"]["steps"] == 4
    assert entry["state"] == core.state_dict()  # same rows in the same order: bit for bit


def test_js_smooth_coef_is_read_only_by_jspo_plus_plus_and_loses_to_the_ebpo_section():
    from ebpo.integrations.verl.advantage import resolve_options

    def smoothing(name, **algorithm):
        return resolve_options(name, OmegaConf.create(algorithm))[0].get("smooth_coef")

    assert smoothing("jspo_plus_plus") is None  # the estimator's default (0: no smoothing)
    assert smoothing("jspo_plus_plus", js_smooth_coef=0.99) == 0.99
    assert smoothing("jspo_plus_plus", js_smooth_coef=0.99, ebpo={"smooth_coef": 0.5}) == 0.5
    assert smoothing("jspo", js_smooth_coef=0.99) is None  # not an option of jspo: not passed
    data, *_ = verl_batch(GROUPS, seed=30)
    _compute(data, "jspo", js_smooth_coef=0.99)  # and jspo does not choke on the authors' key
    with pytest.raises(ValueError, match=r"smooth_coef must be a number in \[0, 1\]"):
        _compute(data, "jspo_plus_plus", js_smooth_coef=1.5)
    with pytest.raises(ValueError, match=r"'smoth_coef' .*did you mean 'smooth_coef'\?"):
        _compute(data, "jspo_plus_plus", ebpo={"smoth_coef": 0.9})


def test_running_prior_persists_between_calls_per_configuration():
    data, *_ = verl_batch(GROUPS, seed=3)
    first = _compute(data, "ebpo", ebpo={"prior": "batch"})["advantages"].clone()
    again = _compute(data, "ebpo", ebpo={"prior": "batch"})["advantages"]
    assert torch.equal(first, again)  # batch prior: no memory
    h1 = _compute(data, "ebpo", ebpo={"prior": "history", "within_variance": "within"})[
        "advantages"
    ].clone()
    other, *_ = verl_batch([4] * 6, seed=99)
    _compute(other, "ebpo", ebpo={"prior": "history", "within_variance": "within"})
    h2 = _compute(data, "ebpo", ebpo={"prior": "history", "within_variance": "within"})[
        "advantages"
    ]
    assert not torch.allclose(h1, h2)  # history prior: the second batch moved it
    from ebpo.integrations.verl.state import STORE

    assert len(STORE) == 2  # one estimator per configuration


def test_the_estimator_is_built_once_per_run_not_per_call(monkeypatch):
    """Three advantage calls with one configuration build one estimator: the store's (before: four,
    one thrown away on every call to check for per-cluster priors)."""
    built = count_estimators(monkeypatch)
    for step in range(3):
        data, *_ = verl_batch(GROUPS, seed=step, step=step)
        _compute(data, "ebpo")
    assert built == ["ebpo"]


def test_bad_options_raise_naming_the_key():
    data, *_ = verl_batch([2, 2])
    with pytest.raises(ValueError, match="bogus"):
        _compute(data, "ebpo", ebpo={"bogus": 1})
    with pytest.raises(ValueError, match="per_cluster"):
        _compute(data, "ebpo", ebpo={"per_cluster": True})
    with pytest.raises(ValueError, match="prior"):
        _compute(data, "ebpo", ebpo={"prior": "forever"})
    with pytest.raises(ValueError, match="within_variance"):
        _compute(data, "ebpo_bb", ebpo={"within_variance": "pooled"})  # not an ebpo_bb option


def test_metrics_reach_jsonl_and_the_trainer_metrics_dict(tmp_path):
    from verl.trainer.ppo.ray_trainer import compute_advantage

    data, *_ = verl_batch(GROUPS, seed=4)
    path = tmp_path / "m.jsonl"
    config = OmegaConf.create({"adv_estimator": "ebpo", "ebpo": {"metrics_file": str(path)}})
    # Stand-in for verl's trainer: a method of a `verl.trainer.*` module holding `metrics`.
    namespace = {
        "__name__": "verl.trainer.ppo.fake_trainer",
        "compute_advantage": compute_advantage,
    }
    exec(
        "class Trainer:\n"
        "    global_steps = 17\n"
        "    def _compute_advantage(self, data, config):\n"
        "        metrics = {}\n"
        "        compute_advantage(data, adv_estimator='ebpo', config=config)\n"
        "        return metrics\n",
        namespace,
    )
    metrics = namespace["Trainer"]()._compute_advantage(data, config)
    assert 0 <= metrics["ebpo/shrinkage_mean"] <= 1 and metrics["ebpo/num_groups"] == len(GROUPS)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert (
        len(records) == 1 and records[0]["global_step"] == 17 and records[0]["estimator_step"] == 1
    )
    assert records[0]["ebpo/shrinkage_mean"] == pytest.approx(metrics["ebpo/shrinkage_mean"])
    # Outside a verl trainer nothing is injected anywhere, but the JSONL still grows.
    compute_advantage(data, adv_estimator="ebpo", config=config)
    assert len(path.read_text().splitlines()) == 2


def test_registration_is_idempotent_and_never_shadows_foreign_estimators():
    from verl.trainer.ppo import core_algos

    import ebpo.integrations.verl.advantage as advantage
    import ebpo.integrations.verl.plugin as plugin

    importlib.reload(plugin)
    importlib.reload(advantage)  # new function objects under the same names
    importlib.reload(plugin)
    names = tuple(advantage.plugin_names())
    assert {
        "ebpo",
        "ebpo_batch",
        "ebpo_bb",
        "jspo",
        "jspo_plus_plus",
        "grpo_bn",
        "spo",
        "krpo",
    } <= set(names)
    assert set(advantage.FUNCTIONS) == set(names)
    assert all(core_algos.get_adv_estimator_fn(n) is advantage.FUNCTIONS[n] for n in names)
    assert len({id(fn) for fn in advantage.FUNCTIONS.values()}) == len(
        names
    )  # one function per name

    saved = core_algos.ADV_ESTIMATOR_REGISTRY["jspo"]
    core_algos.ADV_ESTIMATOR_REGISTRY["jspo"] = lambda **kw: None  # someone else's estimator
    try:
        with pytest.raises(ValueError, match="not ebpo's"):
            plugin.register()
    finally:
        core_algos.ADV_ESTIMATOR_REGISTRY["jspo"] = saved


def test_every_name_but_verls_own_is_registered_and_verls_are_never_shadowed():
    """``algorithm.adv_estimator`` takes every name ``ebpo.make_estimator`` takes (``ebpo_batch``
    included), but the names verl computes itself, which stay verl's."""
    from verl.trainer.ppo import core_algos

    import ebpo.integrations.verl.advantage as advantage
    import ebpo.integrations.verl.plugin  # noqa: F401

    verl_names = {e.value for e in core_algos.AdvantageEstimator}
    assert verl_names == advantage.VERL_OWN_NAMES
    for name in ebpo.available_estimators():
        fn = (
            core_algos.get_adv_estimator_fn(name)
            if name in core_algos.ADV_ESTIMATOR_REGISTRY
            else None
        )
        if name in advantage.VERL_OWN_NAMES:
            assert fn is None or fn.__module__.startswith("verl."), name
        else:
            assert fn is advantage.FUNCTIONS[name], name
            assert fn.__name__ == f"compute_{name}_advantage"


def test_nonempty_rows_equals_full_row_sum():
    from ebpo.integrations.verl.advantage import nonempty_rows

    gen = torch.Generator().manual_seed(0)
    mask = (torch.rand(50, 9, generator=gen) < 0.5).float()  # arbitrary layouts, incl. left padding
    mask[::7] = 0  # padding rows
    mask[3, :] = 0
    mask[3, -1] = 1  # only the last token
    assert torch.equal(nonempty_rows(mask), mask.sum(-1) > 0)
    right_padded = (torch.arange(9)[None] < torch.tensor([0, 1, 9, 4])[:, None]).float()
    assert nonempty_rows(right_padded).tolist() == [False, True, True, True]


def test_thread_setting_is_restored(monkeypatch):
    previous = torch.get_num_threads()
    seen = []
    import ebpo.integrations.verl.advantage as advantage

    real_get = advantage.STORE.get

    class Spy:  # the estimator, recording the thread count of each call
        def __init__(self, est):
            self.est = est

        def __getattr__(self, name):
            return getattr(self.est, name)

        def __call__(self, *args, **kwargs):
            seen.append(torch.get_num_threads())
            return self.est(*args, **kwargs)

    def spy(name, options):
        return Spy(real_get(name, options))

    monkeypatch.setattr(advantage.STORE, "get", spy)
    torch.set_num_threads(2)
    try:
        data, *_ = verl_batch([2, 2])
        _compute(data, "ebpo")
        assert seen == [1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(previous)


def test_metrics_side_channel_inside_verls_real_trainer_method(tmp_path, monkeypatch):
    """verl 0.9.1's own ``PPOTrainer._compute_advantage`` (TransferQueue faked): the statistics
    land in its ``metrics`` dict (→ Tracking backends) and the JSONL carries its global step."""
    from types import SimpleNamespace

    from tensordict import TensorDict
    from verl.trainer.ppo.v1 import trainer_base

    data, rewards, uids, valid = verl_batch(GROUPS, padding=0, seed=8)
    mask, scores = data.batch["response_mask"], data.batch["token_level_rewards"]
    lengths = mask.sum(-1).long()
    int_uids = torch.tensor(np.unique(uids, return_inverse=True)[1])
    nested_mask = torch.nested.as_nested_tensor(
        [mask[i, : lengths[i]] for i in range(len(mask))], layout=torch.jagged
    )
    put = {}

    class Stored:  # what tq.kv_batch_get returns: nested fields + to_padded_tensor()
        def __getitem__(self, key):
            assert key == "response_mask"
            return nested_mask

        def to_padded_tensor(self):
            return TensorDict(
                {"rm_scores": scores, "response_mask": mask, "uid": int_uids}, batch_size=len(mask)
            )

    fake_tq = SimpleNamespace(
        kv_batch_get=lambda keys, partition_id, select_fields: Stored(),
        kv_batch_put=lambda keys, partition_id, fields: put.update(fields=fields) or "stored",
    )
    monkeypatch.setattr(trainer_base, "tq", fake_tq)
    config = OmegaConf.create(
        {
            "algorithm": {
                "adv_estimator": "ebpo",
                "use_kl_in_reward": False,
                "gamma": 1.0,
                "lam": 1.0,
                # a trainer at step 42 of a fresh process is a resumed one: see test_verl_guards
                "ebpo": {
                    "metrics_file": str(tmp_path / "m.jsonl"),
                    "on_missing_state": "start_empty",
                },
            },
            "actor_rollout_ref": {"rollout": {"n": 4}},
        }
    )
    trainer = SimpleNamespace(config=config, global_steps=42)

    class Meta(SimpleNamespace):  # KVBatchMeta: keys, partition_id, len()
        def __len__(self):
            return len(self.keys)

    metrics: dict = {}
    meta = Meta(keys=[f"k{i}" for i in range(len(mask))], partition_id="train")
    assert trainer_base.PPOTrainer._compute_advantage(trainer, meta, metrics) == "stored"
    assert metrics["ebpo/num_groups"] == len(GROUPS) and "ebpo/shrinkage_mean" in metrics
    record = json.loads((tmp_path / "m.jsonl").read_text())
    assert record["global_step"] == 42
    # And the advantages verl writes back are the core's.
    expected = _reference(ebpo.make_estimator("ebpo"), rewards, uids, valid, mask)
    written = put["fields"]["advantages"]
    for i in range(len(mask)):
        torch.testing.assert_close(written[i], expected[i, : lengths[i]], rtol=1e-6, atol=1e-7)


def test_no_trainer_metrics_dict_warns_once_naming_where_metrics_go(tmp_path, caplog):
    """Outside any verl trainer (a custom loop, an unknown trainer) the statistics cannot reach the
    trainer's loggers: one WARNING per process says so and names the JSONL that still gets them."""
    import logging

    from ebpo.integrations.verl.state import METRICS_FILENAME, STORE

    data, *_ = verl_batch(GROUPS, seed=6)
    STORE.run_dir = str(tmp_path)  # as the checkpoint callback sets it
    with caplog.at_level(logging.WARNING):
        _compute(data, "ebpo")
        _compute(data, "ebpo")
    warnings = [r for r in caplog.records if "no verl trainer `metrics` dict" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    assert str(tmp_path / METRICS_FILENAME) in warnings[0].getMessage()
    assert len((tmp_path / METRICS_FILENAME).read_text().splitlines()) == 2  # and they do go there

    STORE.clear()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        _compute(data, "ebpo", ebpo={"log_to_trainer": False})  # the user opted out: nothing to say
        assert not caplog.records
        _compute(data, "ebpo")  # no file configured either: the warning says how to get one
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "no file either" in warning and "+algorithm.ebpo.metrics_file" in warning


def _experimental_trainer(tmp_path, rewards, steps=7):
    """The state ``SeparateRayPPOTrainer._fit_compute_advantage`` reads (fully-async, one-step-off)."""
    from types import SimpleNamespace

    config = OmegaConf.create(
        {
            "algorithm": {
                "adv_estimator": "ebpo",
                "use_kl_in_reward": False,
                "gamma": 1.0,
                "lam": 1.0,
                "ebpo": {"on_missing_state": "start_empty"},  # step 7 of a fresh process
            },
            "actor_rollout_ref": {"rollout": {"n": 4}},
            "trainer": {"default_local_dir": str(tmp_path / "run")},
        }
    )
    return SimpleNamespace(
        config=config,
        metrics={"training/global_step": steps},
        timing_raw={},
        reward_tensor=rewards,
        reward_extra_infos_dict={},
        global_steps=steps,
    )


def test_metrics_reach_the_experimental_trainers(tmp_path, caplog):
    """verl's experimental trainers (``verl.experimental``: fully-async, one-step-off) keep their
    metrics in ``self.metrics``; the statistics land there, and — as these trainers never build
    the checkpoint callback — the JSONL goes to their ``trainer.default_local_dir``."""
    import logging

    from verl.experimental.separation.ray_trainer import SeparateRayPPOTrainer

    from ebpo.integrations.verl.state import METRICS_FILENAME

    data, rewards, uids, valid = verl_batch(GROUPS, seed=9)
    trainer = _experimental_trainer(tmp_path, data.batch["token_level_rewards"].clone())
    with caplog.at_level(logging.WARNING):
        out = SeparateRayPPOTrainer._fit_compute_advantage(trainer, data)
    assert (
        trainer.metrics["ebpo/num_groups"] == len(GROUPS)
        and "ebpo/shrinkage_mean" in trainer.metrics
    )
    assert not [r for r in caplog.records if "metrics` dict" in r.getMessage()]
    record = json.loads((tmp_path / "run" / METRICS_FILENAME).read_text())
    assert record["global_step"] == 7 and record["ebpo/num_groups"] == len(GROUPS)
    expected = _reference(
        ebpo.make_estimator("ebpo"), rewards, uids, valid, data.batch["response_mask"]
    )
    torch.testing.assert_close(out.batch["advantages"], expected, rtol=1e-6, atol=1e-7)


def test_metrics_reach_an_out_of_tree_trainer_subclass():
    """A recipe's trainer outside verl's package (e.g. verl's ``recipe/dapo``) that subclasses
    ``RayPPOTrainer`` is recognised by its class, not its module name."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer, compute_advantage

    data, *_ = verl_batch(GROUPS, seed=10)
    namespace = {
        "__name__": "recipe.dapo.dapo_ray_trainer",
        "compute_advantage": compute_advantage,
        "RayPPOTrainer": RayPPOTrainer,
        "OmegaConf": OmegaConf,
    }
    exec(
        "class RayDAPOTrainer(RayPPOTrainer):\n"
        "    def fit_step(self, data):\n"
        "        metrics = {}\n"
        "        config = OmegaConf.create({'adv_estimator': 'ebpo'})\n"
        "        compute_advantage(data, adv_estimator='ebpo', config=config)\n"
        "        return metrics\n",
        namespace,
    )
    trainer = object.__new__(namespace["RayDAPOTrainer"])  # no Ray, no workers: only the method
    metrics = trainer.fit_step(data)
    assert metrics["ebpo/num_groups"] == len(GROUPS)


def _authors_batch_prior(rewards, uids, eps=1e-6):
    """The authors' released EBPO advantage, written from its formulas (spec, "Where the statistics
    live" and "Conventions"): statistics of THIS batch only; μ = mean of the group means;
    σ² = population variance of all rewards; τ² = population variance of the group means;
    S_m = (σ²/n_m) / (σ²/n_m + τ²) (1 when the denominator ≤ eps); V_m = (1 − S_m)·r̄_m + S_m·μ;
    a = r − V; Â = (a − mean a) / (std a + eps) with the unbiased std."""
    groups = {}
    for reward, uid in zip(rewards, uids, strict=True):
        groups.setdefault(uid, []).append(float(reward))
    means = {uid: sum(v) / len(v) for uid, v in groups.items()}
    mu = sum(means.values()) / len(means)
    tau2 = sum((m - mu) ** 2 for m in means.values()) / len(means)
    overall = sum(map(float, rewards)) / len(rewards)
    sigma2 = sum((float(r) - overall) ** 2 for r in rewards) / len(rewards)
    raw = []
    for reward, uid in zip(rewards, uids, strict=True):
        n = len(groups[uid])
        denominator = sigma2 / n + tau2
        shrink = 1.0 if denominator <= eps else (sigma2 / n) / denominator
        raw.append(float(reward) - ((1 - shrink) * means[uid] + shrink * mu))
    mean = sum(raw) / len(raw)
    std = (sum((a - mean) ** 2 for a in raw) / (len(raw) - 1)) ** 0.5
    return torch.tensor([(a - mean) / (std + eps) for a in raw], dtype=torch.float64)


@pytest.mark.parametrize("seed", [10, 11, 16, 17])  # batches where the two means of μ differ
def test_batch_prior_recipes_reproduce_the_authors_formula_on_uneven_groups(seed):
    """The EBPO recipes' estimator options, through verl's compute_advantage, equal the authors'
    batch-prior EBPO on uneven groups with padding rows — where μ = mean of group means differs
    from the mean of all rewards."""
    from ebpo.commands.verl.launcher import algorithm_overrides
    from ebpo.integrations.verl.recipes import recipe_overrides

    algorithm = algorithm_overrides(recipe_overrides("ebpo_topic"))
    data, rewards, uids, valid = verl_batch(
        [4, 2, 1, 4, 3, 4, 2, 4], seed=seed, continuous=seed % 2 == 1
    )
    got = _compute(
        data,
        algorithm["adv_estimator"],
        **{k: v for k, v in algorithm.items() if k != "adv_estimator"},
    )
    mask = data.batch["response_mask"]
    expected = torch.zeros_like(mask)
    expected[torch.from_numpy(valid)] = (
        _authors_batch_prior(rewards[valid], list(uids[valid])).to(mask.dtype)[:, None]
        * mask[torch.from_numpy(valid)]
    )
    torch.testing.assert_close(got["advantages"], expected, rtol=1e-5, atol=1e-6)
    # Not a vacuous check: on these batches the two choices of μ give different advantages.
    rewards_mean = _compute(data, "ebpo", ebpo={"prior": "batch"})["advantages"]
    assert (rewards_mean - expected).abs().max() > 1e-4


# ---------------------------------------------------------------------- issue #21 item 13
def _rpp_batch(seed: int, dtype: torch.dtype):
    """verl-shaped tensors for REINFORCE++: uneven groups (singletons included), random response
    lengths, 0/1 or continuous outcome rewards on the last token, and padding rows (all-zero mask)
    that either have a uid of their own or share the uid of a real group."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 7, size=int(rng.integers(2, 12)))
    uids = [f"uid-{seed}-{k}" for k, size in enumerate(sizes) for _ in range(size)]
    lengths = list(rng.integers(1, 33, size=len(uids)))
    for j in range(int(rng.integers(1, 5))):  # padding rows
        uids.append(uids[int(rng.integers(len(uids)))] if rng.random() < 0.5 else f"pad-{j}")
        lengths.append(0)
    order = rng.permutation(len(uids))
    uids = np.array(uids, dtype=object)[order]
    lengths = torch.tensor(lengths)[order]
    n, length = len(uids), 32
    continuous = seed % 2 == 1
    scores = torch.from_numpy(rng.normal(size=n) if continuous else (rng.random(n) < 0.5) * 1.0)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).to(dtype)
    token_rewards = torch.zeros(n, length, dtype=dtype)
    rows = lengths > 0
    token_rewards[rows, lengths[rows] - 1] = scores[rows].to(dtype)
    return token_rewards, mask, uids


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("seed", range(12))
def test_reinforce_pp_verl_equals_verls_reinforce_plus_plus_baseline(seed, dtype):
    """The variant reinforce_pp_verl (whiten="tokens") on the outcome rewards and token counts
    gives verl's compute_reinforce_plus_plus_baseline_outcome_advantage on every token; the
    default (whitened over responses) differs by up to ~1.5 on the same batch."""
    from verl.trainer.ppo.core_algos import (
        compute_reinforce_plus_plus_baseline_outcome_advantage as verl_rpp,
    )

    token_rewards, mask, uids = _rpp_batch(seed, dtype)
    expected, returns = verl_rpp(token_rewards.clone(), mask, uids)

    est = ebpo.make_estimator("reinforce_pp_verl")
    # verl counts a padding row in its group's mean and size and leaves it out of the whitening
    # only: pass it unmasked, with its 0 tokens.
    res = est(token_rewards.sum(-1), uids, token_counts=mask.sum(-1))
    assert res.advantages.dtype == dtype
    got = res.advantages[:, None] * mask
    tolerance = 1e-6 if dtype == torch.float32 else 1e-12
    assert float((got - expected).abs().max()) <= tolerance
    assert torch.equal(returns, expected)

    by_response = ebpo.make_estimator("reinforce_pp_baseline")(token_rewards.sum(-1), uids)
    assert float((by_response.advantages[:, None] * mask - expected).abs().max()) > 1e-3


def test_eps_defaults_to_the_estimators_own_unless_verl_sets_epsilon():
    """KRPO's reference in verl divides by √P + 1e-8; the others use verl's GRPO's 1e-6."""
    from ebpo.integrations.verl.advantage import resolve_options

    assert resolve_options("krpo", None)[0]["eps"] == 1e-8
    assert resolve_options("ebpo", None)[0]["eps"] == 1e-6
    assert resolve_options("krpo", {"epsilon": 1e-3})[0]["eps"] == 1e-3
