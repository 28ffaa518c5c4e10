"""ebpo: Empirical Bayes Policy Optimization and its peers as group-relative advantage estimators.

    import ebpo
    est = ebpo.make_estimator("ebpo")            # or "ebpo_batch", ...: ebpo.available_estimators()
    res = est(rewards, group_ids)                # res.advantages, res.baselines, res.shrinkage, res.metrics

    @ebpo.register_estimator("mine")             # your own: a class or f(rewards, groups) -> advantages

The core imports only torch and numpy; trainer integrations live in ``ebpo.integrations``.
"""

from ebpo.estimators import (
    EBPO,
    GRPO,
    JSPO,
    RLOO,
    AdvantageEstimator,
    AdvantageResult,
    DrGRPO,
    EBPOBetaBinomial,
    JSPOPlusPlus,
    ReinforcePlusPlusBaseline,
    available_estimators,
    estimator_options,
    estimator_spec,
    import_estimator_module,
    make_estimator,
    register_estimator,
)
from ebpo.estimators.ebpo import RunningMoments

__version__ = "0.1.0"

__all__ = [
    "EBPO",
    "GRPO",
    "JSPO",
    "JSPOPlusPlus",
    "RLOO",
    "AdvantageEstimator",
    "AdvantageResult",
    "DrGRPO",
    "EBPOBetaBinomial",
    "ReinforcePlusPlusBaseline",
    "RunningMoments",
    "available_estimators",
    "estimator_options",
    "estimator_spec",
    "import_estimator_module",
    "make_estimator",
    "register_estimator",
    "__version__",
]
