"""A Ray worker (local Ray, one CPU) sees the registration: via the entry point, and via the
``VERL_USE_EXTERNAL_MODULES`` fallback that verl 0.6–0.8 need."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.verl, pytest.mark.slow]

PLUGIN = "ebpo.integrations.verl.plugin"


@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")
    import sys

    # pytest imports this file under a name the workers cannot import: ship the functions by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


def _probe():
    """Runs INSIDE the worker: only `import verl` (as verl's own actors do), then use the registry."""
    import os

    import numpy as np
    import torch
    import verl
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.ray_trainer import compute_advantage

    names = ("ebpo", "ebpo_bb", "jspo", "jspo_plus_plus")
    modules = {
        n: getattr(core_algos.ADV_ESTIMATOR_REGISTRY.get(n), "__module__", None) for n in names
    }
    mask = torch.ones(4, 3)
    rewards = torch.zeros(4, 3)
    rewards[0, 2] = 1.0
    data = verl.DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask},
        non_tensors={"uid": np.array(["a", "a", "b", "b"], dtype=object)},
    )
    adv = None
    if modules["ebpo"]:
        from omegaconf import OmegaConf

        config = OmegaConf.create({"ebpo": {"prior": "batch"}})
        adv = (
            compute_advantage(data, adv_estimator="ebpo", config=config)
            .batch["advantages"][:, 0]
            .tolist()
        )
    return {
        "pid": os.getpid(),
        "modules": modules,
        "advantages": adv,
        "env": os.environ.get("VERL_USE_EXTERNAL_MODULES"),
    }


def _reference_advantages():
    import ebpo

    est = ebpo.make_estimator("ebpo", prior="batch", nan_policy="mask")
    return est([1.0, 0.0, 0.0, 0.0], ["a", "a", "b", "b"]).advantages.tolist()


def test_worker_sees_registration_through_entry_point(ray_local):
    import os

    probe = ray_local.remote(_probe)
    result = ray_local.get(probe.remote(), timeout=600)
    assert result["pid"] != os.getpid()  # really another process
    assert set(result["modules"].values()) == {"ebpo.integrations.verl.advantage"}
    assert result["advantages"] == pytest.approx(_reference_advantages(), abs=1e-6)


def test_worker_fallback_external_modules(ray_local):
    # Entry points switched off, so only VERL_USE_EXTERNAL_MODULES can register the plug-in —
    # the situation of verl 0.6–0.8, where the launcher forwards the variable to the workers.
    env = {"VERL_USE_EXTERNAL_PLUGINS": "none", "VERL_USE_EXTERNAL_MODULES": PLUGIN}
    probe = ray_local.remote(runtime_env={"env_vars": env})(_probe)
    result = ray_local.get(probe.remote(), timeout=600)
    assert result["env"] == PLUGIN
    assert set(result["modules"].values()) == {"ebpo.integrations.verl.advantage"}
    assert result["advantages"] == pytest.approx(_reference_advantages(), abs=1e-6)
