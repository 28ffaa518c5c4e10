"""A user's own estimator (tests/fixtures/user_estimator, outside the package) in verl: the
plug-in puts its name into verl's registry whether the user's module is imported before or after
it, verl's ``compute_advantage`` computes it by name as the core does, and its state goes into the
plug-in's state file and comes back exactly (a resume)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from tests.conftest import USER_ESTIMATOR_MODULE
from tests.integrations.verl.conftest import verl_batch

pytestmark = pytest.mark.verl

GROUPS = [4, 4, 3, 1, 4, 2, 5]  # uneven, with a singleton
PLUGIN = "ebpo.integrations.verl.plugin"
ROOT = Path(__file__).resolve().parents[3]


def _compute(data, name):
    from verl.trainer.ppo.ray_trainer import compute_advantage

    config = OmegaConf.create({"adv_estimator": name})
    return compute_advantage(data, adv_estimator=name, config=config).batch["advantages"]


def _reference(estimator, data, rewards, uids, valid):
    res = estimator(torch.tensor(rewards[valid], dtype=torch.float32), list(uids[valid]))
    mask = data.batch["response_mask"]
    expected = torch.zeros_like(mask)
    expected[torch.from_numpy(valid)] = res.advantages[:, None] * mask[torch.from_numpy(valid)]
    return expected


@pytest.mark.parametrize("order", ["plugin_first", "user_module_first"])
def test_verl_knows_the_users_names_in_either_import_order(order, monkeypatch, request):
    from verl.trainer.ppo import core_algos

    import ebpo.integrations.verl.plugin as plugin

    monkeypatch.setattr(
        core_algos, "ADV_ESTIMATOR_REGISTRY", dict(core_algos.ADV_ESTIMATOR_REGISTRY)
    )
    for name in ("running_mean", "group_centered"):
        core_algos.ADV_ESTIMATOR_REGISTRY.pop(name, None)
    if order == "plugin_first":  # the plug-in's listener registers the names as they come
        request.getfixturevalue("user_estimators")
    else:  # the plug-in, imported after the user's module, finds them in the registry
        request.getfixturevalue("user_estimators")
        for name in ("running_mean", "group_centered"):
            core_algos.ADV_ESTIMATOR_REGISTRY.pop(name, None)
        plugin.register()
    for name in ("running_mean", "group_centered"):
        assert core_algos.get_adv_estimator_fn(name).__name__ == f"compute_{name}_advantage"


def test_compute_advantage_runs_a_users_estimator_by_name_as_the_core(user_estimators):
    import ebpo.integrations.verl.plugin  # noqa: F401  (the plug-in, as verl loads it)

    core = {
        name: ebpo.make_estimator(name, nan_policy="mask")
        for name in ("running_mean", "group_centered")
    }
    for step in range(3):
        data, rewards, uids, valid = verl_batch(GROUPS, seed=step, step=step)
        for name, estimator in core.items():
            expected = _reference(estimator, data, rewards, uids, valid)
            torch.testing.assert_close(_compute(data, name), expected, rtol=1e-6, atol=1e-7)
    assert core["running_mean"].count == 3 * sum(GROUPS)  # the state moved: not a trivial check


def test_a_users_estimator_state_is_saved_and_resumes_exactly(
    user_estimators, clean_store, tmp_path
):
    import ebpo.integrations.verl.plugin  # noqa: F401

    batches = [verl_batch(GROUPS, seed=step, step=step)[0] for step in range(3)]
    _compute(batches[0], "running_mean")
    clean_store.save(tmp_path)
    saved = json.loads((tmp_path / "ebpo_estimator_state.json").read_text())
    (entry,) = saved["estimators"]
    assert entry["name"] == "running_mean" and entry["state"]["count"] == sum(GROUPS)
    uninterrupted = [_compute(batch, "running_mean") for batch in batches[1:]]

    clean_store.clear()  # a new process: the resume restores the file
    assert clean_store.load(tmp_path)
    resumed = [_compute(batch, "running_mean") for batch in batches[1:]]
    for theirs, ours in zip(uninterrupted, resumed, strict=True):
        assert torch.equal(theirs, ours)


@pytest.mark.parametrize("first", ["plugin", "user_module"])
def test_a_fresh_process_knows_the_name_through_verls_external_modules(first):
    """As a Ray worker (the TaskRunner actor) starts: a fresh interpreter whose only ebpo import is
    verl's ``VERL_USE_EXTERNAL_MODULES`` (entry points off), naming our plug-in and the user's
    module in either order, then ``compute_advantage`` by the user's name."""
    modules = [PLUGIN, USER_ESTIMATOR_MODULE]
    env = {
        **os.environ,
        "VERL_USE_EXTERNAL_PLUGINS": "none",
        "VERL_USE_EXTERNAL_MODULES": ",".join(modules if first == "plugin" else modules[::-1]),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
    }
    code = (
        "import numpy as np, torch, verl\n"
        "from omegaconf import OmegaConf\n"
        "from verl.trainer.ppo.ray_trainer import compute_advantage\n"
        "data = verl.DataProto.from_dict(tensors={'token_level_rewards': torch.tensor([[0., 1.], "
        "[0., 0.], [0., 1.]]), 'response_mask': torch.ones(3, 2)}, non_tensors={'uid': "
        "np.array(['a', 'a', 'b'], dtype=object)})\n"
        "config = OmegaConf.create({'adv_estimator': 'group_centered'})\n"
        "out = compute_advantage(data, adv_estimator='group_centered', config=config)\n"
        "print(out.batch['advantages'][:, 0].tolist())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [0.5, -0.5, 0.0]
