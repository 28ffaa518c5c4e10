"""The TRL release :class:`~ebpo.integrations.trl.EBPOTrainer` is tested with, and the check made
when it is imported under another one: a user who keeps their own TRL (``pip install
"ebpo[plot,rewards,data]"`` beside it) gets one warning line naming both versions, and one line
refusing the import where a method EBPOTrainer overrides is missing from their ``GRPOTrainer`` (an
override of a method TRL no longer calls would silently change nothing)."""

from __future__ import annotations

import warnings

__all__ = ["OVERRIDDEN_METHODS", "TESTED_TRL", "UntestedTRLWarning", "check_trl"]

#: the release of ``trl`` that CI runs (the ``trl`` extra pins it)
TESTED_TRL = "1.16.0"

#: the methods of ``trl.GRPOTrainer`` that EBPOTrainer (and its checkpointing mixin) replace
OVERRIDDEN_METHODS = (
    "__init__",
    "_calculate_rewards",
    "_compute_loss",
    "_generate_and_score_completions",
    "_get_per_token_logps_and_entropies",
    "_load_optimizer_and_scheduler",
    "_save_checkpoint",
    "log",
    "train",
)


class UntestedTRLWarning(UserWarning):
    """The installed ``trl`` is not the release ebpo is tested with."""


def check_trl(version: str, trainer_class: type) -> None:
    """Warn (:class:`UntestedTRLWarning`, one line) when ``version`` is not :data:`TESTED_TRL`;
    raise ImportError (one line) when ``trainer_class`` lacks a method of :data:`OVERRIDDEN_METHODS`."""
    missing = [name for name in OVERRIDDEN_METHODS if not hasattr(trainer_class, name)]
    if missing:
        raise ImportError(
            f"ebpo's EBPOTrainer cannot run on trl {version}: its GRPOTrainer has no "
            f"{', '.join(missing)} (EBPOTrainer overrides them); install trl=={TESTED_TRL} "
            "(pip install 'ebpo[trl]')"
        )
    if version != TESTED_TRL:
        # explicit place, no source line: the warning prints as one line
        warnings.warn_explicit(
            f"ebpo's EBPOTrainer is tested with trl {TESTED_TRL}; trl {version} is installed "
            f"(pip install 'trl=={TESTED_TRL}' for the tested one)",
            UntestedTRLWarning,
            filename="ebpo.integrations.trl",
            lineno=0,
            module="ebpo.integrations.trl",
        )
