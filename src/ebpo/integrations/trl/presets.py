"""Presets: the paper's methods (EBPO and its baselines) as `EBPOConfig` keyword overrides.

A preset is a trainer setup plus a named variant of the estimator table
(:data:`ebpo.estimators.VARIANTS`): the variant gives the estimator and its options, the preset
adds the trainer settings. The paper (arXiv 2602.05165) trained every method in verl with
token-mean loss aggregation, PPO clip 0.2 and a low-variance (k3) KL loss with coefficient 0.001.
On TRL that is ``loss_type="dapo"`` (normalised by the number of completion tokens of the global
batch, i.e. verl's ``token-mean``) and ``beta=0.001`` (TRL's KL term is the same k3 estimator):
:data:`PAPER_COMMON`. Differences per method (:data:`PAPER_METHODS`):

========================  =====================================================================
preset                    variant, and what changes in the trainer
========================  =====================================================================
``grpo``                  variant ``grpo`` (group mean, divided by the group std)
``dr_grpo``               variant ``dr_grpo`` (no std division), ``loss_type="dr_grpo"``
                          (token sum / max_completion_length = verl's seq-mean-token-sum-norm)
``dapo``                  variant ``grpo``; clip-higher ``epsilon_high=0.28``; token-level loss;
                          soft overlong punishment (buffer = half of max_completion_length,
                          penalty 1.0: the paper's 4096 of 8192); zero-variance group filtering
                          (without resampling); no KL (``beta=0``, as in the DAPO paper)
``entropy_mech``          variant ``grpo``; Clip-Cov with ratio 2e-4 and bounds [1, 5]; no KL
``rloo`` ``jspo``         the variant of that name, otherwise as ``grpo``
``ebpo`` ``ebpo_bb``      the variant of that name: the estimator with its defaults (paper's
                          Algorithm 1: history prior, pooled σ², raw τ², batch normalisation)
``ebpo_batch``            variant ``ebpo_batch``: ``ebpo`` with the prior of the authors'
                          released verl code: ``prior="batch"`` (μ, σ², τ² from the current
                          generation batch only), ``prior_mean_from="group_means"`` (μ = mean of the
                          group means)
========================  =====================================================================

**Which prior.** The ``ebpo`` preset keeps the paper's Algorithm 1 — a prior accumulated over the
whole run (``prior="history"``, the library default) — and not the per-batch prior the authors'
released code uses (and the verl recipes reproduce, ``recipes/verl/README.md``): a TRL generation
batch holds a few to a few dozen prompts (8-64 typically), and a prior estimated from that few
group means (τ² from 8-64 numbers) is noisy, while the history prior keeps sharpening over the
run. The authors ran verl with 512-prompt batches, where the batch prior is well estimated.
``ebpo_batch`` offers their convention on TRL for comparison; give it large generation batches
(``generation_batch_size`` / ``steps_per_generation``).

Every other variant name (``ebpo_ema``, ``ebpo_within``, ``ebpo_cluster``, ...,
:func:`ebpo.estimators.available_variants`, which includes every bare estimator name such as
``reinforce_pp_baseline``) is accepted by :func:`make_config` too: :data:`PAPER_COMMON` plus that
variant's estimator and options. Per-topic EBPO is ``make_config("ebpo_cluster",
cluster_column="topic")`` (add ``data_order="topic"`` for a topic-ordered stream).
"""

from __future__ import annotations

from typing import Any

from ebpo.estimators import available_variants
from ebpo.integrations.trl.config import EBPOConfig, parse_estimator_options
from ebpo.integrations.trl.paper_methods import (
    PAPER_COMMON,
    PAPER_METHODS,
    PRESETS,
    preset_arguments,
    preset_fields,
    variant_preset,
)

__all__ = [
    "PAPER_COMMON",
    "PAPER_METHODS",
    "PRESETS",
    "available_presets",
    "make_config",
    "preset_arguments",
    "preset_fields",
    "variant_preset",
]


def available_presets() -> list[str]:
    """Names accepted by :func:`make_config`: the presets, then the other variant and estimator
    names (:func:`ebpo.estimators.available_variants`)."""
    return list(PRESETS) + [name for name in available_variants() if name not in PRESETS]


def make_config(preset: str, **overrides: Any) -> EBPOConfig:
    """An :class:`EBPOConfig` for ``preset`` (a key of :data:`PRESETS`, or any variant or
    estimator name of :func:`ebpo.estimators.available_variants`).

    ``overrides`` are EBPOConfig fields and win over the preset's values; ``estimator_options``
    (dict, JSON string or None) is merged into the preset's, key by key, so that
    ``make_config("ebpo_batch", estimator_options={"normalize": "center"})`` keeps the batch prior
    (and so does ``estimator_options=None``).

    Raises:
        ValueError: unknown preset (the message lists presets, variants and estimators), or any
            invalid field.
    """
    base = preset_fields(preset)
    if "estimator_options" in overrides:
        # None adds nothing: it must not erase the preset's own options (ebpo_batch's prior)
        given = parse_estimator_options(overrides["estimator_options"])
        merged = {**base.get("estimator_options", {}), **given}
        overrides = {**overrides, "estimator_options": merged}
    return EBPOConfig(**{**base, **overrides})
