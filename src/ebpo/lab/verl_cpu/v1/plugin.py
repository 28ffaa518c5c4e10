"""What every process of a CPU verl run imports (``VERL_USE_EXTERNAL_MODULES=ebpo.lab.verl_cpu.v1.plugin``,
loaded by ``import verl``): the registrations of the CPU pieces in verl's own registries.

* platform ``ebpo_cpu`` (``PlatformRegistry``; selected with ``VERL_PLATFORM=ebpo_cpu``);
* rollout ``ebpo_cpu`` (``RolloutReplicaRegistry``; ``actor_rollout_ref.rollout.name=ebpo_cpu``);
* agent loops ``ebpo_cpu_single_turn`` and ``ebpo_cpu_two_output`` (verl's agent-loop
  ``register``; ``actor_rollout_ref.rollout.agent.default_agent_loop``);
* trainer ``ebpo_cpu_sync`` (``register_trainer``; ``trainer.v1.trainer_mode``).

ebpo's estimators are not here: they arrive through the ``verl.plugins`` entry point, as in any
verl job.
"""

from __future__ import annotations

# Imported for their registrations, which run at the end of each module. Nothing of theirs is used
# here: when a Ray worker process starts by importing one of them (to build its actor), that module
# imports verl, whose import loads this one while the first is still half-initialised.
from ebpo.lab.verl_cpu.shared import platform  # noqa: F401
from ebpo.lab.verl_cpu.v1 import agent_loop, serving, trainer, two_output  # noqa: F401

__all__ = ["MODULE"]

#: the value of ``VERL_USE_EXTERNAL_MODULES`` for a CPU run
MODULE = __name__
