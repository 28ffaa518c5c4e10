"""The rows of ``ebpo bench``: a :class:`Method` is an estimator name
(:func:`ebpo.estimators.available_estimators`) trained with a TRL preset and a data order, so "EBPO
with topic order" and "EBPO with per-topic priors" are rows like GRPO. :data:`METHODS` holds the
rows that need more than a name (a preset, an order, clusters); every other estimator name (a
user's own estimator included once its module is imported) is a row of its own, trained with its
own name (:func:`method`, :func:`available_methods`). :data:`DEFAULT_METHODS` is the default
matrix, and the default contrasts (:mod:`ebpo.lab.bench.contrasts`) are against
:data:`REFERENCE_METHOD`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ebpo.estimators import available_estimators, estimator_spec

__all__ = [
    "DEFAULT_METHODS",
    "METHODS",
    "REFERENCE_METHOD",
    "Method",
    "available_methods",
    "method",
]


@dataclass(frozen=True)
class Method:
    """One row of the comparison: an estimator name trained in a given setup.

    ``estimator`` names the estimator and its options (:func:`ebpo.estimators.estimator_spec`: the
    bench never spells estimator options itself). The method adds what is not a property of the
    estimator: ``preset``, the TRL preset whose trainer settings (loss, KL, clipping, ...) the
    cells use (:data:`ebpo.integrations.trl.PRESETS`; None: the estimator's own name, for the
    paper's methods), the data ``order``, the dataset column given to the estimator as its
    clusters, and a description.
    """

    name: str
    estimator: str
    preset: str | None = None
    order: str = "shuffle"
    cluster_column: str | None = None
    description: str = ""

    def __post_init__(self) -> None:
        estimator_spec(self.estimator)  # an unknown name fails here, naming the known ones
        if self.preset is None:
            object.__setattr__(self, "preset", self.estimator)

    @property
    def estimator_options(self) -> dict[str, Any]:
        """The options the estimator name fixes."""
        return estimator_spec(self.estimator)[1]

    def train_options(self) -> dict[str, Any]:
        """The :class:`ebpo.lab.train.job.TrainJobConfig` fields this method sets.

        A preset named after the estimator already trains it with its options; any other preset
        gets the estimator's options as ``estimator_options``, which ``make_config`` merges into the
        preset's.
        """
        options = {} if self.preset == self.estimator else self.estimator_options
        return {
            "estimator": self.preset,
            "order": self.order,
            "estimator_options": options or None,
            "cluster_column": self.cluster_column,
        }


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("grpo", "grpo", description="GRPO: group mean, ÷ group std"),
        Method(
            "ebpo",
            "ebpo",
            description="EBPO, paper defaults (history prior, pooled σ², raw τ²), shuffled stream",
        ),
        Method(
            "ebpo_within",
            "ebpo_within",
            preset="ebpo",
            description="EBPO, within-group σ² and corrected τ² (the revision's variant)",
        ),
        Method("ebpo_topic", "ebpo", order="topic", description="EBPO, stream sorted by topic"),
        Method(
            "ebpo_difficulty",
            "ebpo",
            order="difficulty",
            description="EBPO, stream easy → hard (digits)",
        ),
        Method(
            "ebpo_cluster",
            "ebpo_cluster",
            preset="ebpo",
            cluster_column="topic",
            description="EBPO, one prior per topic, shuffled stream",
        ),
        Method("rloo", "rloo", description="RLOO: leave-one-out baseline"),
        Method("jspo", "jspo", description="JSPO: James-Stein baseline (batch statistics)"),
        # Not in the default matrix; selectable with --estimators.
        Method("dr_grpo", "dr_grpo", description="Dr. GRPO: group mean, no std, token-sum loss"),
        Method(
            "dapo",
            "grpo",
            preset="dapo",
            description="DAPO: clip-higher, zero-variance group filtering, overlong shaping, no KL",
        ),
        Method(
            "entropy_mech",
            "grpo",
            preset="entropy_mech",
            description="EntropyMech: GRPO + Clip-Cov, no KL",
        ),
        Method(
            "ebpo_ema",
            "ebpo_ema",
            preset="ebpo",
            description="EBPO, EMA prior (half-life 20 steps)",
        ),
        Method(
            "ebpo_batch",
            "ebpo_batch",
            description="EBPO, batch prior with μ = mean of group means (authors' verl code)",
        ),
        Method("ebpo_bb", "ebpo_bb", description="EBPO-BB: Beta-Binomial prior"),
    )
}
DEFAULT_METHODS = (
    "grpo",
    "ebpo",
    "ebpo_within",
    "ebpo_topic",
    "ebpo_difficulty",
    "ebpo_cluster",
    "rloo",
    "jspo",
)
#: the default contrasts pair every other method with this one (at the same G and seed)
REFERENCE_METHOD = "grpo"


def available_methods() -> list[str]:
    """Every name :func:`method` accepts: the rows of :data:`METHODS`, then every other estimator
    name, read from the registry when called."""
    return list(METHODS) + [name for name in available_estimators() if name not in METHODS]


def method(name: str) -> Method:
    """The row called ``name``: :data:`METHODS`' own, else the estimator of that name (a user's own
    included) trained with its own preset on the shuffled stream.

    Raises:
        ValueError: ``name`` is neither, naming the known methods.
    """
    if isinstance(name, str) and name in METHODS:
        return METHODS[name]
    if isinstance(name, str) and name in available_estimators():
        estimator, options = estimator_spec(name)
        described = f"estimator {estimator!r}" + (f" with {options}" if options else "")
        return Method(name, name, description=f"{described}, shuffled stream")
    raise ValueError(f"unknown method {name!r}; expected one of {available_methods()}")
