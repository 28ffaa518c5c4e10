"""The registry of estimators by name: :func:`register_estimator` (a class decorator),
:func:`make_estimator`, :func:`available_estimators`, :func:`estimator_options`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ebpo.estimators.base import AdvantageEstimator

__all__ = ["available_estimators", "estimator_options", "make_estimator", "register_estimator"]

_REGISTRY: dict[str, type[AdvantageEstimator]] = {}


def register_estimator(name: str) -> Callable[[type[AdvantageEstimator]], type[AdvantageEstimator]]:
    """Class decorator: make an estimator available to :func:`make_estimator` under ``name``."""

    def decorate(cls: type[AdvantageEstimator]) -> type[AdvantageEstimator]:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(
                f"an estimator named {name!r} is already registered ({_REGISTRY[name].__name__})"
            )
        _REGISTRY[name] = cls
        cls.name = name
        return cls

    return decorate


def available_estimators() -> list[str]:
    """Names accepted by :func:`make_estimator`, sorted."""
    return sorted(_REGISTRY)


def estimator_options(name: str) -> dict[str, Any]:
    """The options of estimator ``name`` with their defaults."""
    return _lookup(name).option_defaults()


def make_estimator(name: str, **options: Any) -> AdvantageEstimator:
    """Build the estimator registered as ``name`` with the given options.

    Raises:
        ValueError: unknown name, unknown option, or an option with an invalid value.
    """
    cls = _lookup(name)
    allowed = estimator_options(name)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(
            f"unknown option(s) {unknown} for estimator {name!r}; expected some of {sorted(allowed)}"
        )
    return cls(**options)


def _lookup(name: str) -> type[AdvantageEstimator]:
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(f"unknown estimator {name!r}; expected one of {available_estimators()}")
    return _REGISTRY[name]
