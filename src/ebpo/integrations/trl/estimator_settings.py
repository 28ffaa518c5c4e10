"""From TRL's settings to the estimator's options: what ``advantage_estimator``, ``scale_rewards`` and
``multi_objective_aggregation`` mean for the estimator :class:`EBPOTrainer` builds.

Three rules, so that a TRL user's own GRPO configuration keeps its meaning:

1. **A name is an estimator name** (:func:`ebpo.estimators.available_estimators`: ``ebpo_batch``
   is ``ebpo`` with ``prior="batch", prior_mean_from="group_means"``; ``estimator_options`` given too win
   key by key, as in :func:`ebpo.estimators.make_estimator`). A paper preset that also sets the
   trainer (``dapo``, ``entropy_mech``: :data:`.paper_methods.PAPER_METHODS`) is not an estimator:
   it is refused with the lines that write it out.
2. **TRL's GRPO is TRL's to the last digit.** An estimator with TRL's ``scale`` option (``grpo``,
   ``dr_grpo``) divides by ``std + 1e-4`` as ``GRPOTrainer`` does (:data:`TRL_GRPO_EPS`; the core
   and the verl plug-in keep verl's 1e-6), ``scale_rewards`` becomes its ``scale``, and with
   ``multi_objective_aggregation="normalize_then_sum"`` ``grpo`` scales over the batch, as TRL does
   after summing the per-function normalised rewards.
3. **A ``scale_rewards`` the estimator cannot honour is refused**, naming both settings; one it can
   is mapped to the option that means the same (:func:`scale_options`): ``"none"`` (unscaled
   advantages) is ``normalize="center"`` for ``ebpo`` / ``ebpo_bb`` (the authors' code with
   ``norm_adv_by_std_in_grpo=False``), ``"batch"`` their default batch normalisation. Never a
   warning followed by another algorithm.
"""

from __future__ import annotations

import shlex
from typing import Any

import ebpo
from ebpo.estimators import AdvantageEstimator, available_estimators
from ebpo.integrations.trl.batch_advantages import LoneRowPolicy
from ebpo.integrations.trl.paper_methods import PAPER_METHODS, preset_arguments, preset_fields

__all__ = [
    "SCALE_REWARDS",
    "TRAINER_PRESETS",
    "TRL_GRPO_EPS",
    "follows_trl_grpo",
    "lone_row_policy",
    "resolve_estimator",
    "scale_options",
    "scale_rewards_name",
    "trl_estimator_kwargs",
    "uses_trls_own_advantages",
]

#: TRL's values of ``scale_rewards`` (True / False are TRL's aliases of "group" / "none")
SCALE_REWARDS = ("group", "batch", "none")
#: the ``1e-4`` of TRL's ``GRPOTrainer``: ``(r - mean) / (std + 1e-4)`` (verl's GRPO: 1e-6)
TRL_GRPO_EPS = 1e-4
#: paper presets that are more than an estimator: they also set the trainer
TRAINER_PRESETS: tuple[str, ...] = tuple(
    n for n in PAPER_METHODS if n not in available_estimators()
)

#: what the TRL user asked for, in words, for error messages
_MEANING = {
    "group": "each group divided by its own std, TRL's default",
    "batch": "advantages divided by the std of the whole batch",
    "none": "unscaled advantages",
}


def follows_trl_grpo(estimator: str) -> bool:
    """Whether ``estimator`` is TRL's GRPO family (it has TRL's ``scale`` option: ``grpo``,
    ``dr_grpo``): TRL's eps, and a completion that is the only scored one of its group counts in
    the batch's std and gets advantage 0, as in ``GRPOTrainer``."""
    return "scale" in ebpo.estimator_options(estimator)


def uses_trls_own_advantages(estimator: Any, aggregation: str) -> bool:
    """Whether the advantages ``GRPOTrainer`` computes itself are exactly those of ``estimator``
    (built with :func:`trl_estimator_kwargs`), so that :class:`EBPOTrainer` keeps TRL's float32
    numbers to the last bit: TRL's GRPO family with TRL's eps, scaled as TRL scales
    (``normalize_then_sum``: TRL always divides by the batch std). The estimator computes in float64
    and rounds, so its own advantages differ from TRL's in the last float32 bit for rewards whose
    group means are not exact in float32 (``len / 6``, weighted sums)."""
    return (
        follows_trl_grpo(estimator.name)
        and estimator.eps == TRL_GRPO_EPS
        and (aggregation != "normalize_then_sum" or estimator.scale == "batch")
    )


def lone_row_policy(estimator: AdvantageEstimator, aggregation: str) -> LoneRowPolicy:
    """The :class:`.batch_advantages.LoneRowPolicy` of ``estimator`` (built with
    :func:`trl_estimator_kwargs`) under TRL's ``multi_objective_aggregation``: TRL's GRPO family
    follows ``GRPOTrainer`` (keeping TRL's own numbers when :func:`uses_trls_own_advantages`), an
    estimator with a prior scores a lone completion against it, any other leaves it out."""
    if follows_trl_grpo(estimator.name):
        if uses_trls_own_advantages(estimator, aggregation):
            return LoneRowPolicy.TRL_GRPO_OWN
        return LoneRowPolicy.TRL_GRPO
    return LoneRowPolicy.PRIOR if estimator.uses_prior else LoneRowPolicy.LEAVE_OUT


def resolve_estimator(name: Any, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(registered estimator, options)`` for ``advantage_estimator=name`` with ``estimator_options=
    options``: the options the name fixes first, then ``options`` (they win key by key).

    Raises:
        ValueError: ``name`` is a trainer preset (the message writes it out as flags) or unknown
            (the message lists estimators and presets).
    """
    if isinstance(name, str) and name in available_estimators():
        fields = preset_fields(name)  # the one reading of a user's word: .paper_methods
        return fields["advantage_estimator"], {**fields.get("estimator_options", {}), **options}
    if isinstance(name, str) and name in TRAINER_PRESETS:
        flags = shlex.join(preset_arguments(name))
        raise ValueError(
            f"advantage_estimator {name!r} is a paper preset that also sets the trainer, not an "
            f"estimator: write it out as {flags} (the same keys in a YAML file; from Python: "
            f"make_config({name!r}))"
        )
    raise ValueError(
        f"unknown advantage_estimator {name!r}; expected an estimator {available_estimators()} "
        "(your own: import its module with estimator_module); the presets "
        f"{list(TRAINER_PRESETS)} also set the trainer (`ebpo docs trl`)"
    )


def scale_rewards_name(value: Any) -> str | None:
    """``scale_rewards`` as one of :data:`SCALE_REWARDS` (True / False → "group" / "none"), or None."""
    if isinstance(value, bool):
        return "group" if value else "none"
    if value is None or value in SCALE_REWARDS:
        return value
    raise ValueError(
        f"scale_rewards must be one of {list(SCALE_REWARDS)} (or true / false), got {value!r}"
    )


def scale_options(estimator: str, options: dict[str, Any], scale: str) -> dict[str, Any]:
    """The estimator options that give TRL's ``scale_rewards=scale`` with ``estimator``, given the
    options already chosen (``options``: the name's and the user's).

    ``scale`` option (``grpo``, ``dr_grpo``): TRL's three modes, as they are. ``normalize``
    (``ebpo``, ``ebpo_bb``): ``"batch"`` is their batch normalisation, ``"none"`` their centred
    advantages without the std division (``normalize="center"``; ``"none"`` = raw r − V is
    unscaled too and is kept when asked for); ``"group"`` has no counterpart. ``whiten``
    (``reinforce_pp_baseline``): always over the batch. Any other estimator never scales.

    Raises:
        ValueError: the estimator cannot honour ``scale``, or an option already chosen disagrees;
            the message names both settings and what to type.
    """
    defaults = ebpo.estimator_options(estimator)
    asked = f"scale_rewards={scale!r} ({_MEANING[scale]})"
    if "scale" in defaults:
        if "scale" in options and options["scale"] != scale:
            raise ValueError(
                f"{asked} and estimator_options {{'scale': {options['scale']!r}}} disagree "
                f"(advantage_estimator={estimator!r}): set one of --scale_rewards / --estimator_options"
            )
        return {"scale": scale}
    if "normalize" in defaults:
        wanted = {"batch": ("batch",), "none": ("center", "none")}.get(scale)
        if wanted is None:
            raise ValueError(
                f"{asked} has no counterpart in advantage_estimator={estimator!r}, which normalises "
                "over the batch: leave --scale_rewards unset or set it to batch (its default) or "
                "none (centred, no std division); for TRL's own GRPO use --advantage_estimator grpo"
            )
        given = options.get("normalize")
        if given is not None and given not in wanted:
            raise ValueError(
                f"{asked} and estimator_options {{'normalize': {given!r}}} disagree "
                f"(advantage_estimator={estimator!r}): drop one of them, or use normalize "
                f"{' / '.join(map(repr, wanted))}"
            )
        return {"normalize": given or wanted[0]}
    own = "batch" if "whiten" in defaults else "none"
    if scale != own:
        does = "always whitens over the batch" if own == "batch" else "never scales its advantages"
        raise ValueError(
            f"{asked}: advantage_estimator={estimator!r} {does}; leave --scale_rewards unset or set "
            f"it to {own}; for TRL's own GRPO use --advantage_estimator grpo"
        )
    return {}


def trl_estimator_kwargs(
    estimator: str,
    options: dict[str, Any],
    scale_rewards: str | None,
    aggregation: str = "sum_then_normalize",
) -> dict[str, Any]:
    """What :class:`EBPOTrainer` passes to ``ebpo.make_estimator(estimator, ...)``: ``nan_policy=
    "mask"`` (TRL marks unscored completions NaN), TRL's eps for its GRPO, the options that
    ``scale_rewards`` maps to (:func:`scale_options`), then ``options`` (the user's and the
    name's). Raises ValueError as :func:`scale_options`."""
    kwargs: dict[str, Any] = {"nan_policy": "mask"}
    if follows_trl_grpo(estimator):
        kwargs["eps"] = TRL_GRPO_EPS
    if estimator == "grpo" and aggregation == "normalize_then_sum":
        # TRL ignores scale_rewards there and divides the summed rewards by the batch std
        if scale_rewards not in (None, "batch"):
            raise ValueError(
                f"scale_rewards={scale_rewards!r} with multi_objective_aggregation="
                "'normalize_then_sum': TRL ignores scale_rewards there and divides the summed "
                "rewards by the batch std, which is what advantage_estimator='grpo' does then: "
                "drop --scale_rewards (or set it to batch)"
            )
        scale_rewards = "batch"
    if scale_rewards is not None:
        kwargs.update(scale_options(estimator, options, scale_rewards))
    return {**kwargs, **options}
