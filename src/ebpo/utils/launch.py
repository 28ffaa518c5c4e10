"""The ``accelerate launch`` command line that starts N CPU processes with a gloo process group.

On a machine without GPUs, ``accelerate launch --cpu --num_processes 2`` starts ONE process (its
CPU launcher needs MPI for more), and ``--cpu --multi_gpu`` is refused. What starts N processes
with a gloo process group is the multi-GPU launcher (torchrun underneath) with
``ACCELERATE_USE_CPU=1``: every process then reports ``DistributedType.MULTI_CPU``. This is the
README's CPU launch line, as argv and environment, for the tests and the benchmarks.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["ACCELERATE", "cpu_launch_command", "cpu_launch_env", "free_port"]

#: the accelerate CLI installed beside the running interpreter
ACCELERATE = str(Path(sys.executable).with_name("accelerate"))


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on (for the rendezvous)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def cpu_launch_command(args: Sequence[str], num_processes: int = 2) -> list[str]:
    """``accelerate launch`` with ``num_processes`` CPU processes on this machine, then ``args``
    (``["-m", "ebpo", ...]`` or ``["script.py", ...]``); run it with :func:`cpu_launch_env`."""
    return [
        ACCELERATE, "launch", "--multi_gpu", "--num_processes", str(num_processes),
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", str(free_port()), *args,
    ]  # fmt: skip


def cpu_launch_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a CPU launch: gloo on CPU, one intra-op thread a process (the cores are
    shared out), no network access to the Hub; ``extra`` wins."""
    return {
        **os.environ,
        "ACCELERATE_USE_CPU": "1",
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        **(extra or {}),
    }
