"""ebpo.lab.runs.lifecycle: each event of a run writes the manifest it should (and a resumed run's
manifest waits for its training to resume), started() claims the directory (the replaced run's
entries go, the user's stay) and removes only our own stale temporary files, and the logged losses
that a resumed training's mean needs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ebpo.lab.runs.directory import MANIFEST, check_run_dir, read_metrics, write_manifest
from ebpo.lab.runs.lifecycle import RunLifecycle, logged_loss_sum, remove_stale_temporaries

IDENTITY = {"estimator": "ebpo", "seed": 0, "steps": 10}


def manifest(path: Path) -> tuple[str, int]:
    value = json.loads((path / MANIFEST).read_text())
    return value["status"], value["global_step"]


def lifecycle(path: Path, **options) -> RunLifecycle:
    decision = check_run_dir(
        path,
        IDENTITY,
        resume=options.get("resume", False),
        overwrite=options.get("overwrite", False),
    )
    return RunLifecycle(decision, IDENTITY)


def test_each_event_writes_its_status_and_step(tmp_path):
    run = lifecycle(tmp_path / "run")
    assert not run.resumed and not run.finished_before
    run.started()
    assert manifest(run.path) == ("starting", 0)
    created = json.loads((run.path / MANIFEST).read_text())["created"]
    for event, step, status in [
        (run.running, 2, "running"),
        (run.interrupted, 2, "interrupted"),
        (run.completed, 5, "completed"),
        (run.failed, 3, "failed"),
    ]:
        event(step)
        assert manifest(run.path) == (status, step)
    assert json.loads((run.path / MANIFEST).read_text())["created"] == created


def test_a_resumed_run_changes_only_once_training_resumes(tmp_path):
    path = tmp_path / "run"
    path.mkdir()
    write_manifest(path, IDENTITY, "interrupted", 4)
    lines = [{"step": s, "loss": 0.1 * s} for s in range(1, 7)] + [{"step": 6, "train_runtime": 1}]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    before = (path / "metrics.jsonl").read_bytes()
    run = lifecycle(path, resume=True)
    assert run.resumed and not run.finished_before
    run.started()
    assert manifest(path) == ("interrupted", 4)  # not "starting": the run keeps its state
    assert (path / "metrics.jsonl").read_bytes() == before
    run.running(4, resuming=True)
    assert manifest(path) == ("running", 4)
    assert [r["step"] for r in read_metrics(path / "metrics.jsonl")] == [1, 2, 3, 4]


def test_a_completed_run_is_finished_before(tmp_path):
    path = tmp_path / "run"
    path.mkdir()
    write_manifest(path, IDENTITY, "completed", 10)
    assert lifecycle(path, resume=True).finished_before


def test_started_replaces_the_old_run_and_keeps_the_users_files(tmp_path):
    path = tmp_path / "run"
    path.mkdir()
    write_manifest(path, IDENTITY, "completed", 10)
    (path / "eval_after.json").write_text("{}")
    (path / "notes.txt").write_text("mine")
    run = lifecycle(path, overwrite=True)
    run.started()
    assert sorted(p.name for p in path.iterdir()) == ["notes.txt", MANIFEST]
    assert manifest(path) == ("starting", 0)


OURS = [".run.json.0123abcd.tmp", ".metrics.jsonl.deadbeef.tmp", ".results.json.a1b2c3d4.tmp"]
OURS_IN_PLOTS = [".reward.png.0123abcd.tmp", ".pass1.png.ffffffff.tmp"]
THEIRS = [
    ".run.json.tmp",  # no 8 hex digits
    ".run.json.0123ABCD.tmp",  # not our spelling
    ".run.json.0123abcd.tmp.bak",
    ".notes.txt.0123abcd.tmp",  # not one of the run's files
    "run.json.0123abcd.tmp",
    "my.tmp",
    "notes.txt",
]


@pytest.mark.parametrize("resume", [False, True])
def test_started_removes_our_stale_temporary_files_and_nothing_else(tmp_path, resume):
    path = tmp_path / "run"
    (path / "plots").mkdir(parents=True)
    write_manifest(path, IDENTITY, "interrupted", 2)
    for name in OURS + THEIRS:
        (path / name).write_text("x")
    for name in OURS_IN_PLOTS + [".notes.txt.0123abcd.tmp", "mine.png"]:
        (path / "plots" / name).write_text("x")
    (path / "other").mkdir()
    (path / "other" / ".reward.png.0123abcd.tmp").write_text("x")  # not the run's plots folder
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    (path / ".eval_after.json.0badf00d.tmp").symlink_to(outside)  # a link, not our file
    run = lifecycle(path, resume=resume, overwrite=not resume)
    run.started()
    left = {str(p.relative_to(path)) for p in path.rglob("*")}
    assert not left & set(OURS) and not left & {f"plots/{n}" for n in OURS_IN_PLOTS}
    assert set(THEIRS) <= left
    assert {"plots/.notes.txt.0123abcd.tmp", "plots/mine.png"} <= left or not resume
    assert "other/.reward.png.0123abcd.tmp" in left
    assert ".eval_after.json.0badf00d.tmp" in left and outside.read_text() == "keep"


def test_remove_stale_temporaries_on_a_directory_without_plots(tmp_path):
    (tmp_path / ".run.json.0123abcd.tmp").write_text("x")
    assert remove_stale_temporaries(tmp_path) == [tmp_path / ".run.json.0123abcd.tmp"]
    assert remove_stale_temporaries(tmp_path / "missing") == []


def test_logged_loss_sum_weights_each_record_by_the_steps_it_covers(tmp_path):
    path = tmp_path / "metrics.jsonl"
    records = [
        {"step": 2, "loss": 0.5},  # the mean of steps 1-2 (logging_steps 2)
        {"step": 2, "heldout/pass@1": 0.1},
        {"step": 4, "loss": -0.25},
        {"step": 6, "loss": 100.0},  # after the step asked for
        {"step": 4, "train_loss": 9.0, "train_runtime": 1.0},  # no per-step loss
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert logged_loss_sum(path, 4) == pytest.approx(2 * 0.5 + 2 * -0.25)
    assert logged_loss_sum(path, 0) == 0.0
    assert logged_loss_sum(tmp_path / "none.jsonl", 4) == 0.0
