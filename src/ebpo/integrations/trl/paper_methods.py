"""The paper's methods (EBPO and its baselines) on TRL as data: `EBPOConfig` keyword overrides.

A preset is a trainer setup plus an estimator name (:func:`ebpo.estimators.available_estimators`,
e.g. ``ebpo_batch``: ``ebpo`` with options): the name gives the estimator and its options, the
preset adds the trainer settings. The paper (arXiv 2602.05165) trained every method in verl with
token-mean loss aggregation, PPO clip 0.2 and a low-variance (k3) KL loss with coefficient 0.001.
On TRL that is ``loss_type="dapo"`` (normalised by the number of completion tokens of the global
batch, i.e. verl's ``token-mean``) and ``beta=0.001`` (TRL's KL term is the same k3 estimator):
:data:`PAPER_COMMON`. Differences per method (:data:`PAPER_METHODS`):

========================  =====================================================================
preset                    estimator, and what changes in the trainer
========================  =====================================================================
``grpo``                  ``grpo`` (group mean, divided by the group std)
``dr_grpo``               ``dr_grpo`` (no std division), ``loss_type="dr_grpo"``
                          (token sum / max_completion_length = verl's seq-mean-token-sum-norm)
``dapo``                  ``grpo``; clip-higher ``epsilon_high=0.28``; token-level loss;
                          soft overlong punishment (buffer = half of max_completion_length,
                          penalty 1.0: the paper's 4096 of 8192); zero-variance group filtering
                          (without resampling); no KL (``beta=0``, as in the DAPO paper)
``entropy_mech``          ``grpo``; Clip-Cov with ratio 2e-4 and bounds [1, 5]; no KL
``rloo`` ``jspo``         the estimator of that name, otherwise as ``grpo``
``ebpo`` ``ebpo_bb``      the estimator of that name: the estimator with its defaults (paper's
                          Algorithm 1: history prior, pooled σ², raw τ², batch normalisation)
``ebpo_batch``            ``ebpo_batch``: ``ebpo`` with the prior of the authors'
                          released verl code: ``prior="batch"`` (μ, σ², τ² from the current
                          generation batch only), ``prior_mean_from="group_means"`` (μ = mean of
                          the group means)
========================  =====================================================================

**Which prior.** The ``ebpo`` preset keeps the paper's Algorithm 1 — a prior accumulated over the
whole run (``prior="history"``, the library default) — and not the per-batch prior the authors'
released code uses (and the verl recipes reproduce, ``recipes/verl/README.md``): a TRL generation
batch holds a few to a few dozen prompts (8-64 typically), and a prior estimated from that few
group means (τ² from 8-64 numbers) is noisy, while the history prior keeps sharpening over the
run. The authors ran verl with 512-prompt batches, where the batch prior is well estimated.
``ebpo_batch`` offers their convention on TRL for comparison; give it large generation batches
(``generation_batch_size`` / ``steps_per_generation``).

Every other estimator name (``ebpo_ema``, ``ebpo_within``, ``ebpo_cluster``,
``reinforce_pp_baseline``, a user's own, ...: :func:`ebpo.estimators.available_estimators`) is
accepted by ``make_config`` too: :data:`PAPER_COMMON` plus that estimator and its options.
Per-topic EBPO is ``make_config("ebpo_cluster", cluster_column="topic")``
(add ``data_order="topic"`` for a topic-ordered stream).

A user's word (a paper method or an estimator name) becomes an estimator, its
options and the trainer's settings here and only here, in :func:`preset_fields`: ``make_config``
(:mod:`.config`) starts from it, and ``EBPOConfig`` resolves ``advantage_estimator`` through it
(:func:`.estimator_settings.resolve_estimator`, which refuses the presets that also set the
trainer, ``dapo`` and ``entropy_mech``).
"""

from __future__ import annotations

import json
from typing import Any

from ebpo.estimators import available_estimators, estimator_spec

__all__ = [
    "PAPER_COMMON",
    "PAPER_METHODS",
    "PRESETS",
    "available_presets",
    "preset_arguments",
    "preset_fields",
    "estimator_preset",
]

#: settings every method shares in the paper's setup (verl token-mean loss, k3 KL 0.001, clip 0.2)
PAPER_COMMON: dict[str, Any] = {"loss_type": "dapo", "beta": 0.001, "epsilon": 0.2}

#: the paper's methods: preset name → (estimator name, trainer settings
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


def estimator_preset(name: str, **settings: Any) -> dict[str, Any]:
    """EBPOConfig fields that train estimator ``name``: :data:`PAPER_COMMON`, then ``settings``,
    then the name's registered ``advantage_estimator`` and (if it fixes any) ``estimator_options``.

    Raises:
        ValueError: ``name`` is not a registered estimator name.
    """
    estimator, options = estimator_spec(name)
    preset = {**PAPER_COMMON, **settings, "advantage_estimator": estimator}
    if options:
        preset["estimator_options"] = options
    return preset


#: the paper's methods as EBPOConfig keyword overrides (see :data:`PAPER_METHODS`)
PRESETS: dict[str, dict[str, Any]] = {
    name: estimator_preset(estimator, **settings)
    for name, (estimator, settings) in PAPER_METHODS.items()
}


def available_presets() -> list[str]:
    """Names accepted by ``make_config``: the presets, then the other estimator names
    (:func:`ebpo.estimators.available_estimators`)."""
    return list(PRESETS) + [name for name in available_estimators() if name not in PRESETS]


def preset_fields(preset: str) -> dict[str, Any]:
    """The EBPOConfig fields that ``preset`` sets (what ``make_config`` starts from).

    Raises:
        ValueError: unknown preset (the message lists presets and estimators).
    """
    if not isinstance(preset, str):
        raise ValueError(f"preset must be a string, got {type(preset).__name__}")
    if preset in PRESETS:
        return dict(PRESETS[preset])
    if preset in available_estimators():
        return estimator_preset(preset)
    others = [name for name in available_estimators() if name not in PRESETS]
    raise ValueError(
        f"unknown preset {preset!r}; expected a preset {sorted(PRESETS)} or an estimator name "
        f"{others}"
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
