"""``advantage_estimator="grpo"`` is TRL's own ``GRPOTrainer``: the same seed, tiny model, data and
rewards trained by plain ``trl.GRPOTrainer`` and by ``EBPOTrainer`` log the same loss, reward and
grad norm (1e-6 relative) at every step — every ``scale_rewards`` mode (unset = TRL's default),
every ``loss_type`` of TRL 1.16, Dr. GRPO, GDPO's ``normalize_then_sum``, and unscored and lone
completions. Nothing is passed to make them agree (no eps): the flag alone gives TRL's GRPO.

A generation batch holds 4 prompts x G = 4 completions of uneven length (a bias on <eos>) and
uneven correctness; it is trained in 2 optimizer steps, so the second one is off-policy (ratio ≠ 1:
clipping, the loss types' weights and the KL term all act)."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest
import torch

pytest.importorskip("trl")

from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from ebpo.evaluation.models import save_tiny_llama  # noqa: E402
from ebpo.integrations.trl import EBPOConfig, EBPOTrainer  # noqa: E402
from ebpo.integrations.trl.aggregation import lone_response_rows  # noqa: E402

pytestmark = pytest.mark.trl

G = 4
#: TRL 1.16's loss types (GRPOConfig.loss_type's help)
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")
LOGGED = ("loss", "reward", "grad_norm")
DR_GRPO = {"scale_rewards": False, "loss_type": "dr_grpo"}
GDPO = {"multi_objective_aggregation": "normalize_then_sum"}


def parity_reward(completions, **kwargs):
    return [float((len(c) + sum(map(ord, c))) % 2) for c in completions]


def length_reward(completions, **kwargs):
    return [len(c) / 6 for c in completions]


def patchy_reward(completions, **kwargs):
    """Parity with holes: every 4th group unscored (None), in the next one a lone scored completion."""
    out = []
    for i, completion in enumerate(completions):
        group, k = divmod(i, G)
        out.append(
            None if group % 4 == 0 or (group % 4 == 1 and k) else parity_reward([completion])[0]
        )
    return out


REWARDS = {
    "parity": [parity_reward],
    "two": [parity_reward, length_reward],
    "patchy": [patchy_reward],
}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("trl_grpo")
    save_tiny_llama(root / "model", num_layers=1, hidden_size=32, num_heads=2, seed=0)
    data = Dataset.from_list([{"prompt": f"{a}+{a}="} for a in range(16)])
    return root, data, {}


class Recorded:
    """The trainer's estimator, recording each call's rewards and advantages."""

    def __init__(self, estimator) -> None:
        self.estimator, self.calls = estimator, []

    def __getattr__(self, name):
        return getattr(self.estimator, name)

    def __call__(self, rewards, *args, **kwargs):
        result = self.estimator(rewards, *args, **kwargs)
        self.calls.append((rewards, result.advantages))
        return result


class CheckedEBPOTrainer(EBPOTrainer):
    """EBPOTrainer whose estimator's own advantages are checked against the ones it trains on:
    with TRL's settings it keeps TRL's float32 numbers, and the estimator (float64, rounded) must
    agree with them to float32 rounding (so the estimator is TRL's GRPO, not only its name)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.estimator = Recorded(self.estimator)

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        rewards, advantages = self.estimator.calls[-1]
        lone = lone_response_rows(rewards, G)  # TRL gives them 0 (the estimator: verl's convention)
        torch.testing.assert_close(
            advantages.masked_fill(lone, 0.0), output["advantages"], rtol=1e-5, atol=1e-5
        )
        return output


def train(setup, config_class, trainer_class, rewards: str, **settings) -> list[dict]:
    root, data, _ = setup
    args = config_class(
        output_dir=str(root / "out"), use_cpu=True, bf16=False, seed=0, report_to="none",
        save_strategy="no", logging_steps=1, max_steps=2, num_generations=G,
        per_device_train_batch_size=8, steps_per_generation=2, max_completion_length=6,
        learning_rate=1e-2, beta=0.04, generation_kwargs={"sequence_bias": [[[2], 2.0]]},
        **settings,
    )  # fmt: skip
    trainer = trainer_class(
        model=str(root / "model"), reward_funcs=REWARDS[rewards], args=args, train_dataset=data
    )
    trainer.train()
    return [{k: h[k] for k in LOGGED if k in h} for h in trainer.state.log_history if "loss" in h]


def trls(setup, rewards: str, **settings) -> list[dict]:
    """TRL's GRPOTrainer's logs, each configuration trained once for the module."""
    cache = setup[2]
    key = (rewards, tuple(sorted(settings.items())))
    if key not in cache:
        cache[key] = train(setup, GRPOConfig, GRPOTrainer, rewards, **settings)
    return cache[key]


def assert_same_logs(ours: list[dict], theirs: list[dict]) -> None:
    assert [sorted(h) for h in ours] == [sorted(h) for h in theirs] and len(ours) == 2
    for step, (mine, their) in enumerate(zip(ours, theirs, strict=True)):
        for key, value in their.items():
            assert math.isclose(mine[key], value, rel_tol=1e-6, abs_tol=1e-9), (
                step,
                key,
                mine,
                their,
            )


#: (our settings, TRL's, rewards): every scale_rewards mode (unset = TRL's default "group"; the
#: aliases true / false) and every loss type, each at least once
CASES = [
    ({}, {}, "parity"),  # TRL's defaults: scale "group", loss "dapo"
    ({"scale_rewards": "group", "loss_type": "grpo"}, None, "parity"),
    # unscored and lone completions: a lone one counts in the batch std and gets advantage 0
    ({"scale_rewards": "batch", "loss_type": "bnpo"}, None, "patchy"),
    ({"scale_rewards": "none", "loss_type": "cispo"}, None, "parity"),
    ({"scale_rewards": True, "loss_type": "sapo"}, None, "parity"),
    ({"scale_rewards": "batch", "loss_type": "luspo"}, None, "parity"),
    ({"scale_rewards": False, "loss_type": "vespo"}, None, "parity"),
    # Dr. GRPO: TRL's recipe (scale_rewards none, loss_type dr_grpo); ours also as its estimator
    (DR_GRPO, None, "parity"),
    ({"advantage_estimator": "dr_grpo", "loss_type": "dr_grpo"}, DR_GRPO, "parity"),
    # GDPO: TRL ignores scale_rewards and scales the per-function normalised sum over the batch
    (GDPO, None, "two"),
]


@pytest.mark.parametrize(("ours", "theirs", "rewards"), CASES)
def test_grpo_logs_what_trls_grpo_trainer_logs(setup, ours, theirs, rewards):
    expected = trls(setup, rewards, **(ours if theirs is None else theirs))
    ours = {"advantage_estimator": "grpo", **ours}
    mine = train(setup, EBPOConfig, CheckedEBPOTrainer, rewards, **ours)
    # not a trivial batch: uneven correctness within the generation batch, a loss that moves
    assert 0 < expected[0]["reward"] < (2 if rewards == "two" else 1)
    assert any(h["loss"] != 0 for h in expected)
    assert_same_logs(mine, expected)


def test_the_default_estimator_is_not_trls_grpo(setup):
    """The comparison can fail: EBPO (the default) on the same batch logs another grad norm."""
    expected = trls(setup, "parity")
    mine = train(setup, EBPOConfig, EBPOTrainer, "parity", scale_rewards="none")
    assert mine[0]["reward"] == expected[0]["reward"]  # same completions, same rewards
    assert not math.isclose(mine[0]["grad_norm"], expected[0]["grad_norm"], rel_tol=1e-3)


def test_the_cases_cover_every_loss_type_and_scale_of_trl():
    from trl import GRPOConfig as Config

    (field,) = [f for f in dataclasses.fields(Config) if f.name == "loss_type"]
    supported = field.metadata["help"].split("Supported values are ")[1].split(". ")[0]
    assert set(re.findall(r"'(\w+)'", supported)) == set(LOSS_TYPES)
    settings = [ours if theirs is None else theirs for ours, theirs, _ in CASES]
    assert {s.get("loss_type", "dapo") for s in settings} == set(LOSS_TYPES)
    assert {s.get("scale_rewards", "unset") for s in settings} >= {
        "unset", "group", "batch", "none", True, False,
    }  # fmt: skip
