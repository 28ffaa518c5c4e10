"""The paper's methods on TRL as data: each is a named variant of the estimator table
(:data:`ebpo.estimators.VARIANTS`) plus trainer settings (:data:`PAPER_METHODS`), on top of the
settings every method shares (:data:`PAPER_COMMON`). :mod:`.presets` documents the table and builds
configurations from it (``make_config``); :mod:`.estimator_settings` reads it to tell an estimator
name from a preset that also sets the trainer (``dapo``, ``entropy_mech``).
"""

from __future__ import annotations

import json
from typing import Any

from ebpo.estimators import available_variants, variant_spec

__all__ = [
    "PAPER_COMMON",
    "PAPER_METHODS",
    "PRESETS",
    "preset_arguments",
    "preset_fields",
    "variant_preset",
]

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


def preset_fields(preset: str) -> dict[str, Any]:
    """The EBPOConfig fields that ``preset`` sets (what :func:`make_config` starts from).

    Raises:
        ValueError: unknown preset (the message lists presets, variants and estimators).
    """
    if not isinstance(preset, str):
        raise ValueError(f"preset must be a string, got {type(preset).__name__}")
    if preset in PRESETS:
        return dict(PRESETS[preset])
    if preset in available_variants():
        return variant_preset(preset)
    others = [name for name in available_variants() if name not in PRESETS]
    raise ValueError(
        f"unknown preset {preset!r}; expected a preset {sorted(PRESETS)} or a variant or "
        f"estimator name {others}"
    )


def preset_arguments(preset: str) -> list[str]:
    """``preset`` written out as ``ebpo grpo`` (``trl grpo``) flags, one per field it sets:
    ``["--advantage_estimator", "grpo", "--beta", "0.0", ...]`` (a dict as a JSON object; the same
    keys and values go into a YAML recipe). Command-line flags take estimator names only, so this
    is how a preset reaches the command line."""
    fields = preset_fields(preset)
    first = [k for k in ("advantage_estimator", "estimator_options") if k in fields]
    arguments = []
    for key in [*first, *(k for k in fields if k not in first)]:
        value = fields[key]
        if isinstance(value, dict):
            text = json.dumps(value)
        elif isinstance(value, bool):
            text = str(value).lower()
        else:
            text = str(value)
        arguments += [f"--{key}", text]
    return arguments
