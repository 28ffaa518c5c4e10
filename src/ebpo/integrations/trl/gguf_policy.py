"""A policy named by a GGUF file (``smollm2-135m``, ``model.gguf``): loaded by ebpo, handed to TRL
as an object.

TRL 1.16 loads a model given by name with ``create_model_from_path(name)`` and its tokenizer with
``AutoProcessor.from_pretrained(name)``: neither passes transformers' ``gguf_file`` argument, so
a ``.gguf`` path fails ("not a valid JSON file") and the alias goes to the Hub. For such a name
:func:`load_gguf_policy` loads the model and tokenizer through the resolver every ebpo command
uses (:func:`ebpo.evaluation.models.load_model_and_tokenizer`) and the trainer gets the objects;
every other name goes to TRL unchanged. The reference model (``beta > 0``) is then a copy of the
loaded policy (:mod:`.reference_model`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from ebpo.evaluation.models import load_model_and_tokenizer, names_a_gguf

__all__ = ["load_gguf_policy", "model_init_kwargs_used"]

#: TRL's warning when a model object comes with ``model_init_kwargs`` (its dtype was used here)
_IGNORED_KWARGS = "but your model is already instantiated"


def load_gguf_policy(model: Any, args: Any, processing_class: Any) -> tuple[Any, Any, bool]:
    """``(model, processing_class, loaded)``: for a ``model`` string naming a GGUF file
    (:func:`ebpo.evaluation.models.names_a_gguf`) the model loaded on the CPU (TRL moves it) in
    ``args.model_init_kwargs["dtype"]`` (TRL's default: float32; ``auto``: float32 on the CPU) and,
    when ``processing_class`` is None, its tokenizer, padded and truncated on the left as TRL loads
    one; ``loaded`` True. Anything else comes back as it was. ValueError naming the model when it
    does not load."""
    if not isinstance(model, str) or not names_a_gguf(model):
        return model, processing_class, False
    dtype = (getattr(args, "model_init_kwargs", None) or {}).get("dtype") or "float32"
    policy, tokenizer = load_model_and_tokenizer(model, dtype=dtype, device="cpu")
    if processing_class is None:
        tokenizer.padding_side = tokenizer.truncation_side = "left"
        processing_class = tokenizer
    return policy, processing_class, True


@contextlib.contextmanager
def model_init_kwargs_used(loaded: bool) -> Iterator[None]:
    """While TRL's constructor runs on a policy :func:`load_gguf_policy` loaded: without TRL's
    warning that ``model_init_kwargs`` are ignored (their dtype was used to load it)."""
    if not loaded:
        yield
        return
    trl_logger = logging.getLogger("trl.trainer.grpo_trainer")

    def not_ignored(record: logging.LogRecord) -> bool:
        return _IGNORED_KWARGS not in record.getMessage()

    trl_logger.addFilter(not_ignored)
    try:
        yield
    finally:
        trl_logger.removeFilter(not_ignored)
