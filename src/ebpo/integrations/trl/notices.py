"""What a TRL run says about its estimator (printed once, by the main process), and which of
transformers' notices on resume it leaves out because they are harmless.

* At the start of ``train()``: the estimator, all its settings, and what batch it sees
  (:func:`estimator_line`).
* On resume: the checkpoint the estimator state came from, and what that state holds — its
  updates and the rewards in its prior (:func:`restored_line`), the count that ``ebpo/prior_count``
  goes on from.
* transformers' "There were missing keys in the checkpoint model loaded: ['lm_head.weight']": a
  model with tied input and output embeddings (``tie_word_embeddings``: Llama-style small models,
  SmolLM2, Qwen3-0.6B/1.7B, the tiny test model) has one tensor under both names, and
  ``save_pretrained`` writes it once, under the embedding's name. Loading the checkpoint copies it
  into that one tensor, so the output layer gets it too: nothing is missing.
  :func:`tied_missing_keys` finds the keys of such shared tensors whose other name was loaded;
  the trainer drops only those from the notice (any other missing key is still reported).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ebpo.evaluation.model_checks import tied_missing_keys

__all__ = ["estimator_line", "restored_line", "tied_missing_keys"]


def estimator_line(name: str, estimator: Any, args: Any) -> str:
    """The line a run prints at its start: ``name`` (``advantage_estimator``), the estimator with
    every setting (its ``repr``), and the batch it is updated on."""
    g = args.num_generations
    batch = args.generation_batch_size
    prompts = f" = {batch // g} prompts x G {g}" if batch and batch % g == 0 else f" (G {g})"
    when = (
        "updated once per generation batch in training; its state is saved in every checkpoint"
        if estimator.carries_state
        else "no running state"
    )
    return (
        f"EBPOTrainer: advantage estimator {name}: {estimator!r}; it sees each generation batch "
        f"of {batch} completions{prompts} ({when})"
    )


def restored_line(checkpoint: str, state: Mapping[str, Any], note: str = "") -> str:
    """The line a resumed run prints: where the estimator state came from and what it holds."""
    held = []
    steps = state.get("steps")
    if isinstance(steps, int):
        held.append(f"{steps} update{'s' if steps != 1 else ''}")
    prior = state.get("global")
    count = prior.get("rewards", {}).get("count") if isinstance(prior, Mapping) else None
    if isinstance(count, (int, float)):
        held.append(f"prior_count {count:g} (rewards in the prior)")
    what = ", ".join(held) if held else "no running statistics"
    return (
        f"EBPOTrainer: estimator state ({state.get('estimator')}) restored from {checkpoint}: "
        f"{what}{note}"
    )
