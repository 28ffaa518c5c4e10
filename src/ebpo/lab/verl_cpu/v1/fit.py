"""One run of verl's default path in the smoke: ``python -m verl.trainer.main_ppo`` of a
:class:`~ebpo.lab.verl_cpu.shared.run_spec.RunSpec` in its run directory, and what it left behind
(trace, logged metrics, checkpoints, the last checkpoint's estimator state, the launch)."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from ebpo.integrations.verl.state import STATE_FILENAME
from ebpo.lab.verl_cpu.shared.results import (
    CONSOLE_LOG,
    METRICS_LOG,
    TRACE_DIR,
    TRACE_ENV,
    RunResult,
    read_logged_metrics,
    read_trace,
)
from ebpo.lab.verl_cpu.shared.run_spec import RunSpec
from ebpo.lab.verl_cpu.v1.launch import run_main_ppo, v1_overrides

__all__ = ["fit_v1"]


def fit_v1(
    spec: RunSpec,
    *,
    timeout: float = 900.0,
    verbose: bool = False,
    env: Mapping[str, str] | None = None,
) -> RunResult:
    """One ``main_ppo`` of ``spec`` started in its run directory (its working directory, as a user
    starts it where the run's files are), killed after ``timeout`` seconds; ``verbose`` echoes
    verl's console; ``env`` is added to the environment of the run and of every Ray worker. The
    result carries the :class:`~ebpo.lab.verl_cpu.v1.launch.Launch` (exit code, listeners,
    leftovers) whether or not the run succeeded."""
    run_dir = Path(spec.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    trace_dir = run_dir / TRACE_DIR
    # Ray's sockets live under its temp dir: a short path (unix sockets are limited to 107 bytes)
    ray_temp = tempfile.mkdtemp(prefix="ebpo-ray-", dir="/tmp")
    overrides = v1_overrides(
        spec,
        ray_temp_dir=ray_temp,
        env={
            **dict(env or {}),
            TRACE_ENV: str(trace_dir),
            "VERL_FILE_LOGGER_PATH": str(run_dir / METRICS_LOG),
        },
    )
    console = run_dir / CONSOLE_LOG
    try:
        launch = run_main_ppo(
            overrides,
            cwd=str(run_dir),
            console=str(console),
            timeout=timeout,
            env=env,
            echo=verbose,
        )
    finally:
        shutil.rmtree(ray_temp, ignore_errors=True)
    checkpoints = sorted(str(p) for p in Path(spec.checkpoints).glob("global_step_*") if p.is_dir())
    last = Path(checkpoints[-1]) / STATE_FILENAME if checkpoints else None
    state = json.loads(last.read_text()) if last is not None and last.is_file() else {}
    return RunResult(
        run_dir=str(run_dir),
        trace=read_trace(str(trace_dir)),
        metrics=read_logged_metrics(str(run_dir / METRICS_LOG)),
        estimator_state=state,
        seconds=launch.seconds,
        checkpoints=checkpoints,
        console=str(console),
        launch=launch,
    )
