"""The values of a GRPOConfig that TRL accepts when it builds a trainer and then refuses, or
trains wrongly with, only later: checked in :class:`~ebpo.integrations.trl.EBPOConfig`'s
construction, so that ``ebpo grpo --dry-run`` (which builds the trainer and stops) refuses what
the real run would, and the real run refuses it before the model loads.

TRL 1.16 (``trl/trainer/grpo_trainer.py``, transformers 5.10):

* ``loss_type`` outside :data:`LOSS_TYPES`: ``ValueError("Unknown loss type")`` in the first
  ``compute_loss``, after the first generation;
* ``temperature`` 0 or below: a ``ValueError`` from ``generate`` (and the log-probabilities are
  divided by it); not finite: NaN probabilities;
* ``max_steps`` that is not an integer (a YAML ``2.7``): ``TypeError`` in the training loop;
* ``learning_rate`` not finite: the first update makes every weight NaN; negative: ascent;
* ``beta`` below 0 or not finite: trains to the end, rewarding divergence from the reference
  (``ebpo train`` refuses it);
* ``ddp_timeout`` beyond what a ``timedelta`` holds: ``OverflowError`` when the process group
  starts.

And the options of ``extra`` in ``ebpo train`` (:func:`check_extra`): EBPOConfig field names,
values of the field's type.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import typing
from collections.abc import Mapping
from typing import Any

from ebpo.utils.checks import is_integer, is_real
from ebpo.utils.field_values import check_field_value

__all__ = ["LOSS_TYPES", "MAX_DDP_TIMEOUT", "check_extra", "check_trl_values"]

#: the losses ``GRPOTrainer._compute_loss`` computes (TRL 1.16)
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo", "cispo", "sapo", "vespo")
#: the longest wait of a collective, in seconds (68 years; beyond a few hundred thousand
#: years ``timedelta`` and torch's millisecond counter overflow)
MAX_DDP_TIMEOUT = 2**31 - 1


def check_trl_values(config: Any) -> None:
    """Raise ValueError naming the first field of ``config`` (a GRPOConfig) that TRL would refuse
    or misuse only once training has started (see the module)."""
    if config.loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {list(LOSS_TYPES)}, got {config.loss_type!r}")
    _finite("temperature", config.temperature, low=0.0, low_open=True)
    _finite("learning_rate", config.learning_rate, low=0.0)
    _finite("beta", config.beta, low=0.0)
    if not is_integer(config.max_steps):
        raise ValueError(f"max_steps must be an integer, got {config.max_steps!r}")
    timeout = config.ddp_timeout
    if not (is_real(timeout) and math.isfinite(timeout) and 0 < timeout <= MAX_DDP_TIMEOUT):
        raise ValueError(
            f"ddp_timeout must be a positive number of seconds up to {MAX_DDP_TIMEOUT}, got {timeout!r}"
        )


def check_extra(extra: Mapping[str, Any], config_class: type) -> None:
    """Raise ValueError naming the key when ``extra`` (``ebpo train``'s EBPOConfig options) holds
    a name that is not a field of ``config_class`` or a value that is not of the field's type."""
    hints = typing.get_type_hints(config_class)
    names = [f.name for f in dataclasses.fields(config_class) if f.init]
    for key, value in extra.items():
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"extra: unknown key {key!r}; expected a field of {config_class.__name__}{hint}"
            )
        check_field_value(f"extra[{key!r}]", value, hints[key])


def _finite(name: str, value: Any, *, low: float, low_open: bool = False) -> None:
    if not (
        is_real(value) and math.isfinite(value) and (value > low if low_open else value >= low)
    ):
        bound = f"> {low:g}" if low_open else f">= {low:g}"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")
