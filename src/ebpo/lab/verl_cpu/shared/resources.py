"""The CPU resource pool: verl's ``ResourcePoolManager`` with CPU-only bundles, passed to a trainer
as its ``resource_pool_manager`` (the legacy path) or built by the v1 trainer's
``_init_resource_pool_mgr`` (:mod:`~ebpo.lab.verl_cpu.v1.trainer`)."""

from __future__ import annotations

from dataclasses import dataclass

# verl is this module's base (a verl resource pool manager): it needs the verl extra
from verl.single_controller.ray import RayResourcePool, ResourcePoolManager

__all__ = ["CPUResourcePoolManager"]


@dataclass
class CPUResourcePoolManager(ResourcePoolManager):
    """verl's ``ResourcePoolManager`` with CPU-only bundles (``RayResourcePool(use_gpu=False)``,
    one CPU per worker process) and a CPU availability check instead of the GPU one."""

    max_colocate_count: int = 1

    def create_resource_pool(self) -> None:
        import ray  # heavy optional import (verl extra)

        for name, process_on_nodes in self.resource_pool_spec.items():
            self.resource_pool_dict[name] = RayResourcePool(
                process_on_nodes=process_on_nodes,
                use_gpu=False,
                max_colocate_count=self.max_colocate_count,
                name_prefix=name,
            )
        needed = self.get_n_gpus() * self.max_colocate_count
        available = ray.available_resources().get("CPU", 0)
        if available < needed:
            raise ValueError(f"Ray has {available} free CPUs; the CPU workers need {needed}")
