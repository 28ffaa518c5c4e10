"""Run a command under ``accelerate launch`` with several CPU processes (gloo), as CI does.

On a machine without GPUs, ``accelerate launch --cpu --num_processes 2`` starts ONE process (its
CPU launcher needs MPI for more), and ``--cpu --multi_gpu`` is refused. What starts N processes
with a gloo process group is the multi-GPU launcher (torchrun underneath) with
``ACCELERATE_USE_CPU=1``: every process then reports ``DistributedType.MULTI_CPU``.

    done = launch(["-m", "ebpo", "grpo", "--config", "x.yaml"], num_processes=2)
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

#: the accelerate CLI of the interpreter running the tests
ACCELERATE = str(Path(sys.executable).with_name("accelerate"))


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on (for the rendezvous)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launch_command(args: Sequence[str], num_processes: int = 2) -> list[str]:
    """``accelerate launch`` with ``num_processes`` CPU processes on this machine, then ``args``
    (``["-m", "ebpo", ...]`` or ``["script.py", ...]``)."""
    return [
        ACCELERATE, "launch", "--multi_gpu", "--num_processes", str(num_processes),
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", str(free_port()), *args,
    ]  # fmt: skip


def launch_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a CPU launch: gloo on CPU, one intra-op thread a process (2 cores), no
    network access to the Hub."""
    return {
        **os.environ,
        "ACCELERATE_USE_CPU": "1",
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        **(extra or {}),
    }


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
        launch_command(args, num_processes),
        env=launch_env(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
