"""A job's run directory: its manifest (``run.json``), what may be replaced or resumed, and the
per-step metrics file.

The manifest records the options that define what the run computes, its status (``starting``,
``running``, ``interrupted``, ``completed``, ``failed``) and its step. A directory is refused when
it holds anything that is not an ebpo run, or another run that has done work (unless the caller
asked to overwrite it); a run that failed or stopped before its first RL step holds nothing worth
keeping and is replaced without asking. Nothing here deletes anything: :func:`check_run_dir` only
decides, and the job deletes once every option and the model have been loaded.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ebpo.utils.files import atomic_write, check_output_path, read_json, write_json

__all__ = [
    "MANIFEST",
    "RunDir",
    "check_run_dir",
    "last_checkpoint",
    "read_metrics",
    "truncate_metrics",
    "write_manifest",
]

MANIFEST = "run.json"
_MANIFEST_VERSION = 1
#: statuses of a run that never got past its start: replaced without --overwrite
_DISPOSABLE = ("starting", "failed")


@dataclass(frozen=True)
class RunDir:
    """What :func:`check_run_dir` decided about a directory."""

    path: Path
    #: the manifest of the run to continue (``resume``), else None
    manifest: dict[str, Any] | None
    #: the directory holds a run that the job must delete before it starts
    replace: bool


def check_run_dir(
    path: Path, identity: Mapping[str, Any], *, resume: bool, overwrite: bool
) -> RunDir:
    """Decide what to do with ``path``; raise ValueError (naming ``output_dir``) when it cannot be
    used. Changes nothing on disk. ``identity`` is the JSON form of the options that define the run."""
    check_output_path(path, "output_dir", kind="dir")  # a file, a path below a file, not writable
    manifest_path = path / MANIFEST
    manifest = _read_manifest(manifest_path)
    nonempty = path.is_dir() and any(path.iterdir())
    if resume:
        if manifest is None:
            raise ValueError(
                f"nothing to resume: {str(path)!r} holds no ebpo run ({MANIFEST} missing)"
            )
        if manifest.get("config") != identity:
            diff = _differences(manifest.get("config", {}), identity)
            raise ValueError(
                f"output_dir {str(path)!r} holds a different run; cannot resume it with other options ({diff})"
            )
        return RunDir(path, manifest, replace=False)
    if not nonempty:
        return RunDir(path, None, replace=False)
    if manifest is None:
        raise ValueError(
            f"output_dir {str(path)!r} is not empty and holds no ebpo run; choose another directory"
        )
    disposable = manifest.get("status") in _DISPOSABLE and not manifest.get("global_step")
    if not (overwrite or disposable):
        raise ValueError(
            f"output_dir {str(path)!r} already holds a run ({manifest.get('status')}, step "
            f"{manifest.get('global_step')}); pass --resume to continue it or --overwrite to replace it"
        )
    return RunDir(path, None, replace=True)


def _read_manifest(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        manifest = read_json(path)
    except (OSError, ValueError) as error:
        raise ValueError(
            f"{str(path)!r} is not a readable run manifest ({error}); remove it or choose another output_dir"
        ) from error
    return manifest if isinstance(manifest, dict) else None


def _differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    return ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys[:5])


def write_manifest(path: Path, identity: Mapping[str, Any], status: str, global_step: int) -> None:
    """Write (atomically) ``run.json`` with ``status`` and ``global_step``; keeps ``created``."""
    manifest_path = path / MANIFEST
    created = _read_manifest(manifest_path) if manifest_path.is_file() else None
    now = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    write_json(
        manifest_path,
        {
            "ebpo_run": _MANIFEST_VERSION,
            "status": status,
            "global_step": global_step,
            "created": (created or {}).get("created") or now,
            "updated": now,
            "config": dict(identity),
        },
    )


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a run's ``metrics.jsonl`` (empty if the file does not exist yet)."""
    path = Path(path)
    if not path.is_file():
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def truncate_metrics(path: Path, step: int) -> None:
    """Drop records logged after ``step``: they belong to steps that a resume will redo."""
    if not path.is_file():
        return
    keep = [
        json.dumps(record) + "\n" for record in read_metrics(path) if record.get("step", 0) <= step
    ]
    with atomic_write(path) as f:
        f.writelines(keep)


def last_checkpoint(checkpoints: Path) -> Path | None:
    """The ``checkpoint-N`` directory with the largest N, or None."""
    found = [
        p
        for p in checkpoints.glob("checkpoint-*")
        if p.is_dir() and p.name.split("-")[-1].isdigit()
    ]
    return max(found, key=lambda p: int(p.name.split("-")[-1])) if found else None
