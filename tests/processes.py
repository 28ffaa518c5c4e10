"""Run a command under ``accelerate launch`` with several CPU processes (gloo), as CI does
(the command line and environment: :mod:`ebpo.utils.launch`).

    done = launch(["-m", "ebpo", "grpo", "--config", "x.yaml"], num_processes=2)
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from ebpo.utils.launch import cpu_launch_command, cpu_launch_env, free_port

__all__ = ["free_port", "launch"]


def launch(
    args: Sequence[str],
    num_processes: int = 2,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    timeout: float = 900,
) -> subprocess.CompletedProcess[str]:
    """Run ``args`` under ``accelerate launch`` with ``num_processes`` CPU processes; returns the
    finished process (stdout and stderr captured as text). Does not check the exit code."""
    return subprocess.run(
        cpu_launch_command(args, num_processes),
        env=cpu_launch_env(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
