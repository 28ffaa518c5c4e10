"""verl's single-turn agent loop with a request id that names the sample: ``default_agent_loop=ebpo_cpu_single_turn``.

verl's v1 rollout is its own agent loop (``AgentLoopManagerTQ`` → ``AgentLoopWorkerTQ`` actors →
``SingleTurnAgentLoop.run`` per sample, writing into TransferQueue). With
``rollout.full_determinism=True`` the loop sends the server ``request_id=f"det-{priority}"``, but on
the TransferQueue path nothing sets ``priority``, so every request is ``det-0``. This subclass,
registered with verl's ``register`` decorator, only supplies that id: the step, the dataset row and
the sample within the group (``session_id``), which the CPU server turns into the sampling seed
(:func:`~ebpo.lab.verl_cpu.shared.sampling.request_seed`). Everything else is ``SingleTurnAgentLoop.run``.
"""

from __future__ import annotations

from typing import Any

# verl is this module's base (a verl agent loop): it needs the verl extra
from verl.experimental.agent_loop.agent_loop import register
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

__all__ = ["AGENT_LOOP_NAME", "SeededSingleTurnAgentLoop", "request_key"]

#: ``actor_rollout_ref.rollout.agent.default_agent_loop`` of the CPU loop
AGENT_LOOP_NAME = "ebpo_cpu_single_turn"
#: samples per prompt the request key can tell apart
MAX_SESSIONS = 10_000


def request_key(global_steps: int, index: int, session_id: int) -> int:
    """The ``priority`` (hence ``request_id=det-<priority>``) of one sample."""
    if not 0 <= int(session_id) < MAX_SESSIONS:
        raise ValueError(f"session_id must be in [0, {MAX_SESSIONS}), got {session_id}")
    return (int(global_steps) * 1_000_000 + int(index)) * MAX_SESSIONS + int(session_id)


@register(AGENT_LOOP_NAME)
class SeededSingleTurnAgentLoop(SingleTurnAgentLoop):
    """``SingleTurnAgentLoop`` whose request names its sample (see module docstring)."""

    async def run(self, sampling_params: dict[str, Any], priority: int = 0, **kwargs: Any) -> Any:
        key = request_key(kwargs["global_steps"], kwargs["index"], kwargs["session_id"])
        return await super().run(sampling_params, priority=key, **kwargs)
