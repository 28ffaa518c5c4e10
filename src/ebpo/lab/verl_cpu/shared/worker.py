"""The CPU actor-rollout worker: a verl ``Worker`` that scores log-probabilities and updates a small
causal LM with transformers on CPU processes, one per data-parallel rank (gloo).

It stands in for verl's ``ActorRolloutRefWorker`` (FSDP / Megatron engine) with the same remote
methods the trainers call, in both of verl's data layouts:

* the legacy trainer (``RayPPOTrainer``) sends left/right-padded tensors (``left_right_2_no_padding``)
  and also asks the worker to generate (``generate_sequences``, a whole batch, seeded from the
  step: :func:`~ebpo.lab.verl_cpu.shared.sampling.generation_seed`);
* the v1 trainer sends ``KVBatchMeta`` handles that verl's ``tqbridge`` (inside ``register``)
  turns into TensorDicts of jagged (nested) tensors fetched from TransferQueue, and writes the
  outputs back there; generation happens on the rollout server
  (:mod:`~ebpo.lab.verl_cpu.v1.serving`), to which :meth:`CPUActorRolloutWorker.update_weights`
  sends the trained weights (verl's ``naive`` checkpoint engine).

``compute_log_prob`` returns ``log_probs`` / ``entropy`` as jagged tensors over each sequence's
tokens (entry ``t`` is ``log π(x_{t+1} | x_{≤t})`` under ``logits / temperature``, as verl's
engines); ``update_actor`` splits its rows into PPO mini-batches (``mini_batch_size`` global rows,
``epochs`` passes, in order) and per mini-batch takes one AdamW step on verl's own policy loss
(``core_algos.get_policy_loss_fn(actor.policy_loss.loss_mode)``, aggregated by ``agg_loss`` with
verl's data-parallel normalisation: ``dp_size`` and the global token count), gradients averaged
over the ranks (gloo all-reduce) and clipped at ``actor.grad_clip``. ``save_checkpoint`` /
``load_checkpoint`` write and read model and optimizer state (``cpu_actor.pt``, rank 0 writes: the
ranks hold the same weights) under verl's ``global_step_N/actor`` folder.

With ``EBPO_CPU_TRACE_DIR`` set, every rank also writes what it was trained on at each step
(``step_<N>_sub_<k>_rank_<r>.pt``: advantages, response masks, rewards and row ids), so that a test can
compare two runs row by row.

With a reference policy (``role`` holding ``ref``: verl's hybrid ``actor_rollout_ref`` worker,
needed by ``actor.use_kl_loss`` or ``algorithm.use_kl_in_reward``) the worker keeps a frozen copy
of the initial model and answers verl's ``compute_ref_log_prob`` (its ``ref`` mesh) as
``compute_log_prob`` does. ``update_actor`` then adds verl's own terms, as verl's ``ppo_loss``
(``verl/workers/utils/losses.py``) does: ``- entropy_coeff · agg_loss(entropy)`` when
``entropy_coeff != 0`` and ``+ kl_loss_coef · agg_loss(kl_penalty(log π, log π_ref,
kl_loss_type))`` with ``use_kl_loss``, both aggregated with the global batch information, and
logs ``entropy_loss`` / ``kl_loss`` / ``kl_coef`` as verl does.

Not implemented (the smoke does not use them): a learning-rate schedule, mini-batch shuffling
(``actor.shuffle=True`` is refused), ``max_ckpt_to_keep``, HDFS paths.
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

from ebpo.lab.verl_cpu.shared.results import TRACE_ENV
from ebpo.lab.verl_cpu.shared.sampling import generation_seed, sample, server_actor_name

__all__ = ["CHECKPOINT_FILE", "TRACE_ENV", "CPUActorRolloutWorker", "generation_seed"]

CHECKPOINT_FILE = "cpu_actor.pt"


def _rows(data: Any) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each row's prompt tokens and response tokens, from either of verl's layouts: jagged
    ``prompts``/``responses`` (v1, TransferQueue) or left/right-padded ones with an
    ``attention_mask`` (legacy)."""
    prompts, responses = data["prompts"], data["responses"]
    if prompts.is_nested:
        return list(prompts.unbind()), list(responses.unbind())
    width = prompts.shape[1]
    mask = data["attention_mask"].bool()
    prompt_rows = [prompts[i][mask[i, :width]] for i in range(prompts.shape[0])]
    lengths = mask[:, width:].sum(dim=1).tolist()
    response_rows = [responses[i, :n] for i, n in enumerate(lengths)]
    return prompt_rows, response_rows


def _padded(values: Any, width: int) -> torch.Tensor:
    """A ``[bs, width]`` float tensor from a jagged or padded one (zeros after each row)."""
    if values.is_nested:
        values = values.to_padded_tensor(0.0)
    values = values.float()
    return F.pad(values, (0, width - values.shape[1]))[:, :width]


class CPUActorRolloutWorker(Worker):
    """Actor (+ the legacy path's rollout) on one CPU process (see module docstring). ``config`` is
    verl's ``actor_rollout_ref`` section."""

    def __init__(self, config: Any, role: str = "actor_rollout", **_: Any) -> None:
        super().__init__()
        self.config = config
        self.role = role
        self.model: Any = None
        self.ref_model: Any = None  # the frozen initial policy, with a reference role
        self.optimizer: Any = None  # a torch.optim.Optimizer once init_model ran, as model

    # ------------------------------------------------------------------ setup
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer  # heavy optional import

        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        if self.world_size > 1 and not torch.distributed.is_initialized():
            self._gloo = _gloo_process_group(self.rank, self.world_size)
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
        if "ref" in self.role:
            # the reference policy is the model as loaded (verl's ref worker loads model.path)
            self.ref_model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
            self.ref_model.eval().requires_grad_(False)
            self._register_dispatch_collect_info("ref", dp_rank=self.rank, is_collect=True)

    # ------------------------------------------------------------------ rollout (legacy trainer)
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
        input_ids, attention_mask = self._prompt_ids(prompts.non_tensor_batch["raw_prompt"])
        out = sample(
            self.model,
            input_ids,
            attention_mask,
            width=int(rollout.response_length),
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=self.tokenizer.eos_token_id,
            do_sample=do_sample,
            temperature=temperature,
            seed=generation_seed(
                rollout.get("seed", 0) or 0, meta.get("global_steps", 0), validate
            ),
            vocabulary=len(self.tokenizer),
        )
        full_mask = torch.cat([attention_mask, out.response_mask.to(attention_mask.dtype)], dim=1)
        batch = {
            "prompts": input_ids,
            "responses": out.responses,
            "response_mask": out.response_mask,
            "input_ids": torch.cat([input_ids, out.responses], dim=1),
            "attention_mask": full_mask,
            "position_ids": (full_mask.cumsum(dim=1) - 1).clamp(min=0),
        }
        return DataProto.from_dict(
            tensors=batch, meta_info={"timing": {"gen_cpu_hf": time.perf_counter() - start}}
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
    def _forward(
        self,
        prompts: list[torch.Tensor],
        responses: list[torch.Tensor],
        temperature: float,
        model: Any = None,
    ) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
        """``(log π(x_{t+1} | x_{≤t}), entropy, lengths)`` of each ``prompt ⧺ response``, as
        right-padded ``[bs, L]`` tensors (entry ``length - 1`` of a row and after it: 0)."""
        sequences = [torch.cat([p, r]).long() for p, r in zip(prompts, responses, strict=True)]
        lengths = [len(s) for s in sequences]
        width = max(lengths)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.stack([F.pad(s, (0, width - len(s)), value=pad) for s in sequences])
        mask = torch.tensor([[1] * n + [0] * (width - n) for n in lengths])
        positions = torch.arange(width).expand(len(sequences), -1)
        model = self.model if model is None else model
        logits = model(input_ids=input_ids, attention_mask=mask, position_ids=positions).logits
        log_softmax = (logits[:, :-1].float() / temperature).log_softmax(dim=-1)
        token_lp = log_softmax.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
        entropy = -(log_softmax.exp() * log_softmax).sum(dim=-1)
        valid = torch.tensor([[1.0] * (n - 1) + [0.0] * (width - n) for n in lengths])
        return F.pad(token_lp * valid, (0, 1)), F.pad(entropy * valid, (0, 1)), lengths

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"))
    def compute_log_prob(self, data: Any) -> Any:
        self.model.eval()
        return self._log_probs(data, self.model)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="ref"))
    def compute_ref_log_prob(self, data: Any) -> Any:
        """verl's reference log-probs: :meth:`compute_log_prob` under the frozen initial model."""
        if self.ref_model is None:
            raise RuntimeError(f"worker role {self.role!r} has no reference policy")
        return self._log_probs(data, self.ref_model)

    def _log_probs(self, data: Any, model: Any) -> Any:
        temperature = float(tu.get(data, "temperature", default=self.config.rollout.temperature))
        prompts, responses = _rows(data)
        with torch.no_grad():
            token_lp, entropy, lengths = self._forward(prompts, responses, temperature, model)
        offsets = torch.tensor([0, *lengths]).cumsum(0)
        valid = torch.tensor([[1] * n + [0] * (token_lp.shape[1] - n) for n in lengths]).bool()
        nested = {
            "log_probs": torch.nested.nested_tensor_from_jagged(token_lp[valid], offsets=offsets),
            "entropy": torch.nested.nested_tensor_from_jagged(entropy[valid], offsets=offsets),
        }
        if data["prompts"].is_nested:  # v1: the outputs go back into TransferQueue, row by row
            return tu.get_tensordict(tensor_dict=nested)
        return tu.get_tensordict(tensor_dict=nested, non_tensor_dict={"metrics": {"mfu": 0.0}})

    # ------------------------------------------------------------------ update
    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"))
    def update_actor(self, data: Any) -> Any:
        temperature = float(tu.get(data, "temperature", default=self.config.rollout.temperature))
        rows = data.batch_size[0]
        world = max(1, self.world_size if torch.distributed.is_initialized() else 1)
        mini_batch = int(tu.get(data, "mini_batch_size", default=rows * world)) // world
        epochs = int(tu.get(data, "epochs", default=1))
        if (tu.get(data, "dataloader_kwargs", default=None) or {}).get("shuffle", False):
            raise ValueError(
                "the CPU worker updates mini-batches in batch order: set actor_rollout_ref.actor.shuffle=False"
            )
        prompts, responses = _rows(data)
        width = max(max((len(r) for r in responses), default=1), 1)
        if not data["prompts"].is_nested:
            width = data["responses"].shape[1]
        names = ["response_mask", "old_log_probs", "advantages"]
        if self.actor_config.use_kl_loss:
            names.append("ref_log_prob")  # written by verl's _compute_ref_log_prob
        columns = {name: _padded(data[name], width) for name in names}
        self._trace(data, columns)
        metrics: dict[str, list[float]] = {}
        self.model.train()
        for _ in range(epochs):
            for begin in range(0, rows, mini_batch):
                part = slice(begin, begin + mini_batch)
                batch = {name: column[part] for name, column in columns.items()}
                step_metrics = self._train_mini_batch(
                    prompts[part], responses[part], batch, width, temperature, world
                )
                for key, value in step_metrics.items():
                    metrics.setdefault(key, []).append(value)
        summary: dict[str, Any] = {key: values for key, values in metrics.items()}
        summary["lr"] = float(self.optimizer.param_groups[0]["lr"])
        summary["mfu"] = 0.0
        return tu.get_tensordict(tensor_dict={}, non_tensor_dict={"metrics": summary})

    def _train_mini_batch(
        self,
        prompts: list[torch.Tensor],
        responses: list[torch.Tensor],
        batch: dict[str, torch.Tensor],
        width: int,
        temperature: float,
        world: int,
    ) -> dict[str, float]:
        """One AdamW step on verl's actor loss over one mini-batch; returns its metrics."""
        cfg = self.actor_config
        mask = batch["response_mask"]
        token_lp, token_entropy, _ = self._forward(prompts, responses, temperature)
        # response token j of a row is predicted at position len(prompt) - 1 + j
        log_prob, entropy = (
            _response_part(values, prompts, width) for values in (token_lp, token_entropy)
        )
        tokens = mask.sum()
        rows_global = torch.tensor(float(mask.shape[0]))
        if world > 1:
            torch.distributed.all_reduce(tokens)
            torch.distributed.all_reduce(rows_global)
        cfg.global_batch_info.update(
            dp_size=world,
            batch_num_tokens=int(tokens.item()),
            global_batch_size=int(rows_global.item()),
            loss_scale_factor=cfg.loss_scale_factor,
        )
        loss, loss_metrics = self.loss_fn(
            old_log_prob=batch["old_log_probs"],
            log_prob=log_prob,
            advantages=batch["advantages"],
            response_mask=mask,
            loss_agg_mode=cfg.loss_agg_mode,
            config=cfg,
            rollout_is_weights=None,
        )
        step_metrics = {"pg_loss": float(loss.item())}
        loss, extra = self._regularisers(loss, log_prob, entropy, batch)
        step_metrics.update(extra)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if world > 1:  # verl's DP semantics: the loss carries dp_size, gradients are averaged
            for param in self.model.parameters():
                if param.grad is not None:
                    torch.distributed.all_reduce(param.grad)
                    param.grad /= world
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
        self.optimizer.step()
        step_metrics["grad_norm"] = float(grad_norm.item())
        step_metrics.update({k.removeprefix("actor/"): float(v) for k, v in loss_metrics.items()})
        return step_metrics

    def _regularisers(
        self,
        policy_loss: torch.Tensor,
        log_prob: torch.Tensor,
        entropy: torch.Tensor,
        batch: dict[str, torch.Tensor],
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """verl's ``ppo_loss`` terms after the policy loss: ``- entropy_coeff · entropy_loss``
        (when ``entropy_coeff != 0``, where verl's trainer asks for the entropy) and ``+
        kl_loss_coef · kl_loss`` (``use_kl_loss``), aggregated as verl does, with its metrics."""
        cfg = self.actor_config
        mask = batch["response_mask"].to(torch.bool)
        metrics: dict[str, float] = {}
        if cfg.entropy_coeff != 0:
            entropy_loss = core_algos.agg_loss(
                loss_mat=entropy,
                loss_mask=mask,
                loss_agg_mode=cfg.loss_agg_mode,
                **cfg.global_batch_info,
            )
            policy_loss = policy_loss - cfg.entropy_coeff * entropy_loss
            metrics["entropy_loss"] = float(entropy_loss.item())
        if cfg.use_kl_loss:
            kld = core_algos.kl_penalty(
                logprob=log_prob, ref_logprob=batch["ref_log_prob"], kl_penalty=cfg.kl_loss_type
            )
            kl_loss = core_algos.agg_loss(
                loss_mat=kld,
                loss_mask=mask,
                loss_agg_mode=cfg.loss_agg_mode,
                **cfg.global_batch_info,
            )
            policy_loss = policy_loss + kl_loss * cfg.kl_loss_coef
            metrics["kl_loss"] = float(kl_loss.item())
            metrics["kl_coef"] = float(cfg.kl_loss_coef)
        return policy_loss, metrics

    def _trace(self, data: Any, columns: dict[str, torch.Tensor]) -> None:
        """Write what this rank trains on at this step (see module docstring)."""
        directory = os.environ.get(TRACE_ENV)
        if not directory:
            return
        keys = set(data.keys())  # a TensorDict: membership through its keys
        scores = data["rm_scores"] if "rm_scores" in keys else data["token_level_rewards"]
        infos = tu.get(data, "extra_info", default=None)
        step = int(_first(tu.get(data, "global_steps", default=-1)))
        # verl's sub-steps (parameter_sync_step > 1) update the actor several times a step
        calls = self.__dict__.setdefault("_trace_calls", {})
        sub_step = calls[step] = calls.get(step, -1) + 1
        record = {
            "step": step,
            "sub_step": sub_step,
            "rank": self.rank,
            "advantages": columns["advantages"],
            "response_mask": columns["response_mask"],
            "rewards": _padded(scores, columns["advantages"].shape[1]).sum(dim=-1),
            "uids": [str(u) for u in (tu.get(data, "uid", default=None) or [])],
            "prompt_ids": [str((info or {}).get("id", "")) for info in (infos or [])],
            "session_ids": [int(s) for s in (tu.get(data, "session_id", default=None) or [])],
        }
        if "rollout_log_probs" in keys:  # the server's log-probs: which weights sampled the rows
            width = columns["advantages"].shape[1]
            gap = (_padded(data["rollout_log_probs"], width) - columns["old_log_probs"]).abs()
            record["rollout_gap"] = float((gap * columns["response_mask"]).max())
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"step_{step}_sub_{sub_step}_rank_{self.rank}.pt")
        torch.save(record, path + ".tmp")
        os.replace(path + ".tmp", path)

    # ------------------------------------------------------------------ weights to the rollout (v1)
    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    def update_weights(self, global_steps: int | None = None, mode: str = "auto") -> None:
        """verl's ``naive`` checkpoint engine: the first rank of each rollout replica sends the
        weights to that replica's server (:mod:`~ebpo.lab.verl_cpu.v1.serving`), which wakes it."""
        import ray  # heavy optional import (verl extra)

        rollout = self.config.rollout
        replica_size = int(
            rollout.tensor_model_parallel_size
            * rollout.data_parallel_size
            * rollout.pipeline_model_parallel_size
        )
        if self.rank % replica_size:
            return
        server = ray.get_actor(server_actor_name(self.rank // replica_size))
        state = {name: tensor.detach().clone() for name, tensor in self.model.state_dict().items()}
        ray.get(server.load_weights.remote(state, global_steps))

    # ------------------------------------------------------------------ checkpoints
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(
        self,
        local_path: str,
        hdfs_path: str | None = None,
        global_step: int = 0,
        max_ckpt_to_keep: int | None = None,
    ) -> None:
        if self.rank != 0:  # every rank holds the same weights and optimizer state
            return
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


def _gloo_process_group(rank: int, world_size: int) -> Any:
    """The default process group, gloo, rendezvous at verl's ``MASTER_ADDR:MASTER_PORT`` (the Ray
    node's address). Rank 0 binds the store's socket to that address itself: torch's ``TCPStore``
    would listen on every interface. Returns the bound socket (keep it alive)."""
    import socket
    from datetime import timedelta

    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    listen = None
    if rank == 0:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listen = socket.socket(family, socket.SOCK_STREAM)
        listen.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listen.bind((host, port))
        listen.listen()
    store = torch.distributed.TCPStore(
        host_name=host,
        port=port,
        world_size=world_size,
        is_master=rank == 0,
        timeout=timedelta(seconds=300),
        use_libuv=False,
        master_listen_fd=listen.fileno() if listen is not None else None,
    )
    torch.distributed.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
    return listen, store


def _response_part(values: torch.Tensor, prompts: list[torch.Tensor], width: int) -> torch.Tensor:
    """``[bs, width]``: each row's entries over its response tokens (response token ``j`` of a
    row is predicted at position ``len(prompt) - 1 + j`` of :meth:`CPUActorRolloutWorker._forward`)."""
    shifted = F.pad(values, (0, width))
    return torch.stack([shifted[i, len(p) - 1 : len(p) - 1 + width] for i, p in enumerate(prompts)])


def _first(value: Any) -> Any:
    """A scalar from a per-row list/array or a scalar."""
    if isinstance(value, (list, tuple)) or hasattr(value, "tolist"):
        items = value.tolist() if hasattr(value, "tolist") else list(value)
        return items[0] if isinstance(items, list) and items else items
    return value
