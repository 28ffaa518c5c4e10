"""Advantage estimators by name (see :func:`make_estimator`)."""

from ebpo.estimators.base import (
    AdvantageEstimator,
    AdvantageResult,
    Batch,
)
from ebpo.estimators.beta_binomial import EBPOBetaBinomial
from ebpo.estimators.ebpo import EBPO, Prior
from ebpo.estimators.group_relative import GRPO, RLOO, DrGRPO, ReinforcePlusPlusBaseline
from ebpo.estimators.grpo_bn import GRPOBatchNorm
from ebpo.estimators.james_stein import JSPO, JSPOPlusPlus
from ebpo.estimators.krpo import KRPO
from ebpo.estimators.opo import OPO
from ebpo.estimators.registry import (
    available_estimators,
    estimator_options,
    make_estimator,
    register_estimator,
)
from ebpo.estimators.spo import SPO
from ebpo.estimators.variants import (
    VARIANTS,
    Variant,
    available_variants,
    make_variant,
    variant_spec,
)

__all__ = [
    "AdvantageEstimator",
    "AdvantageResult",
    "Batch",
    "DrGRPO",
    "EBPO",
    "EBPOBetaBinomial",
    "GRPO",
    "GRPOBatchNorm",
    "JSPO",
    "JSPOPlusPlus",
    "KRPO",
    "OPO",
    "Prior",
    "RLOO",
    "SPO",
    "ReinforcePlusPlusBaseline",
    "available_estimators",
    "estimator_options",
    "make_estimator",
    "register_estimator",
    "VARIANTS",
    "Variant",
    "available_variants",
    "make_variant",
    "variant_spec",
]
