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
fails before that leaves the run unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ebpo.lab.runs import directory as rundir

__all__ = ["RunLifecycle"]


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
        return self.resumed and self.decision.manifest["status"] == "completed"  # type: ignore[index]

    def started(self) -> None:
        """Claim the directory: clear the run it replaces (only that run's entries: the user's own
        files stay), create the directory; a new run's manifest
        says ``starting`` at step 0."""
        if self.decision.replace:
            rundir.clear_run(self.decision)
        self.path.mkdir(parents=True, exist_ok=True)
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
