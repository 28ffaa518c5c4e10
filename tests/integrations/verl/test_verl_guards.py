"""The plug-in's guards (issue #27): a resume without the estimator's state is repaired or refused
in one line; KL-penalised rewards for a bounded prior and per-call decays under
``parameter_sync_step > 1`` are refused — by the advantage function inside a trainer, by the
checkpoint callback that verl's own ``PPOTrainer.__init__`` builds, and by ``ebpo verl``'s checks;
multi-output agent sessions are grouped as verl groups them for GRPO (tested against verl's own
``compute_advantage_for_multi_trajectories``). The real v1 loop: test_verl_fit_cpu.py."""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from tests.integrations.verl.conftest import verl_batch

import ebpo
from ebpo.integrations.verl.guards import CALLBACK_FQN, check_resume
from ebpo.integrations.verl.state import STATE_FILENAME, STORE

pytestmark = pytest.mark.verl

GROUPS = [4, 4, 3, 4]


def _trainer(config, global_steps):
    """A stand-in for verl's trainer: a method of a ``verl.trainer.*`` class calling verl's
    ``compute_advantage`` with a local ``metrics`` dict, holding ``config`` and ``global_steps``."""
    from verl.trainer.ppo.ray_trainer import compute_advantage

    namespace = {
        "__name__": "verl.trainer.ppo.fake_trainer",
        "compute_advantage": compute_advantage,
    }
    exec(
        "class Trainer:\n"
        "    def __init__(self, config, global_steps):\n"
        "        self.config, self.global_steps = config, global_steps\n"
        "    def _compute_advantage(self, data):\n"
        "        metrics = {}\n"
        "        algo = self.config.algorithm\n"
        "        out = compute_advantage(data, adv_estimator=algo.adv_estimator, config=algo)\n"
        "        return out.batch['advantages'], metrics\n",
        namespace,
    )
    return namespace["Trainer"](config, global_steps)


def _config(tmp_path, *, resume_from=None, estimator="ebpo", **ebpo_options):
    trainer = {"default_local_dir": str(tmp_path / "ckpt"), "resume_mode": "disable"}
    if resume_from is not None:
        trainer.update(resume_mode="resume_path", resume_from_path=str(resume_from))
    algorithm = {"adv_estimator": estimator, "use_kl_in_reward": False, "ebpo": ebpo_options}
    return OmegaConf.create({"algorithm": algorithm, "trainer": trainer})


def _checkpoint(tmp_path, with_state: bool):
    """A ``global_step_2`` folder, with the state of a 2-step ebpo run if ``with_state``."""
    folder = tmp_path / "ckpt" / "global_step_2"
    folder.mkdir(parents=True)
    if with_state:
        for step in (0, 1):
            data, *_ = verl_batch(GROUPS, seed=step, step=step)
            STORE.get("ebpo", _options())(  # noqa: E211 - the estimator's own call
                data.batch["token_level_rewards"].sum(-1),
                data.non_tensor_batch["uid"],
                mask=data.batch["response_mask"].sum(-1) > 0,
            )
        STORE.save(folder)
        saved = STORE.state_dict()
        STORE.clear()
        return folder, saved
    return folder, None


def _options():
    from ebpo.integrations.verl.advantage import resolve_options

    return resolve_options("ebpo", OmegaConf.create({"adv_estimator": "ebpo"}))[0]


def test_a_fresh_run_is_left_alone(tmp_path):
    data, *_ = verl_batch(GROUPS, seed=3)
    _trainer(_config(tmp_path), global_steps=1)._compute_advantage(data)
    assert STORE.state_dict()["estimators"][0]["state"]["steps"] == 1


def test_resume_without_the_callback_restores_the_state_from_the_checkpoint(tmp_path, caplog):
    """verl resumed from a folder that holds ebpo's state, but the callback is not configured
    (it never restored it): the state is restored anyway, with a warning naming the key."""
    folder, saved = _checkpoint(tmp_path, with_state=True)
    data, *_ = verl_batch(GROUPS, seed=9)
    with caplog.at_level(logging.WARNING):
        _trainer(_config(tmp_path, resume_from=folder), global_steps=3)._compute_advantage(data)
    assert [r for r in caplog.records if CALLBACK_FQN in r.getMessage()]
    state = STORE.state_dict()["estimators"][0]["state"]
    assert state["steps"] == saved["estimators"][0]["state"]["steps"] + 1 == 3


@pytest.mark.parametrize("where", ["folder without the state file", "step only"])
def test_resume_without_any_state_stops_in_one_line_naming_the_callback(tmp_path, where):
    folder, _ = _checkpoint(tmp_path, with_state=False)
    config = _config(tmp_path, resume_from=folder if where.startswith("folder") else None)
    data, *_ = verl_batch(GROUPS, seed=9)
    with pytest.raises(ValueError) as error:
        _trainer(config, global_steps=3)._compute_advantage(data)
    message = str(error.value)
    assert "\n" not in message and f"trainer.checkpoint_callback_class={CALLBACK_FQN}" in message
    assert (STATE_FILENAME in message) == where.startswith("folder")
    assert STORE.state_dict()["estimators"][0]["state"]["steps"] == 0  # nothing half-updated


def test_resume_without_state_can_be_accepted_and_stateless_priors_need_none(tmp_path, caplog):
    folder, _ = _checkpoint(tmp_path, with_state=False)
    data, *_ = verl_batch(GROUPS, seed=9)
    with caplog.at_level(logging.WARNING):
        _trainer(
            _config(tmp_path, resume_from=folder, on_missing_state="start_empty"), global_steps=3
        )._compute_advantage(data)
    assert [r for r in caplog.records if "starting it empty" in r.getMessage()]
    STORE.clear()
    # the batch prior keeps nothing between steps: a resume loses nothing
    _trainer(
        _config(tmp_path, resume_from=folder, prior="batch"), global_steps=3
    )._compute_advantage(data)
    with pytest.raises(ValueError, match="on_missing_state must be one of error, start_empty"):
        _trainer(_config(tmp_path, on_missing_state="never"), global_steps=1)._compute_advantage(
            data
        )


def test_check_resume_runs_once_per_configuration(tmp_path):
    folder, _ = _checkpoint(tmp_path, with_state=False)
    trainer = _config(tmp_path, resume_from=folder).trainer
    with pytest.raises(ValueError):
        check_resume(STORE, "ebpo", "ebpo", _options(), trainer, 3)
    assert check_resume(STORE, "ebpo", "ebpo", _options(), trainer, 3) is False  # not twice


# ---------------------------------------------------------------------- KL in the reward
def test_kl_in_reward_is_refused_for_the_bounded_prior_only(tmp_path):
    data, *_ = verl_batch(GROUPS, seed=2)
    config = _config(tmp_path, estimator="ebpo_bb")
    config.algorithm.use_kl_in_reward = True
    with pytest.raises(ValueError, match=r"use_kl_in_reward=True .*=ebpo_bb .* in \[0, 1\]"):
        _trainer(config, global_steps=1)._compute_advantage(data)
    config.algorithm.adv_estimator = "ebpo"  # a Gaussian prior takes any reward
    _trainer(config, global_steps=1)._compute_advantage(data)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (
            ["algorithm.adv_estimator=ebpo_bb", "algorithm.use_kl_in_reward=True"],
            "use_kl_in_reward",
        ),
        (
            [
                "algorithm.adv_estimator=ebpo",
                "+trainer.v1.sync.parameter_sync_step=2",
                "+algorithm.ebpo.prior=ema",
            ],
            r"parameter_sync_step=2 .* 2 times a step",
        ),
        (
            [
                "algorithm.adv_estimator=jspo_plus_plus",
                "+algorithm.ebpo.smooth_coef=0.9",
                "+trainer.v1.sync.parameter_sync_step=4",
            ],
            "parameter_sync_step=4",
        ),
    ],
)
def test_ebpo_verl_refuses_them_before_launching(overrides, match):
    from ebpo.commands.verl.launcher import check_overrides

    with pytest.raises(ValueError, match=match):
        check_overrides(overrides)


def test_what_is_not_refused():
    from ebpo.commands.verl.launcher import check_overrides

    ebpo = "algorithm.adv_estimator=ebpo"
    check_overrides([ebpo, "+trainer.v1.sync.parameter_sync_step=2"])  # history: per sub-batch
    check_overrides(
        [
            ebpo,
            "trainer.use_v1=False",
            "+trainer.v1.sync.parameter_sync_step=2",
            "+algorithm.ebpo.prior=ema",
        ]
    )  # the legacy trainer ignores it
    check_overrides([ebpo, "algorithm.use_kl_in_reward=True"])  # ebpo's Gaussian prior


def test_verls_own_trainer_constructor_refuses_a_half_life_with_sub_batches(tmp_path):
    """verl's ``PPOTrainer.__init__`` builds the checkpoint callback before anything starts: the
    refusal comes there, in seconds, not after the first rollout."""
    from verl.trainer.ppo.v1 import PPOTrainerSync

    from ebpo.commands.verl.launcher import compose

    config = compose(
        [
            "algorithm.adv_estimator=ebpo",
            "+algorithm.ebpo.prior=ema",
            "+trainer.v1.sync.parameter_sync_step=2",
            f"trainer.checkpoint_callback_class={CALLBACK_FQN}",
            f"trainer.default_local_dir={tmp_path}",
        ]
    )
    with pytest.raises(ValueError, match=r"half_life=50.0.* parameter_sync_step=2"):
        PPOTrainerSync(config)


# ---------------------------------------------------------------------- asynchronous trainer modes
@pytest.mark.parametrize("mode", ["colocate_async", "separate_async"])
def test_an_async_trainer_mode_is_refused_in_one_line_before_anything_starts(mode, tmp_path):
    """verl's own ``PPOTrainer.__init__`` builds the callback, which refuses the mode naming the
    verl piece that keeps it off the CPU loop and the two ways out; ``ebpo verl`` refuses it
    before launching; the advantage function refuses it inside a trainer of that mode."""
    from verl.trainer.ppo.v1 import PPOTrainerSync

    from ebpo.commands.verl.launcher import check_overrides, compose
    from ebpo.integrations.verl.guards import ASYNC_TRAINER_MODES

    overrides = ["algorithm.adv_estimator=ebpo", f"trainer.v1.trainer_mode={mode}"]
    match = rf"adv_estimator=ebpo has not run under trainer.v1.trainer_mode={mode} .*allow_async_trainer=true"
    with pytest.raises(ValueError, match=match) as refused:
        check_overrides(overrides)
    assert "\n" not in str(refused.value)
    assert ASYNC_TRAINER_MODES[mode] in str(refused.value)
    config = compose(
        [
            *overrides,
            f"trainer.checkpoint_callback_class={CALLBACK_FQN}",
            f"trainer.default_local_dir={tmp_path}",
        ]
    )
    with pytest.raises(ValueError, match=match):
        PPOTrainerSync(config)  # the sync class, so that only the callback can refuse
    data, *_ = verl_batch(GROUPS, seed=1)
    trainer_config = _config(tmp_path)
    trainer_config.trainer.v1 = {"trainer_mode": mode}
    with pytest.raises(ValueError, match=match):
        _trainer(trainer_config, global_steps=1)._compute_advantage(data)


def test_an_async_trainer_mode_runs_when_the_user_allows_it(tmp_path):
    from ebpo.commands.verl.launcher import check_overrides

    allowed = "+algorithm.ebpo.allow_async_trainer=true"
    check_overrides(
        ["algorithm.adv_estimator=ebpo", "trainer.v1.trainer_mode=separate_async", allowed]
    )
    check_overrides(
        ["algorithm.adv_estimator=ebpo", "trainer.v1.trainer_mode=colocate_async", allowed]
    )
    with pytest.raises(ValueError, match=r"allow_async_trainer must be true or false, got 'yes'"):
        check_overrides(
            [
                "algorithm.adv_estimator=ebpo",
                "trainer.v1.trainer_mode=colocate_async",
                "+algorithm.ebpo.allow_async_trainer=yes",
            ]
        )
    data, *_ = verl_batch(GROUPS, seed=1)
    config = _config(tmp_path, allow_async_trainer=True)
    config.trainer.v1 = {"trainer_mode": "colocate_async"}
    advantages, _ = _trainer(config, global_steps=1)._compute_advantage(data)
    assert advantages.abs().sum() > 0
    # verl's own estimators and the legacy trainer are not ebpo's business
    check_overrides(["algorithm.adv_estimator=grpo", "trainer.v1.trainer_mode=separate_async"])
    check_overrides(
        [
            "algorithm.adv_estimator=ebpo",
            "trainer.use_v1=False",
            "trainer.v1.trainer_mode=separate_async",
        ]
    )


# ---------------------------------------------------------------------- multi-output agent loops
def _multi_output_batch(seed=0):
    """Two prompts × 3 sessions; some sessions have 2-3 outputs (a multi-output agent loop), every
    output carrying its session's final reward as verl's agent loop copies it; a padding row."""
    from verl import DataProto

    rng = np.random.default_rng(seed)
    keys, rewards = [], []
    for uid in ("aaaa", "bbbb"):
        for session in range(3):
            final = float(rng.uniform() < 0.5)
            for output in range(int(rng.integers(1, 4))):
                keys.append(f"{uid}_{session}_{output}")
                rewards.append(final)
    keys.append("padxyz_0_0")
    rewards.append(0.0)
    n, width = len(keys), 5
    mask = torch.ones(n, width)
    mask[-1] = 0
    token_rewards = torch.zeros(n, width)
    token_rewards[:, -1] = torch.tensor(rewards)
    data = DataProto.from_dict(
        tensors={"token_level_rewards": token_rewards, "response_mask": mask},
        non_tensors={"uid": np.array([k.split("_")[0] for k in keys], dtype=object)},
    )
    return data, keys, np.array(rewards)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_multi_output_sessions_are_grouped_as_verls_grpo_path(seed):
    """Through verl's own ``compute_advantage_for_multi_trajectories``: the estimator sees one
    row per session (its final output) — the rows verl's GRPO branch keeps — and every output of
    a session gets that session's advantage."""
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    data, keys, rewards = _multi_output_batch(seed)
    config = OmegaConf.create({"adv_estimator": "ebpo", "ebpo": {"prior": "batch"}})
    out = compute_advantage_for_multi_trajectories(
        data, batch_keys=keys, adv_estimator="ebpo", config=config
    )
    advantages = out.batch["advantages"][:, 0]
    # verl's GRPO branch on the same batch: its per-row advantage is its session's final row's
    grpo = compute_advantage_for_multi_trajectories(
        _multi_output_batch(seed)[0], batch_keys=keys, adv_estimator="grpo", config=config
    ).batch["advantages"][:, 0]
    final = {}
    for row, key in enumerate(keys):
        session, output = key.rsplit("_", 1)
        if session not in final or int(output) > int(keys[final[session]].rsplit("_", 1)[1]):
            final[session] = row
    finals = sorted(final.values())
    for row, key in enumerate(keys):
        owner = final[key.rsplit("_", 1)[0]]
        assert advantages[row] == advantages[owner] and grpo[row] == grpo[owner]
    # the reference: the core estimator on the final rows only (the padding row has no tokens)
    real = [r for r in finals if not keys[r].startswith("pad")]
    reference = ebpo.make_estimator("ebpo", prior="batch", nan_policy="mask")(
        torch.tensor(rewards[real]), [keys[r].split("_")[0] for r in real]
    )
    torch.testing.assert_close(advantages[real].double(), reference.advantages, rtol=0, atol=1e-6)
    assert advantages[-1] == 0


def test_multi_output_sessions_count_once_in_the_prior():
    """The history prior counts sessions, not outputs (verl copies the final reward onto every
    output: counting them all would inflate the groups and the prior)."""
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    data, keys, _ = _multi_output_batch(4)
    config = OmegaConf.create({"adv_estimator": "ebpo"})
    compute_advantage_for_multi_trajectories(
        data, batch_keys=keys, adv_estimator="ebpo", config=config
    )
    sessions = len({k.rsplit("_", 1)[0] for k in keys if not k.startswith("pad")})
    state = STORE.state_dict()["estimators"][0]["state"]
    assert state["global"]["rewards"]["count"] == sessions < len(keys) - 1


def test_session_final_rows():
    from ebpo.integrations.verl.advantage import session_final_rows

    keys = ["u_0_0", "u_0_2", "u_0_1", "u_1_0", "pad_0_0"]
    assert session_final_rows(keys) == ([False, True, False, True, True], [1, 1, 1, 3, 4])
    assert session_final_rows(["not-a-key"]) is None


def test_the_state_file_written_by_the_fixture_is_json(tmp_path):
    folder, saved = _checkpoint(tmp_path, with_state=True)
    assert json.loads((folder / STATE_FILENAME).read_text()) == saved
    assert os.path.isdir(folder)
