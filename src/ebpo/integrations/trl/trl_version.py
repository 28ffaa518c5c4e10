"""The TRL releases :class:`~ebpo.integrations.trl.EBPOTrainer` supports, and the checks made when
it is imported: the range is :data:`ebpo.integrations.supported_versions.SUPPORTED` ``["trl"]``
(1.10.0–1.16.0; the ``trl`` extra pins the newest, the full suite runs it, ``make test-compat`` the
others). A user who keeps their own TRL (``pip install "ebpo[plot,rewards,data]"`` beside it) gets:

* inside the range, nothing;
* outside it, one warning line naming the installed release and the supported range, given by
  :func:`warn_outside_range` before anything else of TRL is imported (so that a name an older TRL
  lacks cannot end the import in a traceback first);
* one line refusing the import where a method EBPOTrainer overrides is missing from their
  ``GRPOTrainer`` (an override of a method TRL no longer calls would silently change nothing).

What differs inside the range is bridged in :mod:`ebpo.integrations.trl.trl_compat`.
"""

from __future__ import annotations

import warnings
from importlib import metadata

from ebpo.integrations.supported_versions import SUPPORTED

__all__ = ["OVERRIDDEN_METHODS", "UnsupportedTRLWarning", "check_trl", "warn_outside_range"]

_RANGE = SUPPORTED["trl"]

#: the methods of ``trl.GRPOTrainer`` that EBPOTrainer (and its checkpointing mixin) replace
OVERRIDDEN_METHODS = (
    "__init__",
    "_calculate_rewards",
    "_compute_loss",
    "_generate_and_score_completions",
    "_get_per_token_logps_and_entropies",
    "_get_train_sampler",
    "_issue_warnings_after_load",
    "_load_optimizer_and_scheduler",
    "_run_epoch",
    "_save_checkpoint",
    "log",
    "train",
)


class UnsupportedTRLWarning(UserWarning):
    """The installed ``trl`` is outside the releases ebpo supports."""


def installed_trl() -> str:
    """The installed release of ``trl``, read from its metadata (``trl`` itself is not imported)."""
    return metadata.version("trl")


def warn_outside_range(version: str) -> None:
    """Warn (:class:`UnsupportedTRLWarning`, one line) when ``version`` is outside the supported
    range; nothing inside it."""
    if _RANGE.contains(version):
        return
    # explicit place, no source line: the warning prints as one line
    warnings.warn_explicit(
        f"ebpo's EBPOTrainer supports trl {_RANGE.span()}; trl {version} is installed "
        f"(pip install 'trl=={_RANGE.newest}' for a supported one)",
        UnsupportedTRLWarning,
        filename="ebpo.integrations.trl",
        lineno=0,
        module="ebpo.integrations.trl",
    )


def check_trl(version: str, trainer_class: type) -> None:
    """Raise ImportError (one line) when ``trainer_class`` lacks a method of
    :data:`OVERRIDDEN_METHODS`, naming the trl ``version``."""
    missing = [name for name in OVERRIDDEN_METHODS if not hasattr(trainer_class, name)]
    if missing:
        raise ImportError(
            f"ebpo's EBPOTrainer cannot run on trl {version}: its GRPOTrainer has no "
            f"{', '.join(missing)} (EBPOTrainer overrides them); ebpo supports trl "
            f"{_RANGE.span()} (pip install 'trl=={_RANGE.newest}')"
        )
