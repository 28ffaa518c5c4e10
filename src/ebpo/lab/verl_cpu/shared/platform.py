"""A CPU platform for verl, registered through verl's own hook (``PlatformRegistry.register``).

verl 0.9.1 ships ``nvidia``, ``npu`` and ``rocm`` platforms and, with none available, falls back
to ``nvidia`` (NCCL, ``torch.cuda``). This one is ``torch.cpu`` with the ``gloo`` backend and no
Ray accelerator resource. verl picks it in a process when ``VERL_PLATFORM=ebpo_cpu`` is set and
this module has been imported there: the CPU loop sets both in the Ray workers' environment
(``VERL_USE_EXTERNAL_MODULES`` imports it on ``import verl``) and uses :func:`cpu_platform` in
the driver.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import torch

# verl is this module's base (a platform plug-in): it needs the verl extra
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry, get_platform, set_platform

__all__ = ["PLATFORM_NAME", "PlatformCPU", "cpu_platform"]

#: the name under which the platform is registered (``VERL_PLATFORM=ebpo_cpu``)
PLATFORM_NAME = "ebpo_cpu"


@PlatformRegistry.register(platform=PLATFORM_NAME)
class PlatformCPU(PlatformBase):
    """verl platform backed by ``torch.cpu``: gloo collectives, no device memory, no Ray GPU."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        return torch.cpu

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return False  # never auto-detected: chosen explicitly with VERL_PLATFORM

    def current_device(self) -> int:
        return 0

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str) -> Iterator[None]:
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "CPU"

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        return {}

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


@contextlib.contextmanager
def cpu_platform() -> Iterator[PlatformBase]:
    """:class:`PlatformCPU` as this process's verl platform (``VERL_PLATFORM``, inherited by child
    processes, and verl's ``set_platform``) for the duration of the block; both are put back after
    it, so that verl code running later in the same process sees the platform it would have."""
    old_env = os.environ.get("VERL_PLATFORM")
    os.environ["VERL_PLATFORM"] = PLATFORM_NAME
    previous = get_platform()
    platform = previous if isinstance(previous, PlatformCPU) else PlatformCPU()
    if platform is not previous:
        set_platform(platform)
    try:
        yield platform
    finally:
        if old_env is None:
            os.environ.pop("VERL_PLATFORM", None)
        else:
            os.environ["VERL_PLATFORM"] = old_env
        if platform is not previous:
            set_platform(previous)
