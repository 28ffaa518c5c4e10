"""The paper's methods on TRL as data: each is a named variant of the estimator table
(:data:`ebpo.estimators.VARIANTS`) plus trainer settings (:data:`PAPER_METHODS`), on top of the
settings every method shares (:data:`PAPER_COMMON`). :mod:`.presets` documents the table and builds
configurations from it (``make_config``); :mod:`.estimator_settings` reads it to tell an estimator
name from a preset that also sets the trainer (``dapo``, ``entropy_mech``).
"""

from __future__ import annotations

from typing import Any

from ebpo.estimators import variant_spec

__all__ = ["PAPER_COMMON", "PAPER_METHODS", "PRESETS", "variant_preset"]

#: settings every method shares in the paper's setup (verl token-mean loss, k3 KL 0.001, clip 0.2)
PAPER_COMMON: dict[str, Any] = {"loss_type": "dapo", "beta": 0.001, "epsilon": 0.2}

#: the paper's methods: preset name → (variant of ``ebpo.estimators.VARIANTS``, trainer settings
#: beyond :data:`PAPER_COMMON`)
PAPER_METHODS: dict[str, tuple[str, dict[str, Any]]] = {
    "grpo": ("grpo", {}),
    "dr_grpo": ("dr_grpo", {"loss_type": "dr_grpo", "scale_rewards": "none"}),
    "dapo": (
        "grpo",
        {
            "beta": 0.0,
            "epsilon_high": 0.28,
            "overlong_buffer_ratio": 0.5,
            "overlong_penalty_factor": 1.0,
            "filter_zero_variance_groups": True,
        },
    ),
    "entropy_mech": (
        "grpo",
        {"beta": 0.0, "clip_cov_ratio": 2e-4, "clip_cov_lb": 1.0, "clip_cov_ub": 5.0},
    ),
    "rloo": ("rloo", {}),
    "jspo": ("jspo", {}),
    # the paper's Algorithm 1 (history prior): see "Which prior" in the module docstring
    "ebpo": ("ebpo", {}),
    "ebpo_bb": ("ebpo_bb", {}),
    # the authors' released code: prior from the current batch, μ = mean of the group means
    "ebpo_batch": ("ebpo_batch", {}),
}


def variant_preset(variant: str, **settings: Any) -> dict[str, Any]:
    """EBPOConfig fields that train variant ``variant``: :data:`PAPER_COMMON`, then ``settings``,
    then the variant's ``advantage_estimator`` and (if it has any) ``estimator_options``.

    Raises:
        ValueError: ``variant`` is neither a variant nor a registered estimator.
    """
    estimator, options = variant_spec(variant)
    preset = {**PAPER_COMMON, **settings, "advantage_estimator": estimator}
    if options:
        preset["estimator_options"] = options
    return preset


#: the paper's methods as EBPOConfig keyword overrides (see :data:`PAPER_METHODS`)
PRESETS: dict[str, dict[str, Any]] = {
    name: variant_preset(variant, **settings) for name, (variant, settings) in PAPER_METHODS.items()
}
