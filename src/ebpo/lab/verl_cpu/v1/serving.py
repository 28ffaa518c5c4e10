"""The v1 path's rollout on CPU, through verl's rollout-replica registry: ``rollout.name=ebpo_cpu``.

verl's v1 trainer builds its inference servers with ``LLMServerManager.create``, which looks the
replica class up by ``actor_rollout_ref.rollout.name`` in ``RolloutReplicaRegistry`` (vLLM, SGLang,
TRT-LLM). :class:`CPURolloutReplica` is registered there as :data:`ROLLOUT_NAME`; in verl's hybrid
mode it launches one :class:`CPUGenerationServer` Ray actor per replica, which verl's
``LLMServerClient`` (through verl's load balancer) calls exactly as it calls a vLLM server:
``generate(request_id, prompt_ids, sampling_params, ...) -> TokenOutput``.

The server holds its own copy of the policy. verl keeps it in step with the actor the way it does
for vLLM in a colocated (hybrid) run: ``CheckpointEngineManager`` (backend ``naive``) calls the
actor workers' ``update_weights`` after every update, which sends the actor's weights here
(:meth:`CPUGenerationServer.load_weights`); ``sleep_replicas`` puts the server to sleep while the
actor trains. A request that reaches a sleeping server, or a server that was never given weights,
is an error: that would be generation from stale weights.

Sampling is seeded per request from the request id (:func:`~ebpo.lab.verl_cpu.shared.sampling.request_seed`),
which the lab's agent loop (:mod:`~ebpo.lab.verl_cpu.v1.agent_loop`) makes a function of the step,
the prompt and the sample — so the order in which verl's async agent loop sends requests does not
change what is sampled, and a resumed run samples what the uninterrupted one did.
"""

from __future__ import annotations

from typing import Any

import ray
import torch

# verl is this module's base (a verl rollout replica): it needs the verl extra
from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry, TokenOutput

from ebpo.lab.verl_cpu.shared.sampling import request_seed, sample, server_actor_name

__all__ = [
    "ROLLOUT_NAME",
    "CPUGenerationServer",
    "CPURolloutReplica",
    "server_actor_name",
]

#: ``actor_rollout_ref.rollout.name`` of the CPU rollout
ROLLOUT_NAME = "ebpo_cpu"


class CPUGenerationServer:
    """One rollout replica's server: transformers ``generate`` on a copy of the policy (see module
    docstring). ``config`` is verl's rollout config, ``model_path`` the model directory."""

    def __init__(self, config: Any, model_path: str) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer  # heavy optional import

        torch.set_num_threads(1)
        self.config = config
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
        self.awake = False
        self.weights_version: int | None = (
            None  # the global step of the weights (None: never synced)
        )
        self.requests = 0

    def load_weights(self, state_dict: dict[str, torch.Tensor], global_steps: int | None) -> None:
        """The actor's weights after ``global_steps`` updates; wakes the server."""
        self.model.load_state_dict(state_dict)
        self.weights_version = int(global_steps or 0)
        self.awake = True

    def sleep(self) -> None:
        self.awake = False

    def wake_up(self) -> None:
        if self.weights_version is None:
            raise RuntimeError("the CPU rollout server was woken before it was given weights")
        self.awake = True

    def generate(
        self,
        request_id: str,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        **_: Any,
    ) -> TokenOutput:
        """One response to ``prompt_ids`` (verl's server contract), sampled under a seed derived
        from ``request_id``; its log-probabilities are returned when ``sampling_params['logprobs']``."""
        if not self.awake or self.weights_version is None:
            raise RuntimeError(
                "generate() reached the CPU rollout server while it sleeps (or before any weights "
                "were synced): verl would sample from stale weights"
            )
        self.requests += 1
        temperature = float(sampling_params.get("temperature", 1.0))
        ids = torch.tensor([list(prompt_ids)])
        out = sample(
            self.model,
            ids,
            torch.ones_like(ids),
            width=int(self.config.response_length),
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=self.tokenizer.eos_token_id,
            do_sample=temperature > 0,
            temperature=temperature,
            seed=request_seed(int(self.config.seed or 0), request_id),
            vocabulary=len(self.tokenizer),
        )
        length = int(out.response_mask[0].sum())
        log_probs = out.log_probs[0, :length].tolist() if sampling_params.get("logprobs") else None
        return TokenOutput(
            token_ids=out.responses[0, :length].tolist(),
            log_probs=log_probs,
            stop_reason="completed",
            extra_fields={"global_steps": self.weights_version},
        )

    def stats(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "weights_version": self.weights_version,
            "awake": self.awake,
        }

    # verl's replica calls these on every server; nothing to do on CPU
    def abort_all_requests(self, reject_request: bool = False) -> None:
        return None

    def resume_generation(self) -> None:
        return None

    def clear_kv_cache(self) -> None:
        return None

    def release_kv_cache(self) -> None:
        return None

    def resume_kv_cache(self) -> None:
        return None


class CPURolloutReplica(RolloutReplica):
    """verl ``RolloutReplica`` whose server is a :class:`CPUGenerationServer` Ray actor (no CPU
    reserved: it only runs while the actor workers wait)."""

    def rollout_worker_use_gpu(self) -> bool:
        return False

    async def launch_servers(self) -> None:
        name = server_actor_name(self.replica_rank)
        server = (
            ray.remote(CPUGenerationServer)
            .options(name=name, num_cpus=0, max_concurrency=1)
            .remote(self.config, self.model_config.path)
        )
        self.servers = [server]
        self._server_handle = server
        self._server_address = name  # the load balancer's key; no HTTP endpoint


def _replica_class() -> type[CPURolloutReplica]:
    return CPURolloutReplica


# ``rollout.name=ebpo_cpu`` in verl's ``RolloutReplicaRegistry`` (re-registering is harmless)
RolloutReplicaRegistry.register(ROLLOUT_NAME, _replica_class)
