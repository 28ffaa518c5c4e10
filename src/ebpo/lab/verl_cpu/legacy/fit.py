"""One run of verl's legacy ``RayPPOTrainer.fit()`` in the smoke: the config of a
:class:`~ebpo.lab.verl_cpu.shared.run_spec.RunSpec`, run by a
:class:`~ebpo.lab.verl_cpu.legacy.run.TaskRunner` actor."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ebpo.lab.verl_cpu.legacy.run import compose_config
from ebpo.lab.verl_cpu.shared.results import CONSOLE_LOG, RunResult
from ebpo.lab.verl_cpu.shared.run_spec import RunSpec

__all__ = ["fit_legacy"]


def fit_legacy(
    runner: Any, spec: RunSpec, *, curriculum_sampler: bool = False, verbose: bool = False
) -> RunResult:
    """One ``RayPPOTrainer.fit()`` of ``spec`` in its run directory by ``runner``
    (a :class:`~ebpo.lab.verl_cpu.legacy.run.TaskRunner` actor, inside
    :func:`~ebpo.lab.verl_cpu.legacy.run.ray_session`), with ebpo's ``CurriculumSampler`` as
    verl's train sampler if ``curriculum_sampler``; ``verbose`` leaves verl's console on stdout."""
    import ray  # heavy optional import (verl extra)

    if spec.checkpoint_dir is not None and not os.path.isabs(spec.checkpoint_dir):
        # one Ray session runs every legacy run: its processes' working directory is not the run's
        raise ValueError(
            f"the legacy CPU runs take an absolute checkpoint_dir; got {spec.checkpoint_dir!r}"
        )
    run_dir = Path(spec.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    config = compose_config(spec)
    console = None if verbose else str(run_dir / CONSOLE_LOG)
    result: RunResult = ray.get(runner.run.remote(config, curriculum_sampler, console))
    result.console = console or ""
    return result
