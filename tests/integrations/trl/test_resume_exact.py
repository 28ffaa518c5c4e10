"""A resumed EBPOTrainer run is the uninterrupted run, from every one of its checkpoints: the same
prompts and completions, advantages, estimator state, no-signal counts, logs and weights.

The tiny run trains 3 steps over 8 prompts, 4 a step: checkpoint-1 falls inside the first epoch,
checkpoint-2 at its end (the next step starts epoch 1: a new permutation of the prompts), and
checkpoint-3 inside epoch 1 at ``max_steps`` (nothing is left to train). Its reward is the parity of
the completion for two of the prompts and 0 for the others, so the rewards vary and some
groups are all 0.
A kill -9 leaves the same checkpoints on disk (tests/hostile/test_resume.py)."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("trl")

from ebpo.evaluation.models import build_char_tokenizer  # noqa: E402
from ebpo.integrations.trl import ESTIMATOR_STATE_FILE  # noqa: E402
from tests.integrations.trl.test_trainer import (  # noqa: E402
    build,
    dataset,
    parity,
    tiny_args,
)

pytestmark = pytest.mark.trl

PROMPTS = 8
STEPS = 3
#: what differs between two identical runs: wall-clock times, and transformers' ``train_loss``,
#: the mean loss of the steps this process trained (a resumed run trained fewer)
NOT_COMPARED = {
    "step_time",
    "train_runtime",
    "train_samples_per_second",
    "train_steps_per_second",
    "train_loss",
}


class SomePromptsReward:
    """The completion's parity for prompts 0 and 1, 0 for the others; records its prompts."""

    __name__ = "some_prompts"

    def __init__(self) -> None:
        self.prompts: list[list[str]] = []

    def __call__(self, prompts, completions, **kwargs):
        self.prompts.append(list(prompts))
        return [
            parity(c) if p in ("0+0=", "1+1=") else 0.0
            for p, c in zip(prompts, completions, strict=True)
        ]


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


def comparable(log_history: list[dict]) -> list[dict]:
    return [{k: v for k, v in entry.items() if k not in NOT_COMPARED} for entry in log_history]


def run(tokenizer, tmp_path, name, checkpoint=None):
    reward = SomePromptsReward()
    args = tiny_args(tmp_path / name, max_steps=STEPS, save_strategy="steps", save_steps=1)
    trainer = build(tokenizer, args, reward, train_dataset=dataset(PROMPTS))
    trainer.train(resume_from_checkpoint=None if checkpoint is None else str(checkpoint))
    return trainer, reward


@pytest.fixture(scope="module")
def full(tokenizer, tmp_path_factory):
    root = tmp_path_factory.mktemp("full")
    trainer, reward = run(tokenizer, root, "full")
    return trainer, reward, root / "full" / "out"


def test_the_uninterrupted_run_is_one_whose_rewards_and_signal_vary(full):
    trainer, reward, _ = full
    assert len(reward.prompts) == STEPS
    assert len({p for batch in reward.prompts for p in batch}) == PROMPTS
    assert reward.prompts[2] != reward.prompts[0]  # epoch 1 has an order of its own
    rewards = torch.cat([r[:, 0] for r in trainer.rewards_per_func])
    assert 0 < rewards.mean() < 1
    assert "ebpo/no_signal_batch_frac" in trainer.state.log_history[-1]
    assert trainer._ebpo_signal.batches == STEPS


@pytest.mark.parametrize("step", range(1, STEPS + 1))
def test_a_resume_from_each_checkpoint_is_the_uninterrupted_run(full, tokenizer, tmp_path, step):
    uninterrupted, full_reward, out = full
    checkpoint = out / f"checkpoint-{step}"
    resumed, reward = run(tokenizer, tmp_path, "resumed", checkpoint)

    assert reward.prompts == full_reward.prompts[step:]
    for theirs, ours in zip(uninterrupted.outputs[step:], resumed.outputs, strict=True):
        assert torch.equal(theirs["completion_ids"], ours["completion_ids"])
    assert len(resumed.loss_advantages) == STEPS - step
    for theirs, ours in zip(
        uninterrupted.loss_advantages[step:], resumed.loss_advantages, strict=True
    ):
        assert torch.equal(theirs, ours)
    assert resumed.estimator.state_dict() == uninterrupted.estimator.state_dict()
    assert json.loads((out / f"checkpoint-{STEPS}" / ESTIMATOR_STATE_FILE).read_text()) == (
        resumed.estimator.state_dict()
    )
    # the no-signal watch counted every generation batch of the run, not only the resumed ones
    assert resumed._ebpo_signal.state_dict() == uninterrupted._ebpo_signal.state_dict()
    assert comparable(resumed.state.log_history) == comparable(uninterrupted.state.log_history)
    assert resumed.state.global_step == STEPS
    for (name, a), (_, b) in zip(
        uninterrupted.model.named_parameters(), resumed.model.named_parameters(), strict=True
    ):
        assert torch.equal(a, b), name
