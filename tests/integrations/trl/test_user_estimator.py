"""A user's own estimator (tests/fixtures/user_estimator, outside the package) in EBPOTrainer:
named through ``estimator_module`` it trains, its ``state_dict()`` goes into every checkpoint and a
resume inside a generation batch continues exactly (the helpers of test_trainer.py)."""

from __future__ import annotations

import json
import sys

import pytest
import torch

pytest.importorskip("trl")

import ebpo  # noqa: E402
from ebpo.estimators import registry  # noqa: E402
from ebpo.integrations.trl import ESTIMATOR_STATE_FILE, EBPOConfig  # noqa: E402
from tests.conftest import USER_ESTIMATOR_MODULE  # noqa: E402
from tests.integrations.trl.conftest import assert_resume_continues_the_run  # noqa: E402
from tests.integrations.trl.test_trainer import (  # noqa: E402, F401  (tokenizer: a fixture)
    G,
    RecordingReward,
    build,
    resumable_args,
    tiny_args,
    tokenizer,
)

pytestmark = pytest.mark.trl

CPU = {"output_dir": "unused", "use_cpu": True, "bf16": False, "report_to": "none"}


def test_estimator_module_imports_the_users_module_before_the_name_is_read(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.delitem(sys.modules, USER_ESTIMATOR_MODULE, raising=False)
    with pytest.raises(ValueError, match="unknown advantage_estimator 'running_mean'"):
        EBPOConfig(advantage_estimator="running_mean", **CPU)
    config = EBPOConfig(
        advantage_estimator="running_mean", estimator_module=USER_ESTIMATOR_MODULE, **CPU
    )
    assert config.advantage_estimator == "running_mean"
    with pytest.raises(ValueError, match="'no_such_pkg' could not be imported"):
        EBPOConfig(estimator_module="no_such_pkg", **CPU)
    sys.modules.pop(USER_ESTIMATOR_MODULE, None)


def test_a_plain_function_trains_as_the_estimator(user_estimators, tokenizer, tmp_path):  # noqa: F811
    reward = RecordingReward(unscorable_first=True)
    trainer = build(tokenizer, tiny_args(tmp_path, "group_centered", max_steps=2), reward)
    trainer.train()
    reference = ebpo.make_estimator("group_centered", nan_policy="mask")
    for output, rewards in zip(trainer.outputs, reward.calls, strict=True):
        expected = reference(torch.tensor(rewards), torch.arange(len(rewards)) // G).advantages
        torch.testing.assert_close(output["advantages"], expected.float())


def test_a_users_stateful_estimator_resumes_exactly(user_estimators, tokenizer, tmp_path):  # noqa: F811
    def args(run):
        return resumable_args(
            tmp_path / run,
            "steps_per_generation",
            "running_mean",
            estimator_module=USER_ESTIMATOR_MODULE,
        )

    full = build(tokenizer, args("full"), RecordingReward())
    full.train()
    final = full.estimator.state_dict()
    assert isinstance(full.estimator, user_estimators.RunningMean) and final["count"] == 64
    checkpoint = tmp_path / "full" / "out" / "checkpoint-1"  # inside the first generation batch
    saved = json.loads((checkpoint / ESTIMATOR_STATE_FILE).read_text())
    assert saved == {"estimator": "running_mean", "total": saved["total"], "count": 32.0}

    assert_resume_continues_the_run(
        full, build(tokenizer, args("resumed"), RecordingReward()), checkpoint
    )
