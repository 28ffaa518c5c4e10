"""The TRL releases :class:`~ebpo.integrations.trl.EBPOTrainer` is tested with, and the check made
when it is imported under another one (1.16.0, which the ``trl`` extra pins, and 1.15.0, the newest
that Unsloth 2026.10.9 accepts, which ``make test-unsloth`` runs): a user who keeps their own TRL (``pip install
"ebpo[plot,rewards,data]"`` beside it) gets one warning line naming both versions, and one line
refusing the import where a method EBPOTrainer overrides is missing from their ``GRPOTrainer`` (an
override of a method TRL no longer calls would silently change nothing)."""

from __future__ import annotations

import warnings

__all__ = ["OVERRIDDEN_METHODS", "TESTED_TRL", "UntestedTRLWarning", "check_trl"]

#: the releases of ``trl`` that CI runs, oldest first: the last one is what the ``trl`` extra pins;
#: 1.15.0 runs in the Unsloth environment (``make test-unsloth``)
TESTED_TRL = ("1.15.0", "1.16.0")
_PINNED = TESTED_TRL[-1]

#: the methods of ``trl.GRPOTrainer`` that EBPOTrainer (and its checkpointing mixin) replace
OVERRIDDEN_METHODS = (
    "__init__",
    "_calculate_rewards",
    "_compute_loss",
    "_generate_and_score_completions",
    "_get_per_token_logps_and_entropies",
    "_issue_warnings_after_load",
    "_load_optimizer_and_scheduler",
    "_save_checkpoint",
    "log",
    "train",
)


class UntestedTRLWarning(UserWarning):
    """The installed ``trl`` is not the release ebpo is tested with."""


def check_trl(version: str, trainer_class: type) -> None:
    """Warn (:class:`UntestedTRLWarning`, one line) when ``version`` is none of :data:`TESTED_TRL`;
    raise ImportError (one line) when ``trainer_class`` lacks a method of :data:`OVERRIDDEN_METHODS`."""
    missing = [name for name in OVERRIDDEN_METHODS if not hasattr(trainer_class, name)]
    if missing:
        raise ImportError(
            f"ebpo's EBPOTrainer cannot run on trl {version}: its GRPOTrainer has no "
            f"{', '.join(missing)} (EBPOTrainer overrides them); install trl=={_PINNED} "
            "(pip install 'ebpo[trl]')"
        )
    if version not in TESTED_TRL:
        # explicit place, no source line: the warning prints as one line
        warnings.warn_explicit(
            f"ebpo's EBPOTrainer is tested with trl {' and '.join(TESTED_TRL)}; trl {version} is "
            f"installed (pip install 'trl=={_PINNED}' for a tested one)",
            UntestedTRLWarning,
            filename="ebpo.integrations.trl",
            lineno=0,
            module="ebpo.integrations.trl",
        )
