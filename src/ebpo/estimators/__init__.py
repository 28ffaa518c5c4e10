"""Advantage estimators by name (see :func:`make_estimator`)."""

from ebpo.estimators.base import (
    AdvantageEstimator,
    AdvantageResult,
    Batch,
    available_estimators,
    estimator_options,
    make_estimator,
    register_estimator,
)
from ebpo.estimators.beta_binomial import EBPOBetaBinomial
from ebpo.estimators.ebpo import EBPO, Prior
from ebpo.estimators.group_relative import (
    GRPO,
    JSPO,
    RLOO,
    DrGRPO,
    JSPOPlusPlus,
    ReinforcePlusPlusBaseline,
)

__all__ = [
    "AdvantageEstimator",
    "AdvantageResult",
    "Batch",
    "DrGRPO",
    "EBPO",
    "EBPOBetaBinomial",
    "GRPO",
    "JSPO",
    "JSPOPlusPlus",
    "Prior",
    "RLOO",
    "ReinforcePlusPlusBaseline",
    "available_estimators",
    "estimator_options",
    "make_estimator",
    "register_estimator",
]
