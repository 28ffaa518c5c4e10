"""The CPU actor-rollout worker: a verl ``Worker`` that generates, scores log-probabilities and
updates a small causal LM with transformers on one CPU process.

It stands in for verl's ``ActorRolloutRefWorker`` (FSDP / Megatron engine + vLLM / SGLang server),
with the same remote methods the trainer calls and the same data layout:

* ``compute_log_prob(td)`` receives verl's no-padding TensorDict (``left_right_2_no_padding``) and
  returns ``log_probs`` / ``entropy`` as jagged tensors over the valid tokens, which the trainer
  turns back into ``[bs, response_length]`` with ``no_padding_2_padding``: entry ``t`` of a
  sequence is ``log π(x_{t+1} | x_{≤t}) `` (``logits / temperature``, as verl's engines);
* ``update_actor(td)`` splits the batch into PPO mini-batches of ``global_batch_size`` rows (in
  order, ``epochs`` passes) and, per mini-batch, takes one AdamW step on verl's own policy loss
  (``core_algos.get_policy_loss_fn(actor.policy_loss.loss_mode)``: clipped ratio ``exp(log π −
  log π_old)`` times the advantages, aggregated by ``agg_loss(actor.loss_agg_mode)``), gradients
  clipped at ``actor.grad_clip``;
* ``generate_sequences(prompts)`` samples ``rollout.response_length`` tokens with ``generate``;
  the response mask covers the tokens up to and including the first EOS (as vLLM's output does),
  and sampling is seeded from ``(rollout.seed, global step, train/validation)`` so that a resumed
  run draws the same samples as an uninterrupted one;
* ``save_checkpoint`` / ``load_checkpoint`` write and read model and optimizer state
  (``cpu_actor.pt``) under verl's ``global_step_N/actor`` folder.

Not implemented (the smoke does not use them): a learning-rate schedule (the rate is
``actor.optim.lr`` throughout), mini-batch shuffling (``actor.shuffle=True`` is refused), KL and
entropy terms, ``max_ckpt_to_keep`` and HDFS paths, data parallelism (one worker).

The rollout shares the training model (a hybrid engine in one process), so there are no weights to
synchronise: see :class:`~ebpo.lab.verl_cpu.rollout.SharedWeightsCheckpointManager`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

# verl is this module's base (a verl worker class): it needs the verl extra
from verl import DataProto
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import (
    Dispatch,
    make_nd_compute_dataproto_dispatch_fn,
    register,
)
from verl.trainer.ppo import core_algos
from verl.utils import tensordict_utils as tu
from verl.utils.config import omega_conf_to_dataclass

__all__ = ["CHECKPOINT_FILE", "CPUActorRolloutWorker", "generation_seed"]

CHECKPOINT_FILE = "cpu_actor.pt"
#: keeps validation seeds apart from training seeds (validation runs at the same global step)
_VALIDATION_SEED_OFFSET = 1_000_003


def generation_seed(seed: int, global_step: int, validate: bool) -> int:
    """The sampling seed of one ``generate_sequences`` call: a function of the step only, never of
    what ran before in the process (so a resumed run samples what the uninterrupted one did)."""
    return int(seed) * 7919 + int(global_step) + (_VALIDATION_SEED_OFFSET if validate else 0)


class CPUActorRolloutWorker(Worker):
    """Actor + rollout on one CPU process (see module docstring). ``config`` is verl's
    ``actor_rollout_ref`` section."""

    def __init__(self, config: Any, role: str = "actor_rollout", **_: Any) -> None:
        super().__init__()
        self.config = config
        self.role = role
        self.model: Any = None
        self.optimizer: torch.optim.Optimizer | None = None

    # ------------------------------------------------------------------ setup
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer  # heavy optional import

        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        torch.manual_seed(int(self.config.rollout.get("seed", 0) or 0))
        path = self.config.model.path
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        self.actor_config = omega_conf_to_dataclass(self.config.actor)
        optim = self.config.actor.optim
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=float(optim.lr),
            weight_decay=float(optim.get("weight_decay", 0.0)),
            betas=tuple(optim.get("betas", (0.9, 0.999))),
        )
        self.loss_fn = core_algos.get_policy_loss_fn(self.actor_config.policy_loss.loss_mode)
        # verl's dispatch asks each worker for its data-parallel rank on the "actor" mesh
        self._register_dispatch_collect_info("actor", dp_rank=self.rank, is_collect=True)

    # ------------------------------------------------------------------ rollout
    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        start = time.perf_counter()
        meta = prompts.meta_info
        validate = bool(meta.get("validate", False))
        rollout = self.config.rollout
        if validate:
            do_sample = bool(meta.get("do_sample", rollout.val_kwargs.do_sample))
            temperature = float(rollout.val_kwargs.temperature)
        else:
            do_sample = bool(meta.get("do_sample", rollout.get("do_sample", True)))
            temperature = float(rollout.temperature)
        if temperature <= 0:
            do_sample = False
        width = int(rollout.response_length)
        pad, eos = self.tokenizer.pad_token_id, self.tokenizer.eos_token_id
        input_ids, attention_mask = self._prompt_ids(prompts.non_tensor_batch["raw_prompt"])
        seed = generation_seed(rollout.get("seed", 0) or 0, meta.get("global_steps", 0), validate)
        self.model.eval()
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            # pure sampling at the temperature (verl's rollout.top_k=-1, top_p=1): top_k = vocabulary
            sampling = (
                {"temperature": temperature, "top_p": 1.0, "top_k": len(self.tokenizer)}
                if do_sample
                else {}
            )
            out = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                max_new_tokens=width,
                do_sample=do_sample,
                pad_token_id=pad,
                eos_token_id=eos,
                **sampling,
            )
        responses = out[:, input_ids.shape[1] :]
        responses = F.pad(responses, (0, width - responses.shape[1]), value=pad)
        # the response: every token up to and including the first EOS
        is_eos = responses.eq(eos).int()
        after_eos = (is_eos.cumsum(dim=1) - is_eos) > 0
        response_mask = (~after_eos).int()
        responses = responses.masked_fill(after_eos, pad)
        full_mask = torch.cat([attention_mask, response_mask.to(attention_mask.dtype)], dim=1)
        position_ids = (full_mask.cumsum(dim=1) - 1).clamp(min=0)
        batch = {
            "prompts": input_ids,
            "responses": responses,
            "response_mask": response_mask,
            "input_ids": torch.cat([input_ids, responses], dim=1),
            "attention_mask": full_mask,
            "position_ids": position_ids,
        }
        return DataProto.from_dict(
            tensors=batch,
            meta_info={"timing": {"gen_cpu_hf": time.perf_counter() - start}},
        )

    def _prompt_ids(self, raw_prompts: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Chat-templated prompt ids, left-padded to ``rollout.prompt_length`` (as verl's agent
        loop tokenizes ``raw_prompt``), and their attention mask."""
        length = int(self.config.rollout.prompt_length)
        rows = []
        for messages in raw_prompts:
            ids = self.tokenizer.apply_chat_template(
                list(messages), add_generation_prompt=True, tokenize=True
            )
            ids = list(ids["input_ids"] if isinstance(ids, Mapping) else ids)
            if len(ids) > length:
                raise ValueError(
                    f"a prompt has {len(ids)} tokens, more than rollout.prompt_length={length}"
                )
            rows.append(ids)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (length - len(ids)) + ids for ids in rows])
        attention_mask = torch.tensor([[0] * (length - len(ids)) + [1] * len(ids) for ids in rows])
        return input_ids, attention_mask

    # ------------------------------------------------------------------ log-probs
    def _forward(self, td: Any, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-position ``(log π(x_{t+1}), entropy)``, both ``[bs, seq]`` (last column 0), of
        ``prompts ⧺ responses`` under ``attention_mask`` (``td``: a TensorDict or a dict)."""
        input_ids = torch.cat([td["prompts"], td["responses"]], dim=1)
        attention_mask = td["attention_mask"]
        position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
        logits = (
            self.model(
                input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids
            )
            .logits[:, :-1]
            .float()
            / temperature
        )
        log_softmax = logits.log_softmax(dim=-1)
        token_lp = log_softmax.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
        entropy = -(log_softmax.exp() * log_softmax).sum(dim=-1)
        return F.pad(token_lp, (0, 1)), F.pad(entropy, (0, 1))

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"))
    def compute_log_prob(self, data: Any) -> Any:
        temperature = float(tu.get(data, "temperature", default=self.config.rollout.temperature))
        self.model.eval()
        with torch.no_grad():
            token_lp, entropy = self._forward(data, temperature)
        valid = data["attention_mask"].bool()
        offsets = data["input_ids"].offsets()
        nested = {
            "log_probs": torch.nested.nested_tensor_from_jagged(token_lp[valid], offsets=offsets),
            "entropy": torch.nested.nested_tensor_from_jagged(entropy[valid], offsets=offsets),
        }
        return tu.get_tensordict(tensor_dict=nested, non_tensor_dict={"metrics": {"mfu": 0.0}})

    # ------------------------------------------------------------------ update
    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"))
    def update_actor(self, data: Any) -> Any:
        temperature = float(tu.get(data, "temperature", default=self.config.rollout.temperature))
        mini_batch = int(tu.get(data, "mini_batch_size", default=data.batch_size[0]))
        epochs = int(tu.get(data, "epochs", default=1))
        if (tu.get(data, "dataloader_kwargs", default=None) or {}).get("shuffle", False):
            raise ValueError(
                "the CPU worker updates mini-batches in batch order: set actor_rollout_ref.actor.shuffle=False"
            )
        cfg = self.actor_config
        width = data["responses"].shape[1]
        prompt_width = data["prompts"].shape[1]
        rows = data.batch_size[0]
        # the padded columns the update reads (the jagged ones cannot be sliced by row)
        names = ("prompts", "responses", "attention_mask", "response_mask", "old_log_probs")
        columns = {name: data[name] for name in (*names, "advantages")}
        metrics: dict[str, list[float]] = {}
        self.model.train()
        for _ in range(epochs):
            for begin in range(0, rows, mini_batch):
                part = {key: value[begin : begin + mini_batch] for key, value in columns.items()}
                mask = part["response_mask"].float()
                token_lp, _ = self._forward(part, temperature)
                log_prob = token_lp[:, prompt_width - 1 : prompt_width - 1 + width]
                cfg.global_batch_info.update(
                    dp_size=1,
                    batch_num_tokens=int(mask.sum().item()),
                    global_batch_size=int(mask.shape[0]),
                    loss_scale_factor=cfg.loss_scale_factor,
                )
                loss, loss_metrics = self.loss_fn(
                    old_log_prob=part["old_log_probs"].float(),
                    log_prob=log_prob,
                    advantages=part["advantages"].float(),
                    response_mask=mask,
                    loss_agg_mode=cfg.loss_agg_mode,
                    config=cfg,
                    rollout_is_weights=None,
                )
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
                self.optimizer.step()
                step_metrics = {
                    "pg_loss": float(loss.item()),
                    "grad_norm": float(grad_norm.item()),
                    **{k.removeprefix("actor/"): float(v) for k, v in loss_metrics.items()},
                }
                for key, value in step_metrics.items():
                    metrics.setdefault(key, []).append(value)
        summary: dict[str, Any] = {key: values for key, values in metrics.items()}
        summary["lr"] = float(self.optimizer.param_groups[0]["lr"])
        summary["mfu"] = 0.0
        return tu.get_tensordict(tensor_dict={}, non_tensor_dict={"metrics": summary})

    # ------------------------------------------------------------------ checkpoints
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(
        self,
        local_path: str,
        hdfs_path: str | None = None,
        global_step: int = 0,
        max_ckpt_to_keep: int | None = None,
    ) -> None:
        os.makedirs(local_path, exist_ok=True)
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "global_step": int(global_step),
        }
        tmp = os.path.join(local_path, f".{CHECKPOINT_FILE}.tmp")
        torch.save(state, tmp)
        os.replace(tmp, os.path.join(local_path, CHECKPOINT_FILE))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(
        self, local_path: str, hdfs_path: str | None = None, del_local_after_load: bool = False
    ) -> None:
        state = torch.load(os.path.join(local_path, CHECKPOINT_FILE), weights_only=False)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
