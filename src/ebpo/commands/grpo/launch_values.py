"""``ebpo grpo``'s launcher values, checked before anything starts (the dry run and the real run
alike): the accelerate config file and the process counts.

* **The accelerate config** (``accelerate_config: FILE`` / ``config_file: FILE``, or one of TRL's
  profiles): read by :mod:`ebpo.utils.structured_input` (size, depth, repeated keys, aliases
  bounded), a mapping, then loaded by accelerate's own loader
  (``accelerate.commands.config.config_args.load_config_from_file``: unknown keys, the
  ``compute_environment`` / ``distributed_type`` names) and each of its keys checked against the
  annotation of its field of accelerate's ``ClusterConfig`` / ``SageMakerConfig``
  (:func:`ebpo.utils.field_values.check_field_value`; a string is left to accelerate where a
  scalar belongs, as accelerate's own files write ``downcast_bf16: 'no'``): accelerate itself
  would take ``dynamo_config: 5`` as it is and fail inside the launch.
* **The process counts**: ``num_processes`` and ``num_machines`` (given as a flag, a YAML key or in
  the accelerate config) plain decimal integers between 1 and :data:`MAX_PROCESSES`
  (:func:`check_process_counts`), refused with the numbers before accelerate's parser or launcher
  builds anything for them; and ``num_processes`` at most :func:`capacity` — this machine's GPUs
  (its CPUs without a GPU, or with ``--cpu`` / ``use_cpu``) times ``num_machines``
  (:func:`over_capacity`; what to change is said by :mod:`.this_machine`: the real run stops with
  it, the dry run ends with it).
"""

from __future__ import annotations

import dataclasses
import os
import re
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from accelerate.commands.config.config_args import load_config_from_file

from ebpo.utils.field_values import check_field_value
from ebpo.utils.structured_input import read_yaml_file

__all__ = [
    "COUNT_FLAGS",
    "MAX_PROCESSES",
    "accelerator_count",
    "capacity",
    "check_accelerate_config",
    "check_process_counts",
    "flag_value",
    "over_capacity",
]

#: the most processes one launch may ask for, whatever the machines (a typo's bound: 1e9 would make
#: torchrun build a billion worker records)
MAX_PROCESSES = 4096
#: the launcher flags that count something
COUNT_FLAGS = ("--num_processes", "--num_machines")
_DECIMAL = re.compile(r"[0-9]+")


def check_accelerate_config(path: str, where: str) -> Any:
    """The accelerate config ``path`` as accelerate's loader reads it; ValueError (one line naming
    ``where`` and the problem) when it cannot be read, is not a mapping, or has a key accelerate
    does not know or a value of the wrong type."""
    if not Path(path).is_file():
        raise ValueError(f"{where}: {path!r} is not a file")
    try:
        data = read_yaml_file(path, f"{where} {path!r}")
    except OSError as error:
        raise ValueError(f"{where} {path!r} cannot be read ({error.strerror or error})") from error
    if not isinstance(data, dict):
        kind = "nothing" if data is None else f"a {type(data).__name__}"
        raise ValueError(
            f"{where} {path!r} should hold a mapping of accelerate config keys "
            f"(`accelerate config` writes one), got {kind}"
        )
    try:
        config = load_config_from_file(path)
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        message = " ".join(str(error).split())
        raise ValueError(f"{where} {path!r}: accelerate cannot load it: {message}") from error
    hints = typing.get_type_hints(type(config))
    names = {f.name for f in dataclasses.fields(config)}
    for key, value in data.items():
        if key in names and value is not None:
            # a string where a scalar belongs is left to accelerate, as its own files write
            # `downcast_bf16: 'no'` for a bool field; counts are checked strictly below
            check_field_value(f"{where} {path!r}: {key}", value, hints[key], strings_convert=True)
    return config


def flag_value(args: Sequence[str], flag: str) -> str | None:
    """The last value of ``flag`` in accelerate launch arguments (``--flag V`` or ``--flag=V``)."""
    found = None
    for i, token in enumerate(args):
        name, has_value, value = token.partition("=")
        if name == flag:
            found = value if has_value else (args[i + 1] if i + 1 < len(args) else None)
    return found


def accelerator_count() -> int:
    """GPUs (or other accelerators) torch sees on this machine."""
    return torch.accelerator.device_count() if torch.accelerator.is_available() else 0


def capacity(on_cpus: bool) -> tuple[int, str]:
    """``(how many processes one machine takes, what they are)``: its GPUs (accelerators), or its
    CPUs (those this process may run on) when the launch runs on CPUs."""
    if not on_cpus:
        gpus = accelerator_count()
        if gpus:
            return gpus, "GPUs"
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return cpus or 1, "CPUs"


def check_process_counts(args: Sequence[str], config: Any) -> dict[str, int]:
    """``{"num_processes": N, "num_machines": M}`` (those given) of the accelerate launch arguments
    ``args``, or else of the loaded accelerate ``config`` (None without one); ValueError (one line)
    unless each is a plain decimal integer between 1 and :data:`MAX_PROCESSES`."""
    counts = {}
    for flag in COUNT_FLAGS:
        name = flag[2:]
        text = flag_value(args, flag)
        if text is None and config is not None and getattr(config, name, -1) not in (-1, None):
            text = str(getattr(config, name))
        if text is None:
            continue
        if not _DECIMAL.fullmatch(text) or not 1 <= int(text) <= MAX_PROCESSES:
            raise ValueError(
                f"{name} must be an integer between 1 and {MAX_PROCESSES}, got {text!r}"
            )
        counts[name] = int(text)
    return counts


def over_capacity(counts: dict[str, int], on_cpus: bool) -> tuple[int, str] | None:
    """``(the most processes this launch may start, why)`` when ``counts["num_processes"]`` is
    more than :func:`capacity` times ``num_machines``; else None. ``on_cpus``: the launch runs on
    CPUs (``--cpu``, ``use_cpu`` or no GPU here)."""
    if "num_processes" not in counts:
        return None
    machines = counts.get("num_machines", 1)
    per_machine, what = capacity(on_cpus)
    most = per_machine * machines
    if counts["num_processes"] <= most:
        return None
    return most, (
        f"num_processes {counts['num_processes']} is more than this machine's {per_machine} "
        f"{what} x {machines} machine(s) (num_machines) = {most}"
    )
