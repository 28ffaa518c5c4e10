"""A job's run directory through its life: one object, one method per event, each of which writes
the manifest (:func:`~ebpo.lab.runs.directory.write_manifest`) the way that event needs.

    run = RunLifecycle(check_run_dir(path, identity, resume=..., overwrite=...), identity)
    run.started()          # claims the directory; a new run's manifest says "starting", step 0
    run.running(step)      # training has begun or resumed, or a checkpoint was saved
    run.interrupted(step)  # a signal stopped it at a checkpoint: --resume continues
    run.completed(step)    # the last file is written
    run.failed(step)       # training diverged

A resumed run's manifest is left as it was until its training has resumed (``running`` with
``resuming=True``, which first drops the metrics logged after the checkpoint), so a resume that
fails before that leaves the run unchanged. :meth:`RunLifecycle.started` also removes what an
earlier job on this directory left behind when it was killed: our own temporary files (a file
written atomically goes through ``.<name>.<8 hex digits>.tmp`` beside it, :mod:`ebpo.utils.files`)
of the run's files and of its plots. A user's file never matches: only those names, in a directory
the job holds the lock of, go.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ebpo.lab.runs import directory as rundir
from ebpo.utils.checks import is_real

__all__ = ["RunLifecycle", "logged_loss_sum", "remove_stale_temporaries"]

#: the name of a temporary file that :func:`ebpo.utils.files.atomic_path` makes beside ``name``
_TEMPORARY = r"\.{name}\.[0-9a-f]{{8}}\.tmp"
#: the run's folder of PNG plots, whose temporary files go too
_PLOTS = "plots"


@dataclass(frozen=True)
class RunLifecycle:
    """The run in ``decision.path`` (what :func:`~ebpo.lab.runs.directory.check_run_dir` decided)
    of the options ``identity``. Only the process that holds the directory's lock calls it."""

    decision: rundir.RunDir
    identity: Mapping[str, Any]

    @property
    def path(self) -> Path:
        return self.decision.path

    @property
    def resumed(self) -> bool:
        """Whether this job continues a run (its manifest is already there)."""
        return self.decision.manifest is not None

    @property
    def finished_before(self) -> bool:
        """Whether the run to resume has already completed: nothing is left to do."""
        manifest = self.decision.manifest  # None unless resumed
        return manifest is not None and manifest["status"] == "completed"

    def started(self) -> None:
        """Claim the directory: clear the run it replaces (only that run's entries: the user's own
        files stay), remove our stale temporary files, create the directory; a new run's manifest
        says ``starting`` at step 0."""
        if self.decision.replace:
            rundir.clear_run(self.decision)
        self.path.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(self.path)
        if not self.resumed:
            self._write("starting", 0)

    def running(self, step: int, *, resuming: bool = False) -> None:
        """Training is at ``step``: it has started, resumed (``resuming``: the metrics logged
        after ``step`` are dropped first, as those steps are done again) or saved a checkpoint."""
        if resuming:
            rundir.truncate_metrics(self.path / "metrics.jsonl", step)
        self._write("running", step)

    def interrupted(self, step: int) -> None:
        """A signal stopped training at ``step``, where a checkpoint was saved."""
        self._write("interrupted", step)

    def completed(self, step: int) -> None:
        """Every file of the run is written."""
        self._write("completed", step)

    def failed(self, step: int) -> None:
        """Training diverged at ``step``: the run holds nothing worth resuming."""
        self._write("failed", step)

    def _write(self, status: str, step: int) -> None:
        rundir.write_manifest(self.path, self.identity, status, step)


def remove_stale_temporaries(path: Path) -> list[Path]:
    """Remove the temporary files that an atomic write of one of the run's files (or plots) left
    in ``path`` when its process was killed; returns what went. Only names of that exact form: the
    run's own file names, and ``plots/`` (the run's folder) with any ``.png``."""
    names = "|".join(re.escape(name) for name in rundir.RUN_ENTRIES)
    patterns = [
        (path, re.compile(_TEMPORARY.format(name=f"(?:{names})"))),
        (path / _PLOTS, re.compile(_TEMPORARY.format(name=r"[^/]+\.png"))),
    ]
    removed = []
    for folder, pattern in patterns:
        if folder.is_symlink() or not folder.is_dir():
            continue
        for entry in folder.iterdir():
            if pattern.fullmatch(entry.name) and entry.is_file() and not entry.is_symlink():
                with contextlib.suppress(FileNotFoundError):
                    entry.unlink()
                    removed.append(entry)
    return removed


def logged_loss_sum(path: Path, step: int) -> float:
    """The sum of the per-step training losses logged in the metrics file ``path`` up to
    ``step``: each record's ``loss`` is the mean over the steps since the record before it, so it
    counts that many times. This is the part of transformers' running loss total (whose mean over
    all steps is the summary's ``train_loss``) that a resumed training did not see."""
    previous: float  # the last step counted (a logged step is any real number)
    total, previous = 0.0, 0
    for record in rundir.read_metrics(path):
        logged, loss = record.get("step"), record.get("loss")
        if not (is_real(logged) and is_real(loss) and math.isfinite(loss)) or logged > step:
            continue
        total += loss * (logged - previous)
        previous = logged
    return total
