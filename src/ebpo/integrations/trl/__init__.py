"""TRL integration: `EBPOTrainer` (a `trl.GRPOTrainer` whose advantages come from an ebpo estimator),
its `EBPOConfig`, and presets reproducing the paper's methods on TRL.

    from ebpo.integrations.trl import EBPOTrainer, make_config
    args = make_config("ebpo", output_dir="runs/ebpo", num_generations=4)
    trainer = EBPOTrainer(model=model, reward_funcs=reward_fn, args=args, train_dataset=ds,
                          processing_class=tokenizer)
    trainer.train()
    trainer.estimator.state_dict()       # the running prior (also saved with every checkpoint)

Needs the ``trl`` extra (``pip install ebpo[trl]``).
"""

from ebpo.integrations.trl.clip_cov import clip_cov_select
from ebpo.integrations.trl.config import DATA_ORDERS, EBPOConfig
from ebpo.integrations.trl.presets import PAPER_COMMON, PRESETS, available_presets, make_config
from ebpo.integrations.trl.trainer import (
    ESTIMATOR_STATE_FILE,
    METRIC_PREFIX,
    EBPOTrainer,
    zero_variance_groups,
)

__all__ = [
    "DATA_ORDERS",
    "ESTIMATOR_STATE_FILE",
    "METRIC_PREFIX",
    "PAPER_COMMON",
    "PRESETS",
    "EBPOConfig",
    "EBPOTrainer",
    "available_presets",
    "clip_cov_select",
    "make_config",
    "zero_variance_groups",
]
