"""Estimator specs: how the experiments name the estimators they compare.

A spec is a variant name of :data:`ebpo.estimators.VARIANTS` or a registered estimator name
(``"ebpo_batch"``, ``"grpo"``), optionally followed by options that override the variant's:
``"<name>:option=value,..."`` (e.g. ``"ebpo:prior=ema,half_life=5"``). Option values are parsed
as int, float, ``true``/``false`` or left as strings.

The experiments ask what an estimator *is* (its traits such as ``uses_prior``, its class, its
options), never what it is called:
:func:`accepts_normalize`, :func:`reports_shrinkage`.
"""

from __future__ import annotations

from typing import Any

import torch

from ebpo.estimators import (
    JSPO,
    AdvantageEstimator,
    JSPOPlusPlus,
    available_variants,
    estimator_options,
    make_estimator,
    variant_spec,
)

__all__ = [
    "accepts_normalize",
    "build_estimator",
    "fresh_prompts",
    "parse_estimator_spec",
    "reports_shrinkage",
    "with_normalize",
]


def parse_estimator_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``"ebpo_ema"`` or ``"ebpo:prior=ema,half_life=5"`` -> ``(registry name, options)``.

    The name before ``:`` is looked up with :func:`ebpo.estimators.variant_spec`; options after it
    override the variant's. A name that is neither a variant nor a registered estimator is returned
    as it is (:func:`build_estimator` then reports it, with the names it knows).
    """
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"estimator spec must be a non-empty string, got {spec!r}")
    base, _, rest = spec.partition(":")
    if base in available_variants():
        name, options = variant_spec(base)
    else:
        name, options = base, {}
    for item in filter(None, rest.split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"estimator spec {spec!r}: expected option=value, got {item!r}")
        options[key.strip()] = _parse_value(value.strip())
    return name, options


def _parse_value(text: str) -> Any:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def build_estimator(spec: str) -> AdvantageEstimator:
    """A fresh estimator for ``spec`` (see :func:`parse_estimator_spec`); ValueError if unknown,
    or if it needs each response's token count (``opo``): a simulated answer has no length."""
    name, options = parse_estimator_spec(spec)
    estimator = make_estimator(name, **options)
    if estimator.uses_token_counts:
        raise ValueError(
            f"estimator {spec!r} needs the number of tokens of each response; the simulation's "
            "answers have no length"
        )
    return estimator


def fresh_prompts(
    estimator: AdvantageEstimator, group_ids: torch.Tensor, step: int
) -> torch.Tensor | None:
    """Prompt keys for an estimator that tracks prompts (SPO) in a study whose every step draws
    new prompts (group ``m`` of step ``t``: key ``t·M + m``): it sees each prompt once. None for
    the others."""
    if not estimator.uses_prompt_keys:
        return None
    return group_ids + step * (int(group_ids.max()) + 1)


def accepts_normalize(spec: str) -> bool:
    """Whether the estimator of ``spec`` has a ``normalize`` option (how its advantages are
    normalised over the batch); only those depend on a study's ``normalize`` setting."""
    name, _ = parse_estimator_spec(spec)
    return "normalize" in estimator_options(name)


def with_normalize(spec: str, normalize: str | None) -> str:
    """``spec`` with its ``normalize`` option set to ``normalize``, written as
    ``"<registry name>:option=value,..."``; ``spec`` unchanged when ``normalize`` is None or the
    estimator has no such option."""
    if normalize is None or not accepts_normalize(spec):
        return spec
    name, options = parse_estimator_spec(spec)
    options["normalize"] = normalize
    return name + ":" + ",".join(f"{k}={v}" for k, v in options.items())


def reports_shrinkage(spec: str) -> bool:
    """Whether the estimator's ``shrinkage`` output is a weight on something other than the group's
    own rewards: ``S`` of an estimator with a prior (``uses_prior``: EBPO, EBPO-BB) or the
    James–Stein ``λ`` of JSPO and JSPO++ (toward the other prompts' mean). The group-mean and
    leave-one-out baselines report 0."""
    estimator = build_estimator(spec)
    return estimator.uses_prior or isinstance(estimator, (JSPO, JSPOPlusPlus))
