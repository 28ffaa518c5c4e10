"""``<name>/missing_sessions`` (issue #36): the agent sessions that never reached the estimator
(one that returned no output or raised: verl keeps the rest of its group), counted against
``actor_rollout_ref.rollout.n`` — through verl's own ``compute_advantage_for_multi_trajectories``
called by a stand-in trainer method, as the v1 trainer calls it. Outside a session-keyed call
nothing is counted. The real agent loop manager: test_verl_fit_cpu.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from tests.integrations.verl.conftest import verl_trainer

from ebpo.integrations.verl.advantage import missing_sessions

pytestmark = pytest.mark.verl

N = 4  # actor_rollout_ref.rollout.n


def _config(tmp_path):
    return OmegaConf.create(
        {
            "algorithm": {"adv_estimator": "ebpo", "use_kl_in_reward": False, "ebpo": {}},
            "trainer": {"default_local_dir": str(tmp_path / "ckpt"), "resume_mode": "disable"},
            "actor_rollout_ref": {"rollout": {"n": N}},
        }
    )


def _step_metrics(config, data, keys=None) -> dict:
    """The ``metrics`` dict of a verl trainer's step (:func:`verl_trainer`) whose advantages of
    ``data`` verl computed by ``compute_advantage_for_multi_trajectories`` with the rows' ``keys``
    (verl's v1 trainer), or by ``compute_advantage`` where ``keys`` is None."""
    trainer = verl_trainer(config)
    trainer.advantages(data, batch_keys=keys)
    return trainer.metrics


def _batch(sessions: dict[str, list[int]], outputs: int = 2, padding: int = 2):
    """Rows ``{uid}_{session}_{output}`` for the given sessions of each uid (``outputs`` each, the
    final reward on every output, as verl copies it), then ``padding`` rows of verl's kind
    (one pad uid, sessions 0.., all-zero mask)."""
    from verl import DataProto

    keys, rewards = [], []
    for uid, present in sessions.items():
        for session in present:
            reward = float((session + len(uid)) % 2)
            for output in range(outputs):
                keys.append(f"{uid}_{session}_{output}")
                rewards.append(reward)
    keys += [f"padabc_{i}_0" for i in range(padding)]
    rewards += [0.0] * padding
    n, width = len(keys), 4
    mask = torch.ones(n, width)
    mask[n - padding :] = 0
    token_rewards = torch.zeros(n, width)
    token_rewards[:, -1] = torch.tensor(rewards)
    data = DataProto.from_dict(
        tensors={"token_level_rewards": token_rewards, "response_mask": mask},
        non_tensors={"uid": np.array([k.rsplit("_", 2)[0] for k in keys], dtype=object)},
    )
    return data, keys


def test_sessions_missing_in_the_middle_and_at_the_end_are_counted(tmp_path):
    """Group ``a`` lost its middle session 1, group ``b`` its last session 3, group ``c`` none;
    verl's padding rows (a uid of their own, no tokens) count nothing."""
    data, keys = _batch({"a": [0, 2, 3], "bb": [0, 1, 2], "ccc": [0, 1, 2, 3]})
    metrics = _step_metrics(_config(tmp_path), data, keys)
    assert metrics["ebpo/missing_sessions"] == 2.0
    assert metrics["ebpo/num_responses"] == 10.0  # one row per session present
    assert metrics["ebpo/num_groups"] == 3.0


def test_a_complete_step_drops_nothing(tmp_path):
    data, keys = _batch({"a": [0, 1, 2, 3], "bb": [0, 1, 2, 3]}, outputs=1, padding=0)
    metrics = _step_metrics(_config(tmp_path), data, keys)
    assert metrics["ebpo/missing_sessions"] == 0.0


def test_no_count_outside_a_session_keyed_call(tmp_path):
    """verl's legacy path (``compute_advantage`` without keys): no session keys, no count."""
    data, _ = _batch({"a": [0, 2]}, outputs=1, padding=0)
    metrics = _step_metrics(_config(tmp_path), data)
    assert "ebpo/num_responses" in metrics
    assert "ebpo/missing_sessions" not in metrics


def test_missing_sessions_counts_rows_seen_only():
    keys = ["u_0_0", "u_0_1", "u_2_1", "v_1_0", "pad_0_0"]
    index = ["u", "u", "u", "v", "pad"]
    assert missing_sessions(keys, [False, True, True, True, False], index, 4) == 2 + 3
    assert missing_sessions(keys, [False] * 5, index, 4) == 0
    # more sessions than rollout.n (a larger __rollout_n__): clamped at 0
    assert missing_sessions(keys, [True] * 5, index, 1) == 0
