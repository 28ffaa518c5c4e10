"""``ebpo grpo``'s output directory: an earlier run may be continued, never written over; a
user's folder and a file are refused (the CLI rows are in tests/hostile/test_cli_grpo.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

from ebpo.commands.grpo.output_dir import check_output_dir  # noqa: E402
from ebpo.utils.checkpoints import mark_complete  # noqa: E402


@pytest.mark.parametrize("entries", [[], ["runs/Nov25/events"]], ids=["empty", "tensorboard-only"])
def test_an_empty_directory_or_one_with_logs_only_may_be_written(tmp_path, entries):
    (tmp_path / "out").mkdir()
    for name in entries:
        (tmp_path / "out" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "out" / name).write_text("x")
    check_output_dir(str(tmp_path / "out"))
    check_output_dir(str(tmp_path / "missing"))


def test_a_users_folder_and_a_file_are_refused(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "README.md").write_text("mine")
    with pytest.raises(ValueError, match="is not empty and holds no training run"):
        check_output_dir(str(tmp_path / "mine"))
    with pytest.raises(ValueError, match="is a file, expected a directory"):
        check_output_dir(str(tmp_path / "mine" / "README.md"))


def test_resume_needs_a_complete_checkpoint(tmp_path):
    out = tmp_path / "out"
    (out / "training_args.bin").parent.mkdir()
    (out / "training_args.bin").write_text("x")
    with pytest.raises(
        ValueError, match=r"resume_from_checkpoint: output_dir .* holds no checkpoint-N"
    ):
        check_output_dir(str(out), True)
    (out / "checkpoint-1").mkdir()
    with pytest.raises(ValueError, match=r"no complete checkpoint in"):
        check_output_dir(str(out), True)
    for name in ("trainer_state.json", "ebpo_estimator_state.json", "ebpo_generation_state.json"):
        (out / "checkpoint-1" / name).write_text("{}")
    mark_complete(out / "checkpoint-1")
    check_output_dir(str(out), True)
    check_output_dir(str(out), str(out / "checkpoint-1"))


@pytest.mark.parametrize(
    "entries, named, advice",
    [
        (["training_args.bin", "config.json"], "training_args.bin", "no complete checkpoint to"),
        # an unmarked checkpoint without ebpo's files (trl grpo's): not resumable, not removed
        (["checkpoint-3/x", "runs/Nov25/events"], "checkpoint-3", "no complete checkpoint to"),
    ],
    ids=["a-finished-run", "a-checkpoint"],
)
def test_an_earlier_run_is_refused_unless_resumed(tmp_path, entries, named, advice):
    out = tmp_path / "out"
    for name in entries:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text("x")
    with pytest.raises(ValueError, match=rf"holds an earlier training run \({named}.*{advice}"):
        check_output_dir(str(out))
    with pytest.raises(ValueError, match=r"no complete checkpoint|holds no checkpoint-N"):
        check_output_dir(str(out), True)  # resuming is allowed, and then needs a checkpoint


def test_the_refusal_names_the_newest_complete_checkpoint(tmp_path):
    out = tmp_path / "out"
    for step in (2, 3):
        (out / f"checkpoint-{step}").mkdir(parents=True)
        for name in ("trainer_state.json", "ebpo_estimator_state.json", "ebpo_generation_state.json"):
            (out / f"checkpoint-{step}" / name).write_text("{}")
    mark_complete(out / "checkpoint-2")  # checkpoint-3: a save that was interrupted
    with pytest.raises(ValueError, match=r"continue it with --resume_from_checkpoint .*checkpoint-2,"):
        check_output_dir(str(out))
