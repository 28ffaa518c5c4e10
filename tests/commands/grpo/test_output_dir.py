"""``ebpo grpo``'s output directory: an earlier run may be continued, never written over; a
user's folder and a file are refused (the CLI rows are in tests/hostile/test_cli_grpo.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

from ebpo.commands.grpo.output_dir import (  # noqa: E402
    check_output_dir,
    clear_interrupted_saves,
    interrupted_saves,
    remove_stale_temporaries,
)
from ebpo.utils.checkpoints import mark_complete  # noqa: E402
from ebpo.utils.run_lock import LOCK  # noqa: E402


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
        for name in (
            "trainer_state.json",
            "ebpo_estimator_state.json",
            "ebpo_generation_state.json",
        ):
            (out / f"checkpoint-{step}" / name).write_text("{}")
    mark_complete(out / "checkpoint-2")  # checkpoint-3: a save that was interrupted
    with pytest.raises(
        ValueError, match=r"continue it with --resume_from_checkpoint .*checkpoint-2,"
    ):
        check_output_dir(str(out))


def write(root, files):
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


@pytest.mark.parametrize(
    "files, removable",
    [
        ({"checkpoint-1/ebpo_estimator_state.json": "{}"}, True),
        ({"checkpoint-1/.ebpo_estimator_state.json.0123abcd.tmp": "{"}, True),
        ({"checkpoint-1/ebpo_estimator_state.json": "{}", "checkpoint-2/model.bin": "x",
          "checkpoint-2/ebpo_generation_state.json": "{}"}, True),
        ({"checkpoint-1/model.safetensors": "x"}, False),  # trl grpo's: no ebpo file
        ({"checkpoint-1/ebpo_estimator_state.json": "{}", "training_args.bin": "x"}, False),
        ({"checkpoint-1/ebpo_estimator_state.json": "{}", "checkpoint-2/model.bin": "x"}, False),
    ],
    ids=["ebpo-file", "ebpo-temporary", "two-ebpo-saves", "trl-checkpoint", "finished-model",
         "one-not-ours"],
)  # fmt: skip
def test_only_interrupted_ebpo_saves_are_started_over(tmp_path, files, removable):
    out = tmp_path / "out"
    write(out, files)
    (out / "checkpoint-3").mkdir()  # an empty folder: a save killed right after its mkdir
    if removable:
        check_output_dir(str(out))  # a plain rerun is allowed
        said = []
        removed = clear_interrupted_saves(out, said.append)
        assert [p.name for p in removed] == sorted(
            {name.split("/")[0] for name in files if name.startswith("checkpoint-")}
            | {"checkpoint-3"}
        )
        assert not list(out.glob("checkpoint-*")) and len(said) == len(removed)
        assert all("removed; training starts again from step 0" in line for line in said)
    else:
        with pytest.raises(ValueError, match="holds an earlier training run"):
            check_output_dir(str(out))
        assert interrupted_saves(out) == []
        before = sorted(p.relative_to(out) for p in out.rglob("*"))
        assert clear_interrupted_saves(out, print) == []
        assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


def test_a_stale_lock_file_is_not_content(tmp_path):
    write(tmp_path / "out", {LOCK: "12345\n"})  # left by a killed run
    check_output_dir(str(tmp_path / "out"))


def test_only_our_temporaries_are_removed(tmp_path):
    out = tmp_path / "out"
    ours = [
        ".ebpo_estimator_state.json.0123abcd.tmp",
        ".ebpo_checkpoint_complete.json.89abcdef.tmp",
    ]
    theirs = [".notes.0123abcd.tmp", "ebpo_estimator_state.json", ".ebpo_x.tmp", ".ebpo_x.0123.tmp"]
    write(out, {f"checkpoint-1/{name}": "x" for name in ours + theirs})
    write(out, {name: "x" for name in ours})  # beside the checkpoints: not ours to judge
    removed = remove_stale_temporaries(out)
    assert sorted(p.name for p in removed) == sorted(ours)
    assert sorted(p.name for p in (out / "checkpoint-1").iterdir()) == sorted(theirs)
    assert all((out / name).exists() for name in ours)
