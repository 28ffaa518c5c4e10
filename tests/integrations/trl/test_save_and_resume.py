"""ebpo.integrations.trl.save_and_resume without training: which checkpoint ``train()`` resumes from,
and which ones the rotation deletes. (Saves and resumes of a real EBPOTrainer: test_trainer.py;
kills at every point of a save: tests/hostile/test_resume.py.)"""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path

import pytest

pytest.importorskip("trl")

from ebpo.integrations.trl.checkpoint_files import REQUIRED_FILES  # noqa: E402
from ebpo.integrations.trl.save_and_resume import resolve_checkpoint, rotate  # noqa: E402
from ebpo.utils.checkpoints import MARKER, mark_complete  # noqa: E402

pytestmark = pytest.mark.trl


def checkpoint(
    parent: Path, step: int, *, complete: bool = True, mtime: float | None = None
) -> Path:
    path = parent / f"checkpoint-{step}"
    path.mkdir(parents=True)
    for name in (*REQUIRED_FILES, "model.safetensors"):
        (path / name).write_text("{}")
    if complete:
        mark_complete(path, required=REQUIRED_FILES)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def test_no_resume_is_passed_through(tmp_path):
    assert resolve_checkpoint(None, str(tmp_path)) is None
    assert resolve_checkpoint(False, str(tmp_path)) is False
    # True with no checkpoint at all: transformers raises its own "No valid checkpoint found"
    assert resolve_checkpoint(True, str(tmp_path)) is True
    assert resolve_checkpoint(True, str(tmp_path / "absent")) is True


def test_a_complete_checkpoint_is_resumed(tmp_path):
    path = checkpoint(tmp_path, 3)
    assert resolve_checkpoint(str(path), str(tmp_path)) == str(path)
    assert resolve_checkpoint(path, str(tmp_path)) == str(path)  # a Path too
    assert resolve_checkpoint(True, str(tmp_path)) == str(path)


def test_true_falls_back_to_the_newest_complete_checkpoint_and_warns(tmp_path, caplog):
    checkpoint(tmp_path, 11)
    checkpoint(tmp_path, 12, complete=False)
    (tmp_path / "checkpoint-12" / "trainer_state.json").unlink()
    with caplog.at_level(logging.WARNING, logger="ebpo.integrations.trl.save_and_resume"):
        found = resolve_checkpoint(True, str(tmp_path))
    assert found == str(tmp_path / "checkpoint-11")
    assert "checkpoint-12 is incomplete (no ebpo_checkpoint_complete.json" in caplog.text
    assert "resuming from checkpoint-11 instead" in caplog.text


def test_true_with_only_incomplete_checkpoints_is_refused(tmp_path):
    checkpoint(tmp_path, 1, complete=False)
    with pytest.raises(
        ValueError, match=r"no complete checkpoint in .*: checkpoint-1: no ebpo_checkpoint"
    ):
        resolve_checkpoint(True, str(tmp_path))


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda p: (p / "trainer_state.json").unlink(), r"trainer_state\.json is missing"),
        (
            lambda p: (p / "ebpo_estimator_state.json").unlink(),
            r"ebpo_estimator_state\.json is missing",
        ),
        (
            lambda p: (p / "model.safetensors").write_text(""),
            r"model\.safetensors has 0 bytes, 2 were written",
        ),
        (lambda p: (p / MARKER).unlink(), "no ebpo_checkpoint_complete.json"),
    ],
    ids=["no-trainer-state", "no-estimator-state", "truncated-model", "no-marker"],
)
def test_an_incomplete_checkpoint_named_explicitly_is_refused(tmp_path, damage, reason):
    older = checkpoint(tmp_path, 11)
    path = checkpoint(tmp_path, 12)
    damage(path)
    with pytest.raises(ValueError) as error:
        resolve_checkpoint(str(path), str(tmp_path))
    message = str(error.value)
    assert message.startswith(
        f"resume_from_checkpoint {str(path)!r} is not a complete checkpoint: "
    )
    assert re.search(reason, message), message
    assert message.endswith(f"the newest complete one beside it is {str(older)!r}")


def test_a_checkpoint_without_our_files_is_refused(tmp_path):
    path = tmp_path / "checkpoint-5"
    path.mkdir()
    (path / "trainer_state.json").write_text("{}")
    mark_complete(path)  # complete, but not an EBPOTrainer checkpoint
    with pytest.raises(ValueError, match=r"ebpo_estimator_state\.json is not listed"):
        resolve_checkpoint(str(path), str(tmp_path))


@pytest.mark.parametrize("bad", [3, 1.5, ["checkpoint-1"], b"checkpoint-1"], ids=repr)
def test_a_resume_argument_of_another_type_is_refused(tmp_path, bad):
    with pytest.raises(ValueError, match="resume_from_checkpoint must be a checkpoint directory"):
        resolve_checkpoint(bad, str(tmp_path))


def test_rotation_keeps_the_newest_complete_checkpoints_and_drops_incomplete_ones(tmp_path):
    now = time.time()
    for step in (1, 2, 3):
        checkpoint(tmp_path, step, mtime=now - 100 + step * 10)
    checkpoint(tmp_path, 7, complete=False, mtime=now - 50)  # a leftover of an interrupted save
    current = checkpoint(tmp_path, 4, mtime=now)
    rotate(str(tmp_path), 2, [str(current), None])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-3", "checkpoint-4"]


def test_rotation_with_a_limit_of_one_keeps_the_current_checkpoint(tmp_path):
    # transformers' own rotation would keep checkpoint-9 (largest step), an incomplete leftover
    checkpoint(tmp_path, 2)
    checkpoint(tmp_path, 9, complete=False)
    current = checkpoint(tmp_path, 3)
    rotate(str(tmp_path), 1, [str(current)])
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint-3"]


def test_rotation_keeps_the_best_checkpoint(tmp_path):
    best = checkpoint(tmp_path, 1, mtime=time.time() - 100)
    checkpoint(tmp_path, 2, mtime=time.time() - 50)
    current = checkpoint(tmp_path, 3)
    rotate(str(tmp_path), 1, [str(current), str(best)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-1", "checkpoint-3"]


@pytest.mark.parametrize("limit", [None, 0])
def test_without_a_limit_nothing_is_deleted(tmp_path, limit):
    checkpoint(tmp_path, 1)
    checkpoint(tmp_path, 2, complete=False)
    rotate(str(tmp_path), limit, [])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-1", "checkpoint-2"]
