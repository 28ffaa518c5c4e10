"""Unsloth integration: EBPO on top of the GRPO trainer Unsloth puts in place, with one changed
import in Unsloth's usual GRPO script (docs/unsloth.md).

    import unsloth                                       # first, as Unsloth asks
    from unsloth import FastLanguageModel
    from ebpo.integrations.unsloth import EBPOConfig, EBPOTrainer   # instead of trl's GRPO*

    args = EBPOConfig(output_dir="runs/ebpo", num_generations=4, advantage_estimator="ebpo")
    trainer = EBPOTrainer(model=model, processing_class=tokenizer, reward_funcs=[...], args=args,
                          train_dataset=dataset)

Unsloth rewrites TRL's trainers when it loads on a GPU: ``trl.GRPOTrainer`` becomes its generated
``UnslothGRPOTrainer`` (its own loss, which reads keys such as ``max_left_pad`` that its
``_generate_and_score_completions`` adds) and ``trl.GRPOConfig`` its ``UnslothGRPOConfig`` (other
defaults, e.g. ``optim="adamw_8bit"``). Under Unsloth's CPU backend both stay TRL's. This module
builds, when it is imported, :class:`EBPOTrainer` = :class:`~ebpo.integrations.trl.trainer.EBPOTrainerMixin`
over whichever ``trl.GRPOTrainer`` is in place, and :class:`EBPOConfig` =
:class:`~ebpo.integrations.trl.config.EBPOConfigMixin` over whichever ``trl.GRPOConfig`` is (its
``__init__``, defaults and checks kept): the same code as :class:`ebpo.integrations.trl.EBPOTrainer`,
so everything it does (estimator state in checkpoints and exact resume, ``ebpo/*`` metrics,
``scale_rewards``, the lone-row policy) holds here, and every key of the trainer's output it does not
own passes through. Hence ``import unsloth`` must come first (ImportError otherwise).

Tested with unsloth and unsloth_zoo 2026.10.9 and trl 1.15.0 (``make test-unsloth``).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

if "unsloth" not in sys.modules:  # before trl: Unsloth must patch it first
    raise ImportError(
        "ebpo.integrations.unsloth: import unsloth first (`import unsloth` before this import and "
        "before trl/transformers), so that EBPOTrainer is built on Unsloth's GRPOTrainer"
    )

import trl  # noqa: E402

from ebpo.integrations.trl.config import EBPOConfigMixin  # noqa: E402
from ebpo.integrations.trl.trainer import EBPOTrainerMixin  # noqa: E402

__all__ = ["GENERATED", "EBPOConfig", "EBPOTrainer"]

# What is in place now: Unsloth's generated classes on a GPU, TRL's own under its CPU backend.
_GRPOTrainer: Any = trl.GRPOTrainer
_GRPOConfig: Any = trl.GRPOConfig
#: whether the trainer underneath is Unsloth's generated ``UnslothGRPOTrainer`` (its own loss)
GENERATED: bool = _GRPOTrainer.__name__.startswith("Unsloth")

_OWN_FIELDS = {f.name: f for f in dataclasses.fields(EBPOConfigMixin)}
_BASE_FIELDS = {f.name for f in dataclasses.fields(_GRPOConfig)}


def _default(spec: dataclasses.Field[Any]) -> Any:
    if spec.default_factory is not dataclasses.MISSING:
        return spec.default_factory()
    return spec.default


@dataclasses.dataclass
class EBPOConfig(EBPOConfigMixin, _GRPOConfig):
    """The GRPOConfig in place at import (Unsloth's, with its defaults, or TRL's) plus EBPO's
    fields (:class:`~ebpo.integrations.trl.config.EBPOConfigMixin`; docs/trl.md lists them)."""

    _VALID_DICT_FIELDS = _GRPOConfig._VALID_DICT_FIELDS + ["estimator_options"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # EBPO's fields first (the base's __init__ ends in __post_init__, which checks them); the
        # base's own __init__ then runs with its own defaults. scale_rewards, which the base
        # declares too, goes to it with EBPO's default (None: the estimator decides).
        for name, spec in _OWN_FIELDS.items():
            value = kwargs.pop(name, _default(spec))
            if name in _BASE_FIELDS:
                kwargs[name] = value
            else:
                setattr(self, name, value)
        _GRPOConfig.__init__(self, *args, **kwargs)


class EBPOTrainer(EBPOTrainerMixin, _GRPOTrainer):
    """EBPO over the GRPOTrainer in place at import: the constructor, behaviour, metrics and
    checkpoints of :class:`ebpo.integrations.trl.EBPOTrainer`; ``args`` must be this module's
    :class:`EBPOConfig`. Clip-Cov (``clip_cov_ratio > 0``) is refused on Unsloth's generated
    trainer, whose fused loss does not go through TRL's ``_compute_loss``."""

    _ebpo_config_class = EBPOConfig
    _ebpo_config_hint = "ebpo.integrations.unsloth.EBPOConfig, built after `import unsloth`"

    def __init__(self, model: Any, *args: Any, **kwargs: Any) -> None:
        config = kwargs.get("args", args[1] if len(args) > 1 else None)
        if GENERATED and isinstance(config, EBPOConfig) and config.clip_cov_ratio > 0:
            raise ValueError(
                "clip_cov_ratio > 0 is not supported on Unsloth's GRPOTrainer (its fused loss does "
                "not go through TRL's _compute_loss, where Clip-Cov acts); set clip_cov_ratio=0"
            )
        super().__init__(model, *args, **kwargs)
