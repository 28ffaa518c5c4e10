"""Advantage estimators by name (see :func:`make_estimator`)."""

from ebpo.estimators.base import (
    AdvantageEstimator,
    AdvantageResult,
    Batch,
)
from ebpo.estimators.beta_binomial import EBPOBetaBinomial
from ebpo.estimators.ebpo import EBPO, Prior
from ebpo.estimators.group_relative import GRPO, RLOO, DrGRPO, ReinforcePlusPlusBaseline
from ebpo.estimators.james_stein import JSPO, JSPOPlusPlus
from ebpo.estimators.registry import (
    FunctionEstimator,
    available_estimators,
    estimator_options,
    estimator_spec,
    import_estimator_module,
    import_estimator_modules,
    make_estimator,
    register_estimator,
)

__all__ = [
    "AdvantageEstimator",
    "AdvantageResult",
    "Batch",
    "DrGRPO",
    "EBPO",
    "EBPOBetaBinomial",
    "FunctionEstimator",
    "GRPO",
    "JSPO",
    "JSPOPlusPlus",
    "Prior",
    "RLOO",
    "ReinforcePlusPlusBaseline",
    "available_estimators",
    "estimator_options",
    "estimator_spec",
    "import_estimator_module",
    "import_estimator_modules",
    "make_estimator",
    "register_estimator",
]
