"""Presets: the paper's methods (EBPO and its baselines) as `EBPOConfig` keyword overrides.

The paper (arXiv 2602.05165) trained every method in verl with token-mean loss aggregation, PPO clip
0.2 and a low-variance (k3) KL loss with coefficient 0.001. On TRL that is ``loss_type="dapo"``
(normalised by the number of completion tokens of the global batch, i.e. verl's ``token-mean``) and
``beta=0.001`` (TRL's KL term is the same k3 estimator). Differences per method:

========================  =====================================================================
preset                    what changes
========================  =====================================================================
``grpo``                  estimator ``grpo`` (group mean, divided by the group std)
``dr_grpo``               estimator ``dr_grpo`` (no std division), ``loss_type="dr_grpo"``
                          (token sum / max_completion_length = verl's seq-mean-token-sum-norm)
``dapo``                  estimator ``grpo``; clip-higher ``epsilon_high=0.28``; token-level loss;
                          soft overlong punishment (buffer = half of max_completion_length,
                          penalty 1.0: the paper's 4096 of 8192); zero-variance group filtering
                          (without resampling); no KL (``beta=0``, as in the DAPO paper)
``entropy_mech``          estimator ``grpo``; Clip-Cov with ratio 2e-4 and bounds [1, 5]; no KL
``rloo`` ``jspo``         the estimator of that name, otherwise as ``grpo``
``ebpo`` ``ebpo_bb``      the estimator of that name with its defaults (paper's Algorithm 1:
                          history prior, pooled σ², raw τ², batch normalisation)
``ebpo_batch``            ``ebpo`` with the prior of the authors' released verl code:
                          ``prior="batch"`` (μ, σ², τ² from the current generation batch only),
                          ``prior_mean="group_means"`` (μ = mean of the group means)
========================  =====================================================================

**Which prior.** The ``ebpo`` preset keeps the paper's Algorithm 1 — a prior accumulated over the
whole run (``prior="history"``, the library default) — and not the per-batch prior the authors'
released code uses (and the verl recipes reproduce, ``recipes/verl/README.md``): a TRL generation
batch holds a few to a few dozen prompts (8-64 typically), and a prior estimated from that few group
means (τ² from 8-64 numbers) is noisy, while the history prior keeps sharpening over the run. The
authors ran verl with 512-prompt batches, where the batch prior is well estimated. ``ebpo_batch``
offers their convention on TRL for comparison; give it large generation batches
(``generation_batch_size`` / ``steps_per_generation``).

Any bare estimator name (e.g. ``reinforce_pp_baseline``) is also accepted by :func:`make_config`:
the common settings plus that estimator. Per-topic EBPO is ``make_config("ebpo",
estimator_options={"per_cluster": True}, cluster_column="topic", data_order="topic")``.
"""

from __future__ import annotations

from typing import Any

import ebpo
from ebpo.integrations.trl.config import EBPOConfig, parse_estimator_options

__all__ = ["PAPER_COMMON", "PRESETS", "available_presets", "make_config"]

#: settings every method shares in the paper's setup (verl token-mean loss, k3 KL 0.001, clip 0.2)
PAPER_COMMON: dict[str, Any] = {"loss_type": "dapo", "beta": 0.001, "epsilon": 0.2}

PRESETS: dict[str, dict[str, Any]] = {
    "grpo": {**PAPER_COMMON, "advantage_estimator": "grpo"},
    "dr_grpo": {**PAPER_COMMON, "advantage_estimator": "dr_grpo", "loss_type": "dr_grpo", "scale_rewards": "none"},
    "dapo": {
        **PAPER_COMMON,
        "advantage_estimator": "grpo",
        "beta": 0.0,
        "epsilon_high": 0.28,
        "overlong_buffer_ratio": 0.5,
        "overlong_penalty_factor": 1.0,
        "filter_zero_variance_groups": True,
    },
    "entropy_mech": {
        **PAPER_COMMON,
        "advantage_estimator": "grpo",
        "beta": 0.0,
        "clip_cov_ratio": 2e-4,
        "clip_cov_lb": 1.0,
        "clip_cov_ub": 5.0,
    },
    "rloo": {**PAPER_COMMON, "advantage_estimator": "rloo"},
    "jspo": {**PAPER_COMMON, "advantage_estimator": "jspo"},
    # the paper's Algorithm 1 (history prior): see "Which prior" in the module docstring
    "ebpo": {**PAPER_COMMON, "advantage_estimator": "ebpo"},
    "ebpo_bb": {**PAPER_COMMON, "advantage_estimator": "ebpo_bb"},
    # the authors' released code: prior from the current batch, μ = mean of the group means
    "ebpo_batch": {
        **PAPER_COMMON,
        "advantage_estimator": "ebpo",
        "estimator_options": {"prior": "batch", "prior_mean": "group_means"},
    },
}


def available_presets() -> list[str]:
    """Names accepted by :func:`make_config`: the presets, then the other estimator names."""
    return list(PRESETS) + [name for name in ebpo.available_estimators() if name not in PRESETS]


def make_config(preset: str, **overrides: Any) -> EBPOConfig:
    """An :class:`EBPOConfig` for ``preset`` (a key of :data:`PRESETS` or any estimator name).

    ``overrides`` are EBPOConfig fields and win over the preset's values; ``estimator_options``
    (dict or JSON string) is merged into the preset's, key by key, so that
    ``make_config("ebpo_batch", estimator_options={"normalize": "center"})`` keeps the batch prior.

    Raises:
        ValueError: unknown preset (the message lists presets and estimators), or any invalid field.
    """
    if not isinstance(preset, str):
        raise ValueError(f"preset must be a string, got {type(preset).__name__}")
    if preset in PRESETS:
        base = PRESETS[preset]
    elif preset in ebpo.available_estimators():
        base = {**PAPER_COMMON, "advantage_estimator": preset}
    else:
        raise ValueError(
            f"unknown preset {preset!r}; expected a preset {sorted(PRESETS)} or an estimator name "
            f"{ebpo.available_estimators()}"
        )
    options = overrides.get("estimator_options")
    if "estimator_options" in base and options is not None:
        overrides = {**overrides, "estimator_options": {**base["estimator_options"], **parse_estimator_options(options)}}
    return EBPOConfig(**{**base, **overrides})
