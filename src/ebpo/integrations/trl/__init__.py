"""TRL integration: `EBPOTrainer` (a `trl.GRPOTrainer` whose advantages come from an ebpo estimator),
its `EBPOConfig`, and presets reproducing the paper's methods (or any estimator name
of ``ebpo.available_estimators()``) on TRL.

    from ebpo.integrations.trl import EBPOTrainer, make_config
    args = make_config("ebpo", output_dir="runs/ebpo", num_generations=4)
    trainer = EBPOTrainer(model=model, reward_funcs=reward_fn, args=args, train_dataset=ds,
                          processing_class=tokenizer)
    trainer.train()
    trainer.estimator.state_dict()       # the running prior (also saved with every checkpoint)

Needs the ``trl`` extra (``pip install ebpo[trl]``), or a TRL of the supported range beside it
(:mod:`ebpo.integrations.trl.trl_version`).
"""

# First, before any module of this package imports a name from TRL: a release outside the supported
# range is named in one warning line rather than in the traceback of a name it lacks.
from ebpo.integrations.trl.trl_version import installed_trl, warn_outside_range

warn_outside_range(installed_trl())

from ebpo.integrations.trl.aggregation import combine_rewards, zero_variance_groups  # noqa: E402
from ebpo.integrations.trl.checkpoint_files import ESTIMATOR_STATE_FILE, GENERATION_STATE_FILE  # noqa: E402
from ebpo.integrations.trl.clip_cov import clip_cov_select  # noqa: E402
from ebpo.integrations.trl.config import DATA_ORDERS, FILTER_GROUPS_METRICS, EBPOConfig, make_config  # noqa: E402
from ebpo.integrations.trl.paper_methods import (  # noqa: E402
    PAPER_COMMON,
    PAPER_METHODS,
    PRESETS,
    available_presets,
)
from ebpo.integrations.trl.reward import make_trl_reward, math_reward  # noqa: E402
from ebpo.integrations.trl.trainer import METRIC_PREFIX, EBPOTrainer, has_lone_response_baseline  # noqa: E402

__all__ = [
    "DATA_ORDERS",
    "ESTIMATOR_STATE_FILE",
    "FILTER_GROUPS_METRICS",
    "GENERATION_STATE_FILE",
    "METRIC_PREFIX",
    "PAPER_COMMON",
    "PAPER_METHODS",
    "PRESETS",
    "EBPOConfig",
    "EBPOTrainer",
    "available_presets",
    "clip_cov_select",
    "combine_rewards",
    "has_lone_response_baseline",
    "make_config",
    "make_trl_reward",
    "math_reward",
    "zero_variance_groups",
]
