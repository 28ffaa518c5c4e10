"""A two-output agent loop: ``default_agent_loop=ebpo_cpu_two_output``.

Each session answers its prompt twice through verl's server manager (two single-turn answers,
each a request of its own) and returns both as a list of ``AgentLoopOutput`` s. verl's
``AgentLoopWorkerTQ`` stores them as ``{uid}_{session}_0`` and ``{uid}_{session}_1``, scores them
and copies the final (second) output's reward onto the first; the v1 trainer hands the keys to
``compute_advantage_for_multi_trajectories``, where ebpo's plug-in sees one row per session.

Each request's id names the sample and the output (:func:`output_request_key`), so the CPU server
seeds the two answers differently and a resumed run draws what the uninterrupted one did.

Faults on purpose (:mod:`~ebpo.lab.verl_cpu.shared.sessions`, the ``EBPO_CPU_AGENT_FAULTS``
variable of the Ray workers): a named session returns ``[]`` (verl warns and stores nothing) or
raises :class:`InjectedSessionError` (verl logs it and marks the prompt's group ``failure``;
its sync replay buffer keeps the other sessions). Validation prompts are never named (the smoke
picks training prompts whose ids the validation file lacks).
"""

from __future__ import annotations

import os
from typing import Any

# verl is this module's base (a verl agent loop): it needs the verl extra
from verl.experimental.agent_loop.agent_loop import register
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from ebpo.lab.verl_cpu.shared.sessions import FAULTS_ENV, OUTPUTS, TWO_OUTPUT_LOOP, parse_faults
from ebpo.lab.verl_cpu.v1.agent_loop import request_key

__all__ = [
    "OUTPUTS",
    "TWO_OUTPUT_LOOP",
    "InjectedSessionError",
    "TwoOutputAgentLoop",
    "output_request_key",
]

#: outputs per session the request key can tell apart
MAX_OUTPUTS = 10


class InjectedSessionError(RuntimeError):
    """A session made to fail on purpose (``fail`` in ``EBPO_CPU_AGENT_FAULTS``)."""


def output_request_key(global_steps: int, index: int, session_id: int, output: int) -> int:
    """The ``priority`` (hence ``request_id=det-<priority>``) of output ``output`` of one sample:
    :func:`~ebpo.lab.verl_cpu.v1.agent_loop.request_key` extended by the output index."""
    if not 0 <= int(output) < MAX_OUTPUTS:
        raise ValueError(f"output must be in [0, {MAX_OUTPUTS}), got {output}")
    return request_key(global_steps, index, session_id) * MAX_OUTPUTS + int(output)


@register(TWO_OUTPUT_LOOP)
class TwoOutputAgentLoop(SingleTurnAgentLoop):
    """Two single-turn answers per session, returned as a list (see module docstring)."""

    async def run(
        self, sampling_params: dict[str, Any], priority: int = 0, **kwargs: Any
    ) -> list[Any]:
        session = int(kwargs["session_id"])
        prompt_id = str((kwargs.get("extra_info") or {}).get("id", ""))
        fault = parse_faults(os.environ.get(FAULTS_ENV, "")).get((prompt_id, session))
        if fault == "fail":
            raise InjectedSessionError(f"session {session} of prompt {prompt_id} fails on purpose")
        if fault == "empty":
            return []
        outputs = []
        for output in range(OUTPUTS):
            key = output_request_key(kwargs["global_steps"], kwargs["index"], session, output)
            outputs.append(await super().run(sampling_params, priority=key, **kwargs))
        return outputs
