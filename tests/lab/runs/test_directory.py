"""ebpo.lab.runs.directory: which directories count as a run (only a manifest ebpo wrote), what
check_run_dir decides (and that it changes nothing on disk), what clear_run removes (only the
run's own entries), the manifest, the run's JSON files, the metrics file and the last checkpoint."""

from __future__ import annotations

import errno
import io
import json
from pathlib import Path

import pytest

from ebpo.lab.runs import directory as rundir
from ebpo.lab.runs.directory import (
    MANIFEST,
    RUN_ENTRIES,
    append_metrics,
    check_run_dir,
    clear_run,
    last_checkpoint,
    read_metrics,
    read_run_json,
    truncate_metrics,
    write_manifest,
)
from ebpo.utils.checkpoints import mark_complete
from ebpo.utils.run_lock import LOCK

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
    assert decision == rundir.RunDir(path, None, replace=True, owned=RUN_ENTRIES)
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
    assert (first["format"], first["version"]) == ("ebpo-run", 2)  # the marker check_run_dir reads
    assert first["status"] == "starting" and first["global_step"] == 0
    assert sorted(first["files"]) == sorted(RUN_ENTRIES)
    assert first["config"] == IDENTITY and first["created"] == first["updated"]
    first["created"] = "2000-01-01T00:00:00+00:00"
    (tmp_path / MANIFEST).write_text(json.dumps(first))
    write_manifest(tmp_path, IDENTITY, "completed", 10)
    second = json.loads((tmp_path / MANIFEST).read_text())
    assert second["created"] == "2000-01-01T00:00:00+00:00"
    assert (second["status"], second["global_step"]) == ("completed", 10)
    assert sorted(p.name for p in tmp_path.iterdir()) == [MANIFEST]  # no temporary file left


# ---------------------------------------------------------------------- whose manifest (issue #21 item 1)
def manifest_text(**fields) -> str:
    base = {
        "format": "ebpo-run",
        "version": 2,
        "status": "completed",
        "global_step": 5,
        "config": IDENTITY,
        "files": list(RUN_ENTRIES),
    }
    return json.dumps({**base, **fields})


NOT_OURS = {
    "status-only": (
        '{"status": "failed"}',
        r"is not a run manifest written by ebpo \(no \"format\"",
    ),
    "empty-object": ("{}", r"is not a run manifest written by ebpo"),
    "list": ("[]", r"is not a run manifest written by ebpo"),
    "string": ('"run"', r"is not a run manifest written by ebpo"),
    "null": ("null", r"is not a run manifest written by ebpo"),
    "corrupt": (
        '{"status": "failed" "x"}',
        r"is not a readable run manifest \(Expecting ',' delimiter",
    ),
    "empty-file": ("", r"is not a readable run manifest"),
    "not-utf8": (b"\xff\xfe{", r"is not a readable run manifest"),
    "legacy-true": (
        '{"ebpo_run": true, "status": "failed", "global_step": 0, "config": {}}',
        r"not a run manifest written by ebpo",
    ),
    "legacy-2": (
        '{"ebpo_run": 2, "status": "failed", "global_step": 0, "config": {}}',
        r"not a run manifest written by ebpo",
    ),
    "other-format": (manifest_text(format="other"), r"not a run manifest written by ebpo"),
    "version-3": (
        manifest_text(version=3),
        r"run manifest of version 3; this ebpo reads versions \[1, 2\]",
    ),
    "version-true": (manifest_text(version=True), r"run manifest of version True"),
    "version-string": (manifest_text(version="2"), r"run manifest of version '2'"),
    "version-missing": (manifest_text(version=None), r"run manifest of version None"),
    "status-unknown": (
        manifest_text(status="done"),
        r"not a valid ebpo run manifest \(status must be one of",
    ),
    "step-negative": (
        manifest_text(global_step=-1),
        r"global_step must be an integer >= 0, got -1",
    ),
    "step-bool": (
        manifest_text(global_step=False),
        r"global_step must be an integer >= 0, got False",
    ),
    "step-float": (manifest_text(global_step=1.5), r"global_step must be an integer >= 0"),
    "config-list": (manifest_text(config=[]), r"config must be an object, got list"),
    "files-missing": (manifest_text(files=None), r"files must list run\.json"),
    "files-escape": (
        manifest_text(files=["run.json", "../../home"]),
        r"files must list run\.json and only names of",
    ),
    "files-absolute": (manifest_text(files=["run.json", "/"]), r"files must list"),
    "files-user-file": (manifest_text(files=["run.json", "precious.txt"]), r"files must list"),
    "files-without-manifest": (
        manifest_text(files=["metrics.jsonl"]),
        r"files must list run\.json",
    ),
    "files-not-names": (manifest_text(files=["run.json", {"a": 1}]), r"files must list"),
}


@pytest.mark.parametrize("text", NOT_OURS.values(), ids=NOT_OURS.keys())
@pytest.mark.parametrize(
    "mode", [{}, {"overwrite": True}, {"resume": True}], ids=["plain", "overwrite", "resume"]
)
def test_a_run_json_that_ebpo_did_not_write_is_refused_and_kept(tmp_path, text, mode):
    """Issue #21 item 1: a run.json alone does not make a directory a run to replace."""
    content, match = text
    path = tmp_path / "a"
    path.mkdir()
    (path / MANIFEST).write_bytes(content if isinstance(content, bytes) else content.encode())
    (path / "precious.txt").write_text("x")
    (path / "metrics.jsonl").write_text("mine\n")  # a name a run would use
    before = files_below(path)
    options = {"resume": False, "overwrite": False, **mode}
    with pytest.raises(ValueError, match=match) as caught:
        check_run_dir(path, IDENTITY, **options)
    assert repr(str(path / MANIFEST)) in str(caught.value)  # names the file
    assert "\n" not in str(caught.value)
    assert files_below(path) == before


def test_a_version_1_manifest_is_still_a_run_that_owns_every_run_entry(tmp_path):
    (tmp_path / MANIFEST).write_text(
        json.dumps({"ebpo_run": 1, "status": "interrupted", "global_step": 3, "config": IDENTITY})
    )
    assert check_run_dir(tmp_path, IDENTITY, resume=True, overwrite=False).manifest["version"] == 1
    decision = check_run_dir(tmp_path, IDENTITY, resume=False, overwrite=True)
    assert decision.replace and decision.owned == RUN_ENTRIES


def test_a_directory_holding_only_a_lock_file_counts_as_empty(tmp_path):
    (tmp_path / LOCK).write_text("12345\n")  # left by a job killed before it wrote anything
    assert check_run_dir(tmp_path, IDENTITY, resume=False, overwrite=False) == rundir.RunDir(
        tmp_path, None, replace=False
    )


def test_a_dangling_symlink_is_refused(tmp_path):
    (tmp_path / "link").symlink_to(tmp_path / "missing")
    with pytest.raises(
        ValueError, match=r"is a symbolic link to .*missing'?, which does not exist"
    ):
        check_run_dir(tmp_path / "link", IDENTITY, resume=False, overwrite=False)
    assert not (tmp_path / "missing").exists()


def test_a_symlink_to_a_run_is_followed(tmp_path):
    target = a_run(tmp_path / "target", status="completed")
    (tmp_path / "link").symlink_to(target)
    decision = check_run_dir(tmp_path / "link", IDENTITY, resume=False, overwrite=True)
    assert decision.replace and decision.path == tmp_path / "link"


# ---------------------------------------------------------------------- replacing: only the run's own
def test_clear_run_removes_the_runs_entries_and_nothing_else(tmp_path):
    """Issue #21 item 1: --overwrite on a real run keeps the user's own notes inside it."""
    path = a_run(tmp_path / "run", status="completed")
    for name in ("checkpoints/checkpoint-2", "plots", "final_model", "tensorboard"):
        (path / name).mkdir(parents=True)
    (path / "checkpoints/checkpoint-2/model.safetensors").write_text("weights")
    (path / "results.json").write_text("{}")
    (path / "notes.md").write_text("my notes")
    (path / "analysis").mkdir()
    (path / "analysis/fig.png").write_text("mine")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    (path / "plots").rmdir()
    (path / "plots").symlink_to(outside)  # a run entry that is a link: removed, not followed
    decision = check_run_dir(path, IDENTITY, resume=False, overwrite=True)
    clear_run(decision)
    assert sorted(p.name for p in path.iterdir()) == ["analysis", "notes.md"]
    assert (path / "notes.md").read_text() == "my notes"
    assert (outside / "keep.txt").read_text() == "mine"


def test_a_run_entry_the_run_did_not_create_blocks_a_replacement(tmp_path):
    path = tmp_path / "run"
    path.mkdir()
    (path / MANIFEST).write_text(manifest_text(files=[MANIFEST, "metrics.jsonl"]))
    (path / "plots").mkdir()
    (path / "plots" / "mine.png").write_text("mine")
    before = files_below(path)
    with pytest.raises(
        ValueError, match=r"holds 'plots', which its run did not create; move it away"
    ):
        check_run_dir(path, IDENTITY, resume=False, overwrite=True)
    assert files_below(path) == before


# ---------------------------------------------------------------------- resuming: files as the run wrote them
@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("checkpoints", lambda p: p.write_text("a file")),
        ("tensorboard", lambda p: p.write_text("a file")),
        ("metrics.jsonl", lambda p: p.mkdir()),
        ("eval_before.json", lambda p: p.mkdir()),
        ("results.json", lambda p: p.symlink_to(p.parent / "nowhere")),
    ],
)
def test_resume_refuses_run_entries_of_the_wrong_kind(tmp_path, name, make):
    path = a_run(tmp_path / "run")
    (path / "metrics.jsonl").unlink()
    make(path / name)
    with pytest.raises(ValueError, match=rf"'{path / name}' should be the run's .* but is not"):
        check_run_dir(path, IDENTITY, resume=True, overwrite=False)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("[]", r"should hold a JSON object, got a list"),
        ('{"overall": 0.5,, }', r"is not readable JSON \(Expecting"),
        ('{"overall": NaN, "topics": {}}', r"'overall' should be a finite number, got nan"),
        ('{"overall": "0.5", "topics": {}}', r"'overall' should be a finite number, got '0\.5'"),
        ('{"overall": 0.5, "topics": []}', r"'topics' should be a JSON object, got \[\]"),
        (None, r"is missing"),
    ],
)
def test_read_run_json_names_the_file(tmp_path, content, match):
    path = tmp_path / "eval_before.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=match) as caught:
        read_run_json(path, numbers=("overall",), objects=("topics",))
    assert str(caught.value).startswith(repr(str(path)))


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


def test_last_checkpoint_is_the_complete_one_with_the_largest_step(tmp_path, capsys):
    """Issue #21 items 5-6: an incomplete checkpoint (a save killed or out of disk) is skipped,
    and the job says so."""
    assert last_checkpoint(tmp_path / "checkpoints") is None
    checkpoints = tmp_path / "checkpoints"
    for name in ("checkpoint-9", "checkpoint-10", "checkpoint-11", "checkpoint-tmp"):
        (checkpoints / name).mkdir(parents=True)
        (checkpoints / name / "trainer_state.json").write_text("{}")
    for name in ("checkpoint-9", "checkpoint-10"):
        mark_complete(checkpoints / name)
    (checkpoints / "checkpoint-99").write_text("a file, not a checkpoint")
    said: list[str] = []
    assert last_checkpoint(checkpoints, say=said.append) == checkpoints / "checkpoint-10"
    assert said == [
        f"{checkpoints / 'checkpoint-11'} is incomplete (no ebpo_checkpoint_complete.json, the file "
        "a save writes last: the save was interrupted, or the checkpoint was not written by ebpo): "
        "resuming from checkpoint-10 instead"
    ]
    (checkpoints / "checkpoint-10" / "trainer_state.json").write_text("{ }")  # another size
    assert last_checkpoint(checkpoints) == checkpoints / "checkpoint-9"  # default: to stderr
    err = capsys.readouterr().err
    assert "checkpoint-10 is incomplete (trainer_state.json has 3 bytes, 2 were written)" in err
    for name in ("checkpoint-9", "checkpoint-10"):
        (checkpoints / name / "ebpo_checkpoint_complete.json").unlink()
    assert last_checkpoint(checkpoints, say=said.append) is None
    assert said[-1].endswith("RL starts again from step 0")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match=r"'.*file' is not a directory; the run cannot be resumed"):
        last_checkpoint(tmp_path / "file")


def test_read_metrics_skips_a_last_line_cut_short_and_names_a_broken_one(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2, "rew')  # killed while appending
    assert read_metrics(path) == [{"step": 1}]
    path.write_text('{"step": 1}\n{"step": 2, "rew\n{"step": 3}\n')
    with pytest.raises(ValueError, match=r"metrics\.jsonl' line 2 is not JSON"):
        read_metrics(path)
    path.write_text('{"step": 1}\n[1, 2]\n')
    with pytest.raises(ValueError, match=r"line 2 should be a JSON object"):
        read_metrics(path)
    path.write_text('{"step": "two"}\n')
    with pytest.raises(ValueError, match=r"holds a record whose step is 'two'"):
        truncate_metrics(path, 3)


def test_truncate_metrics_drops_the_summary_of_the_interrupted_part(tmp_path):
    """Issue #21 item 12: TRL logs a summary record (train_runtime, ...) when train() ends; the
    interrupted part's one is not a record of the finished run."""
    path = tmp_path / "metrics.jsonl"
    records = [{"step": 1, "reward": 0.1}, {"step": 2, "reward": 0.2}]
    summary = {"step": 2, "train_runtime": 1.0, "train_loss": 0.0}
    path.write_text("".join(json.dumps(r) + "\n" for r in [*records, summary]))
    truncate_metrics(path, 2)
    assert read_metrics(path) == records


class _FullDisk(io.StringIO):
    """A file that takes half a line, then reports a full disk."""

    def __init__(self, real):
        super().__init__()
        self.real = real

    def tell(self):
        return self.real.tell()

    def write(self, text):
        self.real.write(text[: len(text) // 2])
        self.real.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    def truncate(self, size=None):
        return self.real.truncate(size)

    def __exit__(self, *exc):
        self.real.close()


def test_append_metrics_on_a_full_disk_leaves_no_half_record_and_names_the_file(
    tmp_path, monkeypatch
):
    path = tmp_path / "metrics.jsonl"
    append_metrics(path, {"step": 1})
    monkeypatch.setattr(rundir, "open", lambda *a, **k: _FullDisk(open(*a, **k)), raising=False)  # noqa: SIM115
    with pytest.raises(OSError, match="No space left on device") as caught:
        append_metrics(path, {"step": 2, "reward": 0.5})
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(path)
    monkeypatch.undo()
    assert path.read_text() == '{"step": 1}\n'
