"""A run without any learning signal says so: NoSignalWatch counts generation batches in which no
group carried a signal, and EBPOTrainer logs its one-line notice once (during the run, or at its
end when the run is shorter than the notice's patience), on the tiny local Llama whose completions
all score 0."""

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
    # every batch of the run went without signal: the summary says so, and the end adds no warning
    assert trainer.state.log_history[-1]["ebpo/no_signal_batch_frac"] == 1.0
    # what the notice explains: the loss had nothing to push, so the policy did not move
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert losses and all(loss == 0 for loss in losses)


def test_a_run_without_any_signal_too_short_for_the_notice_is_told_at_its_end():
    watch = NoSignalWatch(patience=3)
    assert watch.end_of_run() is None and watch.no_signal_batch_frac is None  # nothing seen
    assert watch.update(1, 1.0, 1.0) is None and watch.update(2, 1.0, 1.0) is None
    notice = watch.end_of_run()
    assert notice is not None and "\n" not in notice
    assert notice.startswith("no learning signal in any of the run's 2 generation batches")
    assert "every group's completions got equal rewards (mean reward 1)" in notice
    assert watch.notice is None and watch.no_signal_batch_frac == 1.0


def test_the_end_says_nothing_after_a_signal_or_after_the_notice():
    with_signal = NoSignalWatch(patience=3)
    with_signal.update(1, 0.5, 0.5)
    with_signal.update(2, 1.0, 0.0)
    assert with_signal.end_of_run() is None and with_signal.no_signal_batch_frac == 0.5
    told = NoSignalWatch(patience=2)
    told.update(1, 1.0, 0.0)
    assert told.update(2, 1.0, 0.0) is not None
    assert told.end_of_run() is None  # the notice during the run said it already
    one = NoSignalWatch(patience=2)
    one.update(1, 1.0, 0.0)
    assert one.end_of_run().startswith("no learning signal in the only generation batch")


def test_a_short_run_where_every_group_scores_the_same_says_so_at_the_end(tmp_path, caplog):
    """Fewer generation batches than the notice's patience, each without signal: one warning at
    the end of the run, and the run's summary metrics say that no batch had a signal."""
    tokenizer = build_char_tokenizer()
    steps = PATIENCE - 1  # one generation batch per step here
    trainer = build(tokenizer, tiny_args(tmp_path, max_steps=steps), zero_reward)
    with caplog.at_level(logging.WARNING, logger="ebpo.integrations.trl.signal"):
        trainer.train()
    notices = [r.getMessage() for r in caplog.records if "no learning signal" in r.getMessage()]
    assert notices == [
        f"EBPOTrainer: no learning signal in any of the run's {steps} generation batches (the "
        f"run ended before the {PATIENCE} in a row that warn during training): every completion "
        "scored 0, so every advantage is 0 and the policy does not change; the prompts are too "
        "hard (or too easy) for this model, or the reward function never scores an answer (TRL "
        "logs rewards/<function>/mean)"
    ]
    assert trainer.no_signal_notice is None  # the notice of PATIENCE batches in a row never came
    per_step = [e for e in trainer.state.log_history if "ebpo/zero_signal_group_frac" in e]
    assert len(per_step) == steps and all(e["ebpo/zero_signal_group_frac"] == 1 for e in per_step)
    summary = trainer.state.log_history[-1]
    assert "train_runtime" in summary and summary["ebpo/no_signal_batch_frac"] == 1.0
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert len(losses) == steps and all(loss == 0 for loss in losses)
