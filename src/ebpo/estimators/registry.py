"""The registry of estimators by name: :func:`register_estimator` (a class decorator),
:func:`make_estimator`, :func:`available_estimators`, :func:`estimator_options`."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
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
            f"unknown option(s) {unknown} for estimator {name!r}"
            f"{_unknown_hint(unknown, allowed, cls.renamed_options, options)}; expected some of "
            f"{sorted(allowed)}"
        )
    return cls(**options)


def _unknown_hint(
    unknown: list[str], allowed: Iterable[str], renamed: Mapping[str, str], given: Iterable[str]
) -> str:
    """What the first unknown option may be: an old name (renamed, the new one given too or not),
    or a near spelling of an option."""
    first, allowed = unknown[0], list(allowed)
    new = renamed.get(first)
    if new is not None and new in allowed:
        if new in given:
            return f" ({first!r} is the old name of {new!r}, which is given too: drop {first!r})"
        return f" ({first!r} was renamed {new!r}: write {new}=...)"
    if new is not None:  # renamed, but not an option of this estimator under either name
        return ""
    close = difflib.get_close_matches(str(first), allowed, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _lookup(name: str) -> type[AdvantageEstimator]:
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(f"unknown estimator {name!r}; expected one of {available_estimators()}")
    return _REGISTRY[name]
