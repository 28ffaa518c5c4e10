"""A run without any learning signal says so: NoSignalWatch counts generation batches in which no
group carried a signal, and EBPOTrainer logs its one-line notice once, on the tiny local Llama
whose completions all score 0."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("trl")

from ebpo.evaluation.models import build_char_tokenizer  # noqa: E402
from ebpo.integrations.trl.signal import PATIENCE, NoSignalWatch  # noqa: E402
from tests.integrations.trl.test_trainer import build, tiny_args  # noqa: E402

pytestmark = pytest.mark.trl


def test_the_notice_comes_once_after_patience_batches_without_signal():
    watch = NoSignalWatch(patience=3)
    assert watch.update(1, 1.0, 0.0) is None and watch.update(2, 1.0, 0.0) is None
    notice = watch.update(3, 1.0, 0.0)
    assert notice is not None and "\n" not in notice
    assert "3 generation batches in a row (from step 1)" in notice
    assert "every completion scored 0" in notice
    assert watch.update(4, 1.0, 0.0) is None  # once per stretch
    assert watch.notice == notice


def test_a_batch_with_signal_starts_the_count_again():
    watch = NoSignalWatch(patience=2)
    assert watch.update(1, 1.0, 0.0) is None
    assert watch.update(2, 0.75, 0.25) is None  # one group in four carried a signal
    assert watch.update(3, 1.0, 1.0) is None
    notice = watch.update(4, 1.0, 0.5)
    # equal rewards within every group, not all 0: the message gives the mean rewards it saw
    assert "from step 3" in notice and "mean reward 0.5, 1" in notice
    assert "scored 0" not in notice


@pytest.mark.parametrize("patience", [0, -1, 1.5, True])
def test_patience_must_be_a_positive_integer(patience):
    with pytest.raises(ValueError, match="patience"):
        NoSignalWatch(patience=patience)


def zero_reward(completions, **kwargs):
    return [0.0 for _ in completions]


def test_the_trainer_says_once_that_a_run_with_all_rewards_0_trains_nothing(tmp_path, caplog):
    tokenizer = build_char_tokenizer()
    trainer = build(tokenizer, tiny_args(tmp_path, max_steps=PATIENCE + 1), zero_reward)
    with caplog.at_level(logging.WARNING, logger="ebpo.integrations.trl.signal"):
        trainer.train()
    notices = [r.getMessage() for r in caplog.records if "no learning signal" in r.getMessage()]
    assert len(notices) == 1 and "\n" not in notices[0]
    assert notices[0] == f"EBPOTrainer: {trainer.no_signal_notice}"
    assert f"{PATIENCE} generation batches in a row (from step 1)" in notices[0]
    assert "every completion scored 0" in notices[0]
    # what the notice explains: the loss had nothing to push, so the policy did not move
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert losses and all(loss == 0 for loss in losses)
