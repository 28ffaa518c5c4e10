"""The estimators by name, one namespace for every trainer: :func:`register_estimator`,
:func:`make_estimator`, :func:`available_estimators`, :func:`estimator_options`,
:func:`estimator_spec`.

A name is a class (``@register_estimator("ebpo")``), a named method of a class (its options,
registered next to the class: ``register_estimator("ebpo_batch", {"prior": "batch", ...})(EBPO)``)
or a user's plain function ``f(rewards, groups) -> advantages`` (a stateless estimator)::

    est = ebpo.make_estimator("ebpo_batch")                  # EBPO(prior="batch", ...)
    est = ebpo.make_estimator("ebpo_ema", half_life=5)       # options win over the name's

The TRL config (``advantage_estimator``), the verl plug-in (``algorithm.adv_estimator``), the
simulation, the bench and replay read this registry, so a name means the same estimator
everywhere; a user's module that registers a name is imported with :func:`import_estimator_module`.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypeVar

import torch

from ebpo.estimators.base import AdvantageEstimator, Batch

__all__ = [
    "FunctionEstimator",
    "available_estimators",
    "estimator_options",
    "estimator_spec",
    "import_estimator_module",
    "import_estimator_modules",
    "make_estimator",
    "on_register",
    "register_estimator",
]

Target = TypeVar("Target")


@dataclass(frozen=True)
class _Entry:
    cls: type[AdvantageEstimator]
    options: Mapping[str, Any]


_REGISTRY: dict[str, _Entry] = {}
_LISTENERS: list[Callable[[str], None]] = []


class FunctionEstimator(AdvantageEstimator):
    """A stateless estimator from a plain function ``function(rewards, groups) -> advantages``:
    ``rewards`` the ``[n]`` float64 rewards of the valid rows, ``groups`` their ``[n]`` int64 group
    index (0 … K−1), the result ``n`` advantages. Masked rows get 0; the baseline reported is the
    implied ``r − A``. :func:`register_estimator` builds one subclass per function."""

    function: Callable[[torch.Tensor, torch.Tensor], Any]

    def __reduce__(self) -> tuple[Any, ...]:
        # The class is made at registration, not importable by name: a copy is rebuilt by name
        # (the user's module imported there too) and given this one's attributes.
        return (make_estimator, (self.name,), self.__getstate__())

    def _compute(self, batch: Batch, *, update: bool):
        rows = batch.valid
        if not rows.any():  # nothing to score: the function never sees an empty batch
            zeros = torch.zeros_like(batch.rewards)
            return batch.rewards, zeros, zeros, {}
        values = type(self).function(batch.rewards[rows], batch.group_index[rows])
        given = torch.as_tensor(values, dtype=torch.float64).flatten()
        if given.numel() != int(rows.sum()):
            raise ValueError(
                f"estimator {self.name!r} returned {given.numel()} advantages for "
                f"{int(rows.sum())} rewards; expected one per reward"
            )
        advantage = torch.zeros_like(batch.rewards).masked_scatter(rows, given)
        return batch.rewards - advantage, advantage, torch.zeros_like(advantage), {}


def _as_estimator_class(name: str, target: Any) -> type[AdvantageEstimator]:
    if inspect.isclass(target) and issubclass(target, AdvantageEstimator):
        return target
    if inspect.isfunction(target) or inspect.isbuiltin(target):
        return type(
            target.__name__,
            (FunctionEstimator,),
            {
                "function": staticmethod(target),
                "__doc__": target.__doc__,
                "__module__": target.__module__,
                "__qualname__": target.__qualname__,
            },
        )
    raise ValueError(
        f"register_estimator({name!r}) takes a subclass of ebpo.AdvantageEstimator or a function "
        f"f(rewards, groups) -> advantages, got {target!r}"
    )


def _same_definition(a: type, b: type) -> bool:
    # A module executed twice (a reload, a file imported by path and by name) defines equal classes.
    return a is b or (a.__qualname__ == b.__qualname__ and _source(a) == _source(b))


def _source(cls: type) -> str:
    file = getattr(sys.modules.get(cls.__module__), "__file__", None)
    return os.path.realpath(file) if file else cls.__module__


def register_estimator(
    name: str, options: Mapping[str, Any] | None = None
) -> Callable[[Target], Target]:
    """Decorator: make a class or a plain function available to :func:`make_estimator` (and to
    every trainer) as ``name``; returns what it decorates unchanged.

    * a subclass of :class:`AdvantageEstimator`: the first name it gets is its own (``cls.name``,
      the ``"estimator"`` of its ``state_dict()``);
    * a function ``f(rewards, groups) -> advantages``: a stateless estimator
      (:class:`FunctionEstimator`);
    * with ``options``, a named method of an already registered class: ``ebpo_batch`` is
      ``ebpo`` with ``{"prior": "batch", "prior_mean_from": "group_means"}``.

    Raises:
        ValueError: the name is taken by another definition, an option the class does not take,
            or ``options`` on a class that has no name of its own yet.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"an estimator name must be an identifier string, got {name!r}")
    fixed = dict(options or {})

    def decorate(target: Target) -> Target:
        cls = _as_estimator_class(name, target)
        unknown = sorted(set(fixed) - set(cls.option_defaults()))
        if unknown:
            raise ValueError(
                f"register_estimator({name!r}): {cls.__name__} has no option(s) {unknown}"
            )
        if fixed and not cls.__dict__.get("name"):
            raise ValueError(
                f"register_estimator({name!r}, options): register {cls.__name__} under a name of "
                "its own first"
            )
        current = _REGISTRY.get(name)
        if current is not None and not (
            _same_definition(current.cls, cls) and dict(current.options) == fixed
        ):
            raise ValueError(
                f"an estimator named {name!r} is already registered ({current.cls.__name__})"
            )
        if not cls.__dict__.get("name"):
            cls.name = name
        _REGISTRY[name] = _Entry(cls, MappingProxyType(fixed))
        if current is None:
            for listener in list(_LISTENERS):
                listener(name)
        return target

    return decorate


def on_register(listener: Callable[[str], None]) -> None:
    """Call ``listener(name)`` for every name registered from now on (the verl plug-in adds the
    names a user's module registers after it to verl's registry)."""
    _LISTENERS.append(listener)


def available_estimators() -> list[str]:
    """Names accepted by :func:`make_estimator`, sorted."""
    return sorted(_REGISTRY)


def estimator_spec(name: str) -> tuple[str, dict[str, Any]]:
    """``(the class's own name, the options name fixes)``: ``("ebpo", {"prior": "batch", ...})``
    for ``ebpo_batch``, ``("ebpo", {})`` for ``ebpo``."""
    entry = _lookup(name)
    return entry.cls.name, dict(entry.options)


def estimator_options(name: str) -> dict[str, Any]:
    """The options of estimator ``name`` with their values when none is given: the constructor's
    defaults, with the options the name fixes."""
    entry = _lookup(name)
    return {**entry.cls.option_defaults(), **entry.options}


def make_estimator(name: str, **options: Any) -> AdvantageEstimator:
    """Build the estimator registered as ``name``; ``options`` win over those the name fixes.

    Raises:
        ValueError: unknown name, unknown option, or an option with an invalid value.
    """
    entry = _lookup(name)
    allowed = entry.cls.option_defaults()
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(
            f"unknown option(s) {unknown} for estimator {name!r}"
            f"{_unknown_hint(unknown, allowed, entry.cls.renamed_options, options)}; expected some of "
            f"{sorted(allowed)}"
        )
    return entry.cls(**{**entry.options, **options})


def import_estimator_module(spec: str) -> None:
    """Import a user's module that registers estimators: a dotted module name (``my_pkg.my_est``)
    or a path to a ``.py`` file. Importing one twice runs it once.

    Raises:
        ValueError: the module cannot be found or its import fails (one line: the cause).
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"estimator_module must be a module name or a .py file, got {spec!r}")
    if spec.endswith(".py") and not os.path.isfile(spec):
        raise ValueError(f"estimator_module {spec!r}: no such file")
    try:
        if spec.endswith(".py"):
            _import_file(spec)
        else:
            importlib.import_module(spec)
    except Exception as error:  # a user's module may raise anything: one line naming it
        raise ValueError(
            f"estimator_module {spec!r} could not be imported: {type(error).__name__}: {error}"
        ) from error


def import_estimator_modules(specs: str | None) -> None:
    """:func:`import_estimator_module` for each of the comma-separated ``specs`` (None: none)."""
    if specs is None:
        return
    if not isinstance(specs, str):
        raise ValueError(f"estimator_module must be a string or None, got {specs!r}")
    for spec in specs.split(","):
        import_estimator_module(spec.strip())


def _import_file(path: str) -> None:
    module_name = "ebpo_user_estimator_" + os.path.splitext(os.path.basename(path))[0]
    loaded = sys.modules.get(module_name)
    if loaded is not None and os.path.realpath(getattr(loaded, "__file__", "")) == os.path.realpath(
        path
    ):
        return
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError("not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise


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


def _lookup(name: str) -> _Entry:
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(f"unknown estimator {name!r}; expected one of {available_estimators()}")
    return _REGISTRY[name]
