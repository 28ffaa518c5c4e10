"""A job's run directory: its manifest (``run.json``), what may be replaced or resumed, the run's
JSON files (read naming the file at fault) and the per-step metrics file.

**What makes a directory a run.** Only a manifest that ebpo wrote: a JSON object with the marker
``"format": "ebpo-run"`` and a ``"version"`` this ebpo reads (:data:`MANIFEST_VERSIONS`; version 1,
written before the marker existed, is ``"ebpo_run": 1``), a known ``status`` (``starting``,
``running``, ``interrupted``, ``completed``, ``failed``), its step, the options that define what
the run computes, and ``files``: the entries of the directory that are the run's (names of
:data:`RUN_ENTRIES`: a run claims them all when it starts, which it does only where none of them
belongs to someone else). A ``run.json`` that is anything else (no marker, another version, ``{}``, a
list, broken JSON) is refused in one line naming it, and nothing in its directory is touched.

**What may be replaced.** A directory is refused when it holds anything but an ebpo run, or
another run that has done work (unless the caller asked to overwrite it); a run that failed or
stopped before its first RL step, and holds no checkpoint, holds nothing worth keeping and is
replaced without asking. The manifest records a step only once it has happened: a resume changes
it (and truncates the metrics file) only when training has resumed, so a resume that fails
before leaves the run as it was.
Replacing a run (:func:`clear_run`) removes the entries its manifest lists and nothing else: a
user's own files beside them survive; the run's own folders (``checkpoints/``, ``plots/``, …) go
whole. :func:`check_run_dir` only decides; the job clears once every option and the model have
loaded.

**One job at a time.** The job holds the directory (:func:`ebpo.utils.output_folder.holding`)
for its life, and decides (:func:`check_run_dir`) again once it holds it.

**Several processes.** A run of a launch with N > 1 processes records ``num_processes`` among
its options (a run without it had one process); it is resumed only by a launch of as many.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ebpo.utils.checkpoints import checkpoint_dirs, newest_complete
from ebpo.utils.checks import is_integer, is_real
from ebpo.utils.files import atomic_write, read_json, write_json
from ebpo.utils.output_folder import check_folder, entries_of
from ebpo.utils.structured_input import parse_json

__all__ = [
    "MANIFEST",
    "MANIFEST_VERSIONS",
    "RUN_ENTRIES",
    "STATUSES",
    "RunDir",
    "append_metrics",
    "check_metrics",
    "check_run_dir",
    "clear_run",
    "completed_results",
    "last_checkpoint",
    "read_evaluation",
    "read_metrics",
    "read_run_json",
    "truncate_metrics",
    "write_manifest",
]

MANIFEST = "run.json"
_FORMAT = "ebpo-run"
_VERSION = 2
#: manifest versions this ebpo reads (1: before the marker and the file list)
MANIFEST_VERSIONS = (1, 2)
STATUSES = ("starting", "running", "interrupted", "completed", "failed")
#: statuses of a run that never got past its start: replaced without --overwrite
_DISPOSABLE = ("starting", "failed")
#: the files and folders a run creates in its directory, and nothing else
_RUN_FILES = (
    MANIFEST,
    "eval_before.json",
    "eval_after.json",
    "eval_validation.json",
    "results.json",
    "metrics.jsonl",
    "estimator_state.json",
)
_RUN_DIRS = ("checkpoints", "tensorboard", "plots", "final_model")
RUN_ENTRIES = _RUN_FILES + _RUN_DIRS
#: keys of the record TRL logs when training ends (runtime, mean loss): one per train() call
_SUMMARY_KEYS = ("train_runtime",)


@dataclass(frozen=True)
class RunDir:
    """What :func:`check_run_dir` decided about a directory."""

    path: Path
    #: the manifest of the run to continue (``resume``), else None
    manifest: dict[str, Any] | None
    #: the directory holds a run that the job must clear (:func:`clear_run`) before it starts
    replace: bool
    #: the entries of the run to replace (its manifest's ``files``); empty unless ``replace``
    owned: tuple[str, ...] = ()


def check_run_dir(
    path: Path, identity: Mapping[str, Any], *, resume: bool, overwrite: bool
) -> RunDir:
    """Decide what to do with ``path``; raise ValueError (naming ``output_dir`` or the file at
    fault) when it cannot be used. Changes nothing on disk. ``identity`` is the JSON form of the
    options that define the run. A symbolic link is followed: the run goes into its target."""
    check_folder(path, "output_dir")  # a file, below a file, not writable, a loop, a dead link
    manifest = _read_manifest(path / MANIFEST)
    entries = entries_of(path)
    if resume:
        if manifest is None:
            raise ValueError(
                f"nothing to resume: {str(path)!r} holds no ebpo run ({MANIFEST} missing)"
            )
        ran, asked = manifest["config"].get("num_processes", 1), identity.get("num_processes", 1)
        if ran != asked:
            raise ValueError(
                f"output_dir {str(path)!r} holds a run of {ran} process(es); resume it with as "
                f"many (accelerate launch --num_processes {ran}), not {asked}"
            )
        if manifest["config"] != identity:
            diff = _differences(manifest["config"], identity)
            raise ValueError(
                f"output_dir {str(path)!r} holds a different run; cannot resume it with other options ({diff})"
            )
        _check_kinds(path)
        return RunDir(path, manifest, replace=False)
    if not entries:
        return RunDir(path, None, replace=False)
    if manifest is None:
        raise ValueError(
            f"output_dir {str(path)!r} is not empty and holds no ebpo run; choose another directory"
        )
    # a run that never got past its start holds nothing worth keeping, unless a checkpoint says
    # otherwise (its manifest may lag behind: it records only steps that have happened)
    saved = [p.name for p in checkpoint_dirs(path / "checkpoints")]
    disposable = manifest["status"] in _DISPOSABLE and not manifest["global_step"] and not saved
    if not (overwrite or disposable):
        holds = f"; {', '.join(saved[-2:])} saved" if saved else ""
        raise ValueError(
            f"output_dir {str(path)!r} already holds a run ({manifest['status']}, step "
            f"{manifest['global_step']}{holds}); pass --resume to continue it or --overwrite to "
            "replace it"
        )
    strangers = [name for name in entries if name in RUN_ENTRIES and name not in manifest["files"]]
    if strangers:
        raise ValueError(
            f"output_dir {str(path)!r} holds {strangers[0]!r}, which its run did not create; "
            "move it away first (the new run writes there)"
        )
    return RunDir(path, None, replace=True, owned=tuple(manifest["files"]))


def clear_run(run: RunDir) -> None:
    """Remove the entries of the run ``run`` replaces (:attr:`RunDir.owned`), the manifest last,
    so that an interruption leaves a manifest listing what is left. A symbolic link is removed,
    never followed. Files and folders the run did not create stay."""
    for name in sorted(run.owned, key=lambda n: n == MANIFEST):
        entry = run.path / name
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink(missing_ok=True)


def _read_manifest(path: Path) -> dict[str, Any] | None:
    """The manifest at ``path`` (normalised: ``version`` and ``files`` set), None when there is
    none, ValueError naming ``path`` when it is not a manifest this ebpo wrote."""
    if not path.is_file():
        return None
    try:
        manifest = read_json(path)
    except (OSError, ValueError) as error:
        raise ValueError(
            f"{str(path)!r} is not a readable run manifest ({error}); remove it or choose another output_dir"
        ) from error
    marked, version = _version(manifest)
    if not marked:
        raise ValueError(
            f'{str(path)!r} is not a run manifest written by ebpo (no "format": "{_FORMAT}" '
            f"marker), so {str(path.parent)!r} is not an ebpo run; choose another output_dir"
        )
    if not (is_integer(version) and version in MANIFEST_VERSIONS):
        raise ValueError(
            f"{str(path)!r} is an ebpo run manifest of version {version!r}; this ebpo reads "
            f"versions {list(MANIFEST_VERSIONS)} (a newer ebpo wrote it?); choose another output_dir"
        )
    files = manifest.get("files") if version > 1 else list(RUN_ENTRIES)
    problem = _manifest_problem(manifest, files)
    if problem:
        raise ValueError(
            f"{str(path)!r} is not a valid ebpo run manifest ({problem}); remove it or choose another output_dir"
        )
    return {**manifest, "version": version, "files": list(files)}


def _version(manifest: Any) -> tuple[bool, Any]:
    """(whether the manifest carries ebpo's marker, its format version)."""
    if not isinstance(manifest, dict):
        return False, None
    if manifest.get("format") == _FORMAT:
        return True, manifest.get("version")
    legacy = manifest.get("ebpo_run")  # version 1: the marker was the version
    return (True, 1) if is_integer(legacy) and legacy == 1 else (False, None)


def _manifest_problem(manifest: dict[str, Any], files: Any) -> str | None:
    if manifest.get("status") not in STATUSES:
        return f"status must be one of {list(STATUSES)}, got {manifest.get('status')!r}"
    step = manifest.get("global_step")
    if not (is_integer(step) and step >= 0):
        return f"global_step must be an integer >= 0, got {step!r}"
    if not isinstance(manifest.get("config"), dict):
        return f"config must be an object, got {type(manifest.get('config')).__name__}"
    if not (
        isinstance(files, list)
        and all(isinstance(name, str) for name in files)
        and MANIFEST in files
        and set(files) <= set(RUN_ENTRIES)
    ):
        return f"files must list {MANIFEST} and only names of {list(RUN_ENTRIES)}, got {files!r}"
    return None


def _check_kinds(path: Path) -> None:
    """Every entry of a run to resume that exists is what the run made it: a file or a folder."""
    for names, expected, test in (
        (_RUN_FILES, "file", Path.is_file),
        (_RUN_DIRS, "directory", Path.is_dir),
    ):
        for name in names:
            entry = path / name
            if (entry.exists() or entry.is_symlink()) and not test(entry):
                raise ValueError(
                    f"{str(entry)!r} should be the run's {expected} but is not; move it away to resume"
                )


def _differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    return ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys[:5])


def write_manifest(path: Path, identity: Mapping[str, Any], status: str, global_step: int) -> None:
    """Write (atomically) ``run.json`` with ``status`` and ``global_step``; keeps ``created``. The
    run claims every name of :data:`RUN_ENTRIES` (``files``): the job starts only in a directory
    where none of them belongs to someone else (:func:`check_run_dir`)."""
    try:
        previous = _read_manifest(path / MANIFEST)
    except ValueError:
        previous = None
    now = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    write_json(
        path / MANIFEST,
        {
            "format": _FORMAT,
            "version": _VERSION,
            "status": status,
            "global_step": global_step,
            "created": (previous or {}).get("created") or now,
            "updated": now,
            "config": dict(identity),
            "files": list(RUN_ENTRIES),
        },
    )


def read_run_json(
    path: Path, *, numbers: Sequence[str] = (), objects: Sequence[str] = ()
) -> dict[str, Any]:
    """The JSON object in the run file ``path``, with a finite number under each key of
    ``numbers`` and an object under each of ``objects``; ValueError naming the file otherwise."""
    try:
        value = read_json(path)
    except FileNotFoundError as error:
        raise ValueError(f"{str(path)!r} is missing") from error
    except (OSError, ValueError) as error:
        raise ValueError(f"{str(path)!r} is not readable JSON ({error})") from error
    if not isinstance(value, dict):
        raise ValueError(f"{str(path)!r} should hold a JSON object, got a {type(value).__name__}")
    for key in numbers:
        if not (is_real(value.get(key)) and math.isfinite(value[key])):
            raise ValueError(
                f"{str(path)!r}: {key!r} should be a finite number, got {value.get(key)!r}"
            )
    for key in objects:
        if not isinstance(value.get(key), dict):
            raise ValueError(
                f"{str(path)!r}: {key!r} should be a JSON object, got {value.get(key)!r}"
            )
    return value


def completed_results(path: Path) -> dict[str, Any]:
    """What the completed run in ``path`` returned (its ``results.json``)."""
    if not (path / "results.json").exists():
        raise ValueError(
            f"output_dir {str(path)!r} holds a completed run whose results.json is missing; "
            "pass --overwrite to run it again"
        )
    return read_run_json(path / "results.json", objects=("before",))


def read_evaluation(path: Path) -> dict[str, Any] | None:
    """The held-out evaluation a resumed run made before RL, None when it has none yet."""
    if not (path.exists() or path.is_symlink()):
        return None
    try:
        return read_run_json(
            path,
            numbers=("overall", "all_fail_frac", "all_pass_frac"),
            objects=("topics", "tiers", "cells"),
        )
    except ValueError as error:
        raise ValueError(f"{error}; remove it, and --resume evaluates again") from error


# ---------------------------------------------------------------------- metrics
def append_metrics(path: Path, record: Mapping[str, Any]) -> None:
    """Append ``record`` as one line to the metrics file ``path``. A failed write (a full disk)
    is undone, so the file never ends in half a record, and the OSError names ``path``."""
    line = json.dumps(record) + "\n"
    with open(path, "a", encoding="utf-8") as f:
        start = f.tell()
        try:
            f.write(line)
            f.flush()
        except OSError as error:
            with contextlib.suppress(OSError):
                f.truncate(start)
            error.filename = error.filename or str(path)
            raise


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a run's ``metrics.jsonl`` (empty if the file does not exist yet). A last
    line cut short (the job was killed while writing it) is skipped; any other line that is not
    a JSON object raises ValueError naming the file and the line."""
    path = Path(path)
    if not path.is_file():
        return []
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = parse_json(line)  # depth and repeated keys bounded
        except ValueError as error:
            if number == len(lines):  # no newline after it: a write cut short
                break
            raise ValueError(f"{str(path)!r} line {number} is not JSON ({error})") from error
        if not isinstance(record, dict):
            raise ValueError(
                f"{str(path)!r} line {number} should be a JSON object, got {line[:40]!r}"
            )
        records.append(record)
    return records


def truncate_metrics(path: Path, step: int) -> None:
    """Prepare the metrics file for a resume from ``step``: drop the records logged after it
    (their steps are redone) and the end-of-training summary records (the resumed training logs
    its own), and a last line cut short."""
    if not path.is_file():
        return
    keep = [
        json.dumps(record) + "\n"
        for record, logged in _stepped(path, read_metrics(path))
        if logged <= step and not any(key in record for key in _SUMMARY_KEYS)
    ]
    with atomic_write(path) as f:
        f.writelines(keep)


def check_metrics(path: Path) -> None:
    """Refuse (ValueError naming the file and the line) a metrics file that a resume could not
    truncate: a line that is not a JSON object, a record whose step is not a number."""
    _stepped(path, read_metrics(path))


def _stepped(path: Path, records: list[dict[str, Any]]) -> list[tuple[dict[str, Any], float]]:
    """``(record, its step)`` of each record; a record without a step counts as step 0."""
    out = []
    for record in records:
        logged = record.get("step", 0)
        if not (is_real(logged) and math.isfinite(logged)):
            raise ValueError(f"{str(path)!r} holds a record whose step is {logged!r}, not a number")
        out.append((record, logged))
    return out


def last_checkpoint(checkpoints: Path, say: Callable[[str], None] | None = None) -> Path | None:
    """The complete ``checkpoint-N`` directory with the largest N (:mod:`ebpo.utils.checkpoints`:
    marked complete by the trainer, every file as it was written), or None. Newer incomplete ones
    (a save that was killed or ran out of disk) are skipped, and ``say`` (default: a line on stderr)
    tells which and why; with none complete, RL starts again from step 0, which gives the same run.
    Raises ValueError when ``checkpoints`` is not a directory."""
    if checkpoints.exists() and not checkpoints.is_dir():
        raise ValueError(f"{str(checkpoints)!r} is not a directory; the run cannot be resumed")
    found, skipped = newest_complete(checkpoints)
    if skipped:
        then = f"resuming from {found.name} instead" if found else "RL starts again from step 0"
        for path, reason in skipped:
            (say or _stderr)(f"{path} is incomplete ({reason}): {then}")
    return found


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)
