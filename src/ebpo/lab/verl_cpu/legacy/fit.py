"""One run of verl's legacy ``RayPPOTrainer.fit()`` in the smoke: the config of a
:class:`~ebpo.lab.verl_cpu.shared.run_spec.RunSpec`, run by a
:class:`~ebpo.lab.verl_cpu.legacy.run.TaskRunner` actor."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from ebpo.lab.verl_cpu.legacy.run import compose_config
from ebpo.lab.verl_cpu.shared.results import CONSOLE_LOG, RunResult
from ebpo.lab.verl_cpu.shared.run_spec import RunSpec

__all__ = ["fit_legacy"]


def fit_legacy(
    runner: Any, spec: RunSpec, *, curriculum_sampler: bool = False, verbose: bool = False
) -> RunResult:
    """One ``RayPPOTrainer.fit()`` of ``spec`` in its run directory (emptied first) by ``runner``
    (a :class:`~ebpo.lab.verl_cpu.legacy.run.TaskRunner` actor, inside
    :func:`~ebpo.lab.verl_cpu.legacy.run.ray_session`), with ebpo's ``CurriculumSampler`` as
    verl's train sampler if ``curriculum_sampler``; ``verbose`` leaves verl's console on stdout."""
    import ray  # heavy optional import (verl extra)

    run_dir = Path(spec.run_dir)
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    config = compose_config(spec)
    console = None if verbose else str(run_dir / CONSOLE_LOG)
    result: RunResult = ray.get(runner.run.remote(config, curriculum_sampler, console))
    result.console = console or ""
    return result
