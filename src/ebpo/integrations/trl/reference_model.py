"""TRL's reference model as a deep copy of the policy object (:func:`reference_from_policy`), for
policies that exist only in memory or came from a GGUF file."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import torch
import trl.trainer.grpo_trainer as grpo_module

from ebpo.integrations.trl.config import EBPOConfig

__all__ = ["reference_from_policy"]


@contextlib.contextmanager
def reference_from_policy(model: Any, args: EBPOConfig) -> Iterator[None]:
    """With ``beta > 0``, let TRL's reference model be a deep copy of a policy passed as an object.

    TRL 1.16 rebuilds the reference model with ``create_model_from_path(model.config._name_or_path)``,
    which fails for models that exist only in memory (``ebpo.evaluation.models.build_tiny_llama``) or came from
    a GGUF file (the path is a directory without the ``gguf_file`` argument). The initial policy is
    exactly the reference wanted, so TRL's loader is swapped for a deep copy while the parent
    constructor runs; every other step of TRL's reference handling is unchanged.
    """
    if args.beta == 0.0 or isinstance(model, str) or not isinstance(model, torch.nn.Module):
        yield
        return
    original = grpo_module.create_model_from_path

    def copy_policy(model_id: str, *loader_args: Any, **loader_kwargs: Any) -> torch.nn.Module:
        reference = copy.deepcopy(model)
        dtype = loader_kwargs.get("dtype")
        return reference.to(dtype) if isinstance(dtype, torch.dtype) else reference

    grpo_module.create_model_from_path = copy_policy
    try:
        yield
    finally:
        grpo_module.create_model_from_path = original
