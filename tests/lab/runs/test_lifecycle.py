"""ebpo.lab.runs.lifecycle: each event of a run writes the manifest it should (and a resumed run's
manifest waits for its training to resume), started() claims the directory (the replaced run's
entries go, the user's stay)."""

from __future__ import annotations

import json
from pathlib import Path

from ebpo.lab.runs.directory import MANIFEST, check_run_dir, read_metrics, write_manifest
from ebpo.lab.runs.lifecycle import RunLifecycle

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
