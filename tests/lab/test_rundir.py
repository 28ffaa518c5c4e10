"""ebpo.lab.rundir: which directories count as a run, what check_run_dir decides (and that it
changes nothing on disk), the manifest, the metrics file and the last checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ebpo.lab import rundir
from ebpo.lab.rundir import (
    MANIFEST,
    check_run_dir,
    last_checkpoint,
    read_metrics,
    truncate_metrics,
    write_manifest,
)

IDENTITY = {"estimator": "ebpo", "seed": 0, "steps": 10}


def files_below(root: Path) -> dict[str, bytes | None]:
    """Relative path -> content (None for a directory) of everything below ``root``."""
    return {
        str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes())
        for p in sorted(root.rglob("*"))
    }


def a_run(path: Path, status: str = "running", step: int = 5, identity: dict | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    write_manifest(path, identity or IDENTITY, status, step)
    (path / "metrics.jsonl").write_text('{"step": 1}\n')
    return path


# ---------------------------------------------------------------------- fresh directories
@pytest.mark.parametrize("exists", [False, True])
def test_a_missing_or_empty_directory_is_used_as_it_is(tmp_path, exists):
    path = tmp_path / "run"
    if exists:
        path.mkdir()
    decision = check_run_dir(path, IDENTITY, resume=False, overwrite=False)
    assert decision == rundir.RunDir(path, None, replace=False)
    assert path.exists() == exists  # nothing created


def test_a_directory_with_other_files_is_refused_even_with_overwrite(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    before = files_below(tmp_path)
    for overwrite in (False, True):
        with pytest.raises(
            ValueError, match=r"is not empty and holds no ebpo run; choose another directory"
        ):
            check_run_dir(tmp_path, IDENTITY, resume=False, overwrite=overwrite)
    assert files_below(tmp_path) == before


def test_a_file_is_not_a_run_directory(tmp_path):
    path = tmp_path / "results.json"
    path.write_text("{}")
    with pytest.raises(ValueError, match="output_dir"):
        check_run_dir(path, IDENTITY, resume=False, overwrite=False)
    assert path.read_text() == "{}"


def test_an_unreadable_manifest_is_refused_and_kept(tmp_path):
    (tmp_path / MANIFEST).write_text("{not json")
    with pytest.raises(
        ValueError, match=r"is not a readable run manifest .*remove it or choose another output_dir"
    ):
        check_run_dir(tmp_path, IDENTITY, resume=False, overwrite=True)
    assert (tmp_path / MANIFEST).read_text() == "{not json"


# ---------------------------------------------------------------------- an earlier run
def test_a_run_that_did_work_needs_overwrite_and_is_only_marked_for_replacement(tmp_path):
    path = a_run(tmp_path / "run", status="interrupted", step=5)
    before = files_below(path)
    with pytest.raises(
        ValueError,
        match=r"already holds a run \(interrupted, step 5\); pass --resume .* or --overwrite",
    ):
        check_run_dir(path, IDENTITY, resume=False, overwrite=False)
    decision = check_run_dir(path, {**IDENTITY, "seed": 1}, resume=False, overwrite=True)
    assert decision == rundir.RunDir(path, None, replace=True)
    assert files_below(path) == before  # check_run_dir decides; the job deletes


@pytest.mark.parametrize("status", ["starting", "failed"])
def test_a_run_that_never_got_past_its_start_is_replaced_without_asking(tmp_path, status):
    path = a_run(tmp_path / "run", status=status, step=0)
    assert check_run_dir(path, IDENTITY, resume=False, overwrite=False).replace


def test_a_failed_run_with_steps_done_is_kept(tmp_path):
    path = a_run(tmp_path / "run", status="failed", step=3)
    with pytest.raises(ValueError, match=r"already holds a run \(failed, step 3\)"):
        check_run_dir(path, IDENTITY, resume=False, overwrite=False)


# ---------------------------------------------------------------------- resume
def test_resume_returns_the_manifest_of_the_same_run(tmp_path):
    path = a_run(tmp_path / "run", step=7)
    decision = check_run_dir(path, IDENTITY, resume=True, overwrite=False)
    assert not decision.replace
    assert decision.manifest["global_step"] == 7 and decision.manifest["config"] == IDENTITY


def test_resume_refuses_a_directory_without_a_run(tmp_path):
    with pytest.raises(
        ValueError, match=r"nothing to resume: .* holds no ebpo run \(run\.json missing\)"
    ):
        check_run_dir(tmp_path / "missing", IDENTITY, resume=True, overwrite=False)


def test_resume_refuses_a_run_with_other_options_and_names_them(tmp_path):
    path = a_run(tmp_path / "run")
    with pytest.raises(
        ValueError,
        match=r"holds a different run; cannot resume it with other options \(seed: 0 -> 1\)",
    ):
        check_run_dir(path, {**IDENTITY, "seed": 1}, resume=True, overwrite=False)


# ---------------------------------------------------------------------- manifest
def test_write_manifest_keeps_created_and_updates_status_and_step(tmp_path):
    write_manifest(tmp_path, IDENTITY, "starting", 0)
    first = json.loads((tmp_path / MANIFEST).read_text())
    assert first["ebpo_run"] == 1 and first["status"] == "starting" and first["global_step"] == 0
    assert first["config"] == IDENTITY and first["created"] == first["updated"]
    first["created"] = "2000-01-01T00:00:00+00:00"
    (tmp_path / MANIFEST).write_text(json.dumps(first))
    write_manifest(tmp_path, IDENTITY, "completed", 10)
    second = json.loads((tmp_path / MANIFEST).read_text())
    assert second["created"] == "2000-01-01T00:00:00+00:00"
    assert (second["status"], second["global_step"]) == ("completed", 10)
    assert sorted(p.name for p in tmp_path.iterdir()) == [MANIFEST]  # no temporary file left


# ---------------------------------------------------------------------- metrics and checkpoints
def test_read_metrics_of_a_missing_file_is_empty_and_skips_blank_lines(tmp_path):
    assert read_metrics(tmp_path / "metrics.jsonl") == []
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "reward": 0.5}\n\n{"step": 2}\n')
    assert read_metrics(tmp_path / "metrics.jsonl") == [{"step": 1, "reward": 0.5}, {"step": 2}]


def test_truncate_metrics_drops_the_steps_a_resume_redoes(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s, "reward": s / 10}) + "\n" for s in range(1, 6)))
    truncate_metrics(path, 3)
    assert [r["step"] for r in read_metrics(path)] == [1, 2, 3]
    truncate_metrics(tmp_path / "absent.jsonl", 3)
    assert not (tmp_path / "absent.jsonl").exists()


def test_last_checkpoint_is_the_largest_step_directory(tmp_path):
    assert last_checkpoint(tmp_path / "checkpoints") is None
    checkpoints = tmp_path / "checkpoints"
    for name in ("checkpoint-9", "checkpoint-10", "checkpoint-tmp"):
        (checkpoints / name).mkdir(parents=True)
    (checkpoints / "checkpoint-99").write_text("a file, not a checkpoint")
    assert last_checkpoint(checkpoints) == checkpoints / "checkpoint-10"
