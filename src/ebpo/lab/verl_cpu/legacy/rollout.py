"""Rollout on CPU through verl's two rollout hooks:

* ``actor_rollout_ref.rollout.agent.agent_loop_manager_class`` →
  :class:`CPURolloutManager`: built with verl's ``AgentLoopManager.create(config, llm_client,
  teacher_client, reward_loop_worker_handles)`` contract; ``generate_sequences`` samples with the
  CPU worker (through :class:`WorkerGroupClient`, the stand-in for verl's ``LLMServerClient``) and
  scores every response with verl's own ``RewardLoopWorker`` actors — hence with the configured
  ``reward.custom_reward_function`` (ebpo's ``compute_score``) — returning ``rm_scores`` and the
  reward's extra keys exactly as verl's agent loop does (score on the last response token);
* ``actor_rollout_ref.rollout.checkpoint_manager_class`` → :class:`SharedWeightsCheckpointManager`:
  verl's ``CheckpointEngineManager`` copies the trained weights into the inference servers and
  puts them to sleep; here the rollout *is* the training model in the same process, so both are
  no-ops.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

# verl is this module's base (the rollout hooks of verl's trainer): it needs the verl extra
from verl import DataProto
from verl.protocol import pad_dataproto_to_divisor
from verl.trainer.ppo.reward import resolve_reward_manager_cls

__all__ = ["CPURolloutManager", "SharedWeightsCheckpointManager", "WorkerGroupClient"]


class WorkerGroupClient:
    """The rollout's "LLM client": generation requests go to the CPU worker group."""

    def __init__(self, worker_group: Any) -> None:
        self.worker_group = worker_group

    def generate(self, prompts: DataProto) -> DataProto:
        return self.worker_group.generate_sequences(prompts)


class CPURolloutManager:
    """``agent_loop_manager_class`` for the CPU loop (see module docstring)."""

    def __init__(
        self,
        config: Any,
        llm_client: WorkerGroupClient,
        reward_loop_worker_handles: list[Any] | None,
    ) -> None:
        if not reward_loop_worker_handles:
            raise ValueError(
                "CPURolloutManager needs verl's reward loop workers (a rule-based reward, no "
                "reward model): reward.reward_model.enable must be False"
            )
        self.config = config
        self.llm_client = llm_client
        self.reward_workers = list(reward_loop_worker_handles)
        self.reward_manager_cls = resolve_reward_manager_cls(config)

    @classmethod
    def create(
        cls,
        config: Any,
        llm_client: WorkerGroupClient,
        teacher_client: Any = None,
        reward_loop_worker_handles: list[Any] | None = None,
    ) -> CPURolloutManager:
        """verl's ``AgentLoopManager.create`` signature (no teacher: distillation is not supported)."""
        if teacher_client is not None:
            raise ValueError("CPURolloutManager does not support distillation (a teacher client)")
        return cls(config, llm_client, reward_loop_worker_handles)

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        import ray  # heavy optional import (verl extra)

        start = time.perf_counter()
        output = self.llm_client.generate(prompts)
        generated = time.perf_counter()
        # Score with verl's RewardLoopWorker actors (RewardLoopManager.compute_rm_score's recipe,
        # on the worker handles the trainer hands to the agent loop).
        scored = DataProto(batch=output.batch, non_tensor_batch=dict(prompts.non_tensor_batch))
        padded, pad_size = pad_dataproto_to_divisor(scored, len(self.reward_workers))
        chunks = padded.chunk(len(self.reward_workers))
        results = ray.get(
            [
                worker.compute_score_batch.remote(chunk)
                for worker, chunk in zip(self.reward_workers, chunks, strict=True)
            ]
        )
        flat = [item for part in results for item in part][: len(scored)]
        scores = [float(item["reward_score"]) for item in flat]
        extra = [item.get("reward_extra_info", {}) for item in flat]
        keys = list(extra[0]) if extra else []
        batch = output.batch
        batch["rm_scores"] = self.reward_manager_cls.assemble_rm_scores(scored, scores).to(
            torch.float32
        )
        non_tensor = {key: np.array([info[key] for info in extra]) for key in keys}
        non_tensor["__num_turns__"] = np.full(len(scored), 2, dtype=np.int32)
        # fit() reads this column for every row (image sequence lengths); text only: empty dicts
        non_tensor["multi_modal_inputs"] = np.array([{} for _ in range(len(scored))], dtype=object)
        timing = dict(output.meta_info.get("timing", {}))
        timing["reward_cpu"] = time.perf_counter() - generated
        timing["agent_loop/generate_sequences"] = time.perf_counter() - start
        return DataProto(
            batch=batch,
            non_tensor_batch=non_tensor,
            meta_info={"timing": timing, "reward_extra_keys": keys},
        )


class SharedWeightsCheckpointManager:
    """``checkpoint_manager_class`` for the CPU loop: rollout and actor share one model, so there
    is nothing to copy or put to sleep (verl's ``CheckpointEngineManager`` interface)."""

    def __init__(self, config: Any = None, actor_wg: Any = None, replicas: Any = None) -> None:
        self.config = config
        self.actor_wg = actor_wg
        self.replicas = list(replicas or [])

    def update_weights(self, global_steps: int | None = None) -> None:
        return None

    def sleep_replicas(self) -> None:
        return None

    def wake_up_replicas(self) -> None:
        return None
