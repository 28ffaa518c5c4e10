"""Sampling from the CPU loop's causal LM with transformers ``generate``, seeded so that a resumed run
draws what the uninterrupted one did.

Shared by the legacy path's worker (:meth:`~ebpo.lab.verl_cpu.shared.worker.CPUActorRolloutWorker.generate_sequences`,
a whole batch per call) and the v1 path's rollout server
(:class:`~ebpo.lab.verl_cpu.v1.serving.CPUGenerationServer`, one request per call). Pure sampling at
the temperature (verl's ``rollout.top_k=-1``, ``top_p=1``); the response is every token up to and
including the first EOS, as vLLM's output is.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["Samples", "generation_seed", "request_seed", "sample", "server_actor_name"]

#: keeps validation seeds apart from training seeds (validation runs at the same global step)
_VALIDATION_SEED_OFFSET = 1_000_003


def server_actor_name(replica_rank: int) -> str:
    """The Ray actor name of a v1 rollout replica's server
    (:class:`~ebpo.lab.verl_cpu.v1.serving.CPUGenerationServer`): the actor workers find it by this
    name to send it their weights."""
    return f"ebpo_cpu_rollout_server_{replica_rank}"


def generation_seed(seed: int, global_step: int, validate: bool) -> int:
    """The sampling seed of one batch: a function of the step only, never of what ran before in the
    process (so a resumed run samples what the uninterrupted one did)."""
    return int(seed) * 7919 + int(global_step) + (_VALIDATION_SEED_OFFSET if validate else 0)


def request_seed(seed: int, request_key: str) -> int:
    """The sampling seed of one request: a hash of the rollout seed and the request's key (which
    names the step, the prompt and the sample), so that the order in which concurrent requests
    reach the server does not matter."""
    digest = hashlib.sha256(f"{int(seed)}/{request_key}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


@dataclass
class Samples:
    """``[bs, width]`` responses (EOS included, padding after it), their mask and the log-probability
    of each sampled token under ``logits / temperature`` (0 where masked)."""

    responses: torch.Tensor
    response_mask: torch.Tensor
    log_probs: torch.Tensor


def sample(
    model: Any,  # a transformers causal LM (torch's Module has no generate)
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    width: int,
    pad_token_id: int,
    eos_token_id: int,
    do_sample: bool,
    temperature: float,
    seed: int,
    vocabulary: int,
) -> Samples:
    """Generate ``width`` tokens after left-padded ``input_ids`` under ``torch.manual_seed(seed)`` (the
    global RNG is restored afterwards)."""
    if temperature <= 0:
        do_sample = False
    model.eval()
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        sampling = (
            {"temperature": temperature, "top_p": 1.0, "top_k": vocabulary} if do_sample else {}
        )
        out = model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            max_new_tokens=width,
            do_sample=do_sample,
            pad_token_id=pad_token_id,
            eos_token_id=eos_token_id,
            output_scores=True,
            return_dict_in_generate=True,
            **sampling,
        )
    responses = out.sequences[:, input_ids.shape[1] :]
    generated = responses.shape[1]
    responses = F.pad(responses, (0, width - generated), value=pad_token_id)
    is_eos = responses.eq(eos_token_id).int()
    after_eos = (is_eos.cumsum(dim=1) - is_eos) > 0
    response_mask = (~after_eos).int()
    responses = responses.masked_fill(after_eos, pad_token_id)
    # generate's scores are the processed logits (temperature applied); greedy: raw logits
    scores = torch.stack(out.scores, dim=1).float()  # [bs, generated, vocab]
    chosen = responses[:, :generated].unsqueeze(-1)
    token_lp = scores.log_softmax(dim=-1).gather(-1, chosen).squeeze(-1)
    log_probs = F.pad(token_lp, (0, width - generated)) * response_mask
    return Samples(responses=responses, response_mask=response_mask, log_probs=log_probs)
