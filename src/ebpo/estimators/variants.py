"""The one table of named variants: an estimator of the registry plus the options that make it a
method of the paper (or of our experiments).

Every layer that names methods reads this table — the simulation (``ebpo simulate``), the TRL
presets (:mod:`ebpo.integrations.trl.paper_methods`), the CPU bench (``ebpo bench``) and the verl
plug-in — so ``ebpo_within`` means the same estimator everywhere::

    est = ebpo.estimators.make_variant("ebpo_within")           # EBPO(within_variance="within", ...)
    est = ebpo.estimators.make_variant("ebpo_ema", half_life=5)  # options override the variant's

A registered estimator name that is not in the table (``reinforce_pp_baseline``) is a variant of
itself with no options, so every function here also accepts any name of
:func:`~ebpo.estimators.available_estimators`.

**``ebpo_ema``'s half-life is 20 steps** (estimator calls). With the bench's 32 prompts a step, 20
steps average some 900 group means (enough for a stable τ²) while the prior still forgets a policy
that has moved over a 100-step run; the README's TRL example uses the same value. (The simulation's
prior study sets its own ``half_life=3`` explicitly, to follow its fast-moving bandit.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ebpo.estimators.base import AdvantageEstimator
from ebpo.estimators.registry import available_estimators, make_estimator

__all__ = ["VARIANTS", "Variant", "available_variants", "make_variant", "variant_spec"]


@dataclass(frozen=True)
class Variant:
    """A named method: registered estimator ``estimator`` with ``options``."""

    name: str
    estimator: str
    options: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))


VARIANTS: Mapping[str, Variant] = MappingProxyType(
    {
        v.name: v
        for v in (
            Variant("grpo", "grpo", description="GRPO: group mean, divided by the group std"),
            Variant("dr_grpo", "dr_grpo", description="Dr. GRPO: group mean, no std division"),
            Variant("rloo", "rloo", description="RLOO: leave-one-out group mean"),
            Variant(
                "reinforce_pp",
                "reinforce_pp_baseline",
                description="REINFORCE++ with baseline: group mean, whitened over the batch",
            ),
            Variant(
                "reinforce_pp_verl",
                "reinforce_pp_baseline",
                {"whiten": "tokens"},
                "REINFORCE++ with baseline as verl: whitened over tokens (needs token_counts)",
            ),
            Variant("jspo", "jspo", description="JSPO: James-Stein baseline (batch statistics)"),
            Variant(
                "jspo_plus_plus",
                "jspo_plus_plus",
                description="JSPO++: one batch-wide λ and mean, smoothed across steps",
            ),
            Variant(
                "ebpo",
                "ebpo",
                description="EBPO, paper Algorithm 1: history prior, pooled σ², raw τ², batch norm",
            ),
            Variant(
                "ebpo_batch",
                "ebpo",
                {"prior": "batch", "prior_mean_from": "group_means"},
                "EBPO as the authors' released verl code: batch prior, μ = mean of group means",
            ),
            Variant(
                "ebpo_ema",
                "ebpo",
                {"prior": "ema", "half_life": 20.0},
                "EBPO, exponentially weighted prior (half-life 20 steps)",
            ),
            Variant(
                "ebpo_within",
                "ebpo",
                {"within_variance": "within", "tau2_mode": "corrected"},
                "EBPO, within-group σ² and corrected τ² (the revision's variant)",
            ),
            Variant(
                "ebpo_cluster",
                "ebpo",
                {"per_cluster": True},
                "EBPO, one prior per cluster (topic)",
            ),
            Variant(
                "ebpo_center",
                "ebpo",
                {"normalize": "center"},
                "EBPO, advantages centred over the batch, no std division",
            ),
            Variant("ebpo_none", "ebpo", {"normalize": "none"}, "EBPO, raw advantages r − V"),
            Variant("ebpo_bb", "ebpo_bb", description="EBPO-BB: Beta-Binomial prior"),
        )
    }
)


def available_variants() -> list[str]:
    """The names of :data:`VARIANTS`, then every other registered estimator name."""
    return list(VARIANTS) + [name for name in available_estimators() if name not in VARIANTS]


def variant_spec(name: str) -> tuple[str, dict[str, Any]]:
    """``(registered estimator name, options)`` of variant ``name``.

    Raises:
        ValueError: ``name`` is neither a variant nor a registered estimator.
    """
    if isinstance(name, str) and name in VARIANTS:
        variant = VARIANTS[name]
        return variant.estimator, dict(variant.options)
    if isinstance(name, str) and name in available_estimators():
        return name, {}
    raise ValueError(f"unknown variant {name!r}; expected one of {available_variants()}")


def make_variant(name: str, **overrides: Any) -> AdvantageEstimator:
    """The estimator of variant ``name``; ``overrides`` win over the variant's options."""
    estimator, options = variant_spec(name)
    return make_estimator(estimator, **{**options, **overrides})
