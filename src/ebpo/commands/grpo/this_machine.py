"""What a recipe needs changed to run on THIS machine, said in one line: the real run stops with
it (exit code 2, before the data or the model loads), the dry run ends with it.

* **No GPU here** (no accelerator torch can use): the keys that need one — ``bf16`` / ``fp16``
  (and their ``*_full_eval``), ``tf32``, ``use_vllm``, ``load_in_4bit`` / ``load_in_8bit``
  (bitsandbytes), a flash-attention ``attn_implementation`` — are named with the value a CPU run
  takes, and ``use_cpu: true`` with them when the recipe does not set it (transformers refuses
  ``bf16`` without it: "Your setup doesn't support bf16/gpu"). ``bf16`` with ``use_cpu: true``
  is a CPU run in bf16 autocast, which transformers runs: not named.
* **More processes than the machines hold** (:func:`.launch_values.over_capacity`):
  ``num_processes`` at most this machine's GPUs (CPUs without one) times ``num_machines``.

The recipe's values are read as TRL's parser sets them (the YAML as defaults, the command line
over it) but before the config classes are built
(:func:`ebpo.commands.grpo.grpo_script.recipe_values`): ``TrainingArguments`` itself refuses
``bf16`` and ``tf32`` on a CPU, with transformers' own message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ebpo.commands.grpo.launch_values import accelerator_count, over_capacity
from ebpo.commands.grpo.launcher import launches_on_cpus, process_counts

__all__ = ["CPU_ATTENTION", "GPU_ONLY", "RECIPE_KEYS", "cpu_parse_flags", "this_machine_line"]

#: keys a run needs a GPU for, and the value a CPU run takes instead
GPU_ONLY: dict[str, Any] = {
    "bf16": False,
    "fp16": False,
    "bf16_full_eval": False,
    "fp16_full_eval": False,
    "tf32": False,
    "use_vllm": False,
    "load_in_4bit": False,
    "load_in_8bit": False,
}
#: what runs on a CPU when the recipe says ``use_cpu: true`` (torch's CPU autocast)
CPU_BF16 = ("bf16", "bf16_full_eval")
#: attention implementations a CPU runs (anything else is a GPU kernel: flash attention)
CPU_ATTENTION = (None, "eager", "sdpa")
#: the recipe's values :func:`this_machine_line` reads
RECIPE_KEYS = (*GPU_ONLY, "use_cpu", "attn_implementation")


def cpu_parse_flags(values: Mapping[str, Any]) -> list[str]:
    """Flags appended to a recipe whose :data:`RECIPE_KEYS` are ``values`` to parse it here
    without transformers refusing a GPU recipe (``use_cpu``; ``tf32`` off where there is no GPU):
    how the dry run parses, and what it describes."""
    flags = ["--use_cpu", "true"]
    if not _has_gpu() and values.get("tf32"):
        flags += ["--tf32", "false"]
    return flags


def this_machine_line(values: Mapping[str, Any], launch_args: Sequence[str]) -> str | None:
    """The one line naming what to set for a recipe (its :data:`RECIPE_KEYS` ``values``, its
    resolved ``accelerate launch`` arguments) to run on this machine, or None when it runs here
    as it is (see the module)."""
    fixes: dict[str, Any] = {}
    reasons: list[str] = []
    if not _has_gpu():
        needs = [key for key, off in GPU_ONLY.items() if values.get(key) not in (None, off)]
        if values.get("use_cpu"):  # bf16 autocast on a CPU, asked for: transformers runs it
            needs = [key for key in needs if key not in CPU_BF16]
        if values.get("attn_implementation") not in CPU_ATTENTION:
            needs.append("attn_implementation")
        if needs:
            reasons.append(f"no GPU here for {', '.join(needs)}")
            if not values.get("use_cpu"):
                fixes["use_cpu"] = True
            fixes.update({key: GPU_ONLY.get(key, "sdpa") for key in needs})
    counts, config = process_counts(launch_args)
    too_many = over_capacity(counts, launches_on_cpus(launch_args, config))
    if too_many is not None:
        fixes["num_processes"] = too_many[0]
        reasons.append(too_many[1])
    if not fixes:
        return None
    in_yaml = ", ".join(f"{key}: {_yaml(value)}" for key, value in fixes.items())
    flags = " ".join(f"--{key} {_yaml(value)}" for key, value in fixes.items())
    return (
        f"to run on this machine ({'; '.join(reasons)}), set {in_yaml} in the recipe "
        f"(or add {flags})"
    )


def _has_gpu() -> bool:
    return accelerator_count() > 0


def _yaml(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
