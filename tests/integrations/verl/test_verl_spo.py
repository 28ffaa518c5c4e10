"""SPO in verl: the plug-in keys its tracker by the prompt's tokens, read from verl's own
``compute_advantage(data, ...)`` (verl passes the estimator only per-sample uids); outside it SPO
is refused in one line; the tracker is saved and restored with the run's state."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from tests.integrations.verl.conftest import verl_batch

from ebpo.integrations.verl.state import STORE

pytestmark = pytest.mark.verl

GROUPS = [4, 3, 4, 2]


@pytest.fixture(autouse=True)
def _fresh_store():
    STORE.clear()
    yield
    STORE.clear()


def _trainer():
    """A stand-in for verl's trainer: a method of a ``verl.trainer.*`` class calling verl's
    ``compute_advantage`` with a local ``metrics`` dict."""
    from verl.trainer.ppo.ray_trainer import compute_advantage

    namespace = {
        "__name__": "verl.trainer.ppo.fake_trainer",
        "compute_advantage": compute_advantage,
    }
    exec(
        "class Trainer:\n"
        "    def __init__(self, config):\n"
        "        self.config, self.global_steps = config, 1\n"
        "    def advantages(self, data):\n"
        "        metrics = {}\n"
        "        algo = self.config.algorithm\n"
        "        return compute_advantage(data, adv_estimator='spo', config=algo).batch['advantages']\n",
        namespace,
    )
    config = {"algorithm": {"adv_estimator": "spo", "use_kl_in_reward": False}, "trainer": {}}
    return namespace["Trainer"](OmegaConf.create(config))


def _step(step: int):
    """verl's batch of one step (fresh uids) with the prompt of group g as left-padded tokens that
    are the same on every step; the prompt number of each row."""
    data, rewards, uids, valid = verl_batch(GROUPS, seed=step, step=step)
    rng = np.random.default_rng(100 + step)
    group_of_uid = {
        uid: g for g, uid in enumerate(dict.fromkeys(u for u in uids if not u.startswith("pad")))
    }
    prompt = np.array([group_of_uid.get(u, -1) for u in uids])
    width = 6
    tokens = torch.zeros(len(uids), width, dtype=torch.long)
    attention = torch.zeros(len(uids), width + data.batch["response_mask"].shape[1])
    for row, g in enumerate(prompt):
        text = [7 + g, 11, 13 + 2 * g][: 2 + (g % 2)] if g >= 0 else [1]
        pad = int(rng.integers(0, width - len(text) + 1))  # left padding that varies per step
        tokens[row, width - len(text) - pad : width - pad] = torch.tensor(text)
        attention[row, width - len(text) - pad : width - pad] = 1
    data.batch["prompts"] = tokens
    data.batch["attention_mask"] = attention
    return data, rewards, prompt, valid


def test_spo_tracks_each_prompt_across_steps_of_fresh_uids():
    import ebpo.integrations.verl.plugin  # noqa: F401 - registers the estimators in verl

    trainer = _trainer()
    reference = ebpo.make_estimator("spo", nan_policy="mask")
    for step in range(3):
        data, rewards, prompt, valid = _step(step)
        got = trainer.advantages(data)
        mask = data.batch["response_mask"]
        expected = reference(
            torch.tensor(rewards), prompt, mask=valid, prompt_keys=[f"p{g}" for g in prompt]
        )
        torch.testing.assert_close(got, expected.advantages.float()[:, None] * mask)
    tracked = STORE.get("spo", {"eps": 1e-6, "nan_policy": "mask", "normalize": "batch"})
    assert tracked.state_dict()["steps"] == 3
    assert len(tracked.state_dict()["prompts"]["keys"]) == len(
        GROUPS
    )  # one per prompt, not per uid


def test_the_tracker_is_restored_from_the_run_state(tmp_path):
    import ebpo.integrations.verl.plugin  # noqa: F401

    trainer = _trainer()
    batches = [_step(step)[0] for step in range(3)]
    trainer.advantages(batches[0])
    STORE.save(tmp_path)
    after_one = STORE.state_dict()
    uninterrupted = [trainer.advantages(b) for b in batches[1:]]
    STORE.clear()
    assert STORE.load(tmp_path) and STORE.state_dict() == after_one
    resumed = [trainer.advantages(b) for b in batches[1:]]
    for a, b in zip(uninterrupted, resumed, strict=True):
        assert torch.equal(a, b)


def test_spo_outside_verls_compute_advantage_is_refused_in_one_line():
    from ebpo.integrations.verl.advantage import FUNCTIONS

    data, *_ = _step(0)
    with pytest.raises(
        ValueError, match=r"adv_estimator='spo' needs a stable key per prompt"
    ) as info:
        FUNCTIONS["spo"](
            token_level_rewards=data.batch["token_level_rewards"],
            response_mask=data.batch["response_mask"],
            index=data.non_tensor_batch["uid"],
        )
    assert "\n" not in str(info.value)
