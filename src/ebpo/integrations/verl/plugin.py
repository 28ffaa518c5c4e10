"""verl plug-in: importing this module registers every name of ebpo's registry in verl's
``ADV_ESTIMATOR_REGISTRY`` (``ebpo``, ``ebpo_batch``, ``jspo``, ...: but the names verl computes
itself, :func:`ebpo.integrations.verl.advantage.plugin_names`), and every name registered later (a
user's ``@ebpo.register_estimator("mine")``, imported after us), so that
``algorithm.adv_estimator=NAME`` works for each.

How it gets imported in every process, including the Ray actor that computes advantages:

* verl ≥ 0.9: ``import verl`` loads every entry point of the ``verl.plugins`` group; installing
  ``ebpo[verl]`` declares ``ebpo = "ebpo.integrations.verl.plugin"`` there. verl swallows load
  errors (logged at DEBUG), so run ``ebpo verl doctor`` to see them.
* verl 0.6–0.8: set ``VERL_USE_EXTERNAL_MODULES=ebpo.integrations.verl.plugin`` in the
  environment of the driver AND of the Ray workers, e.g.
  ``+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES=ebpo.integrations.verl.plugin``
  (``ebpo verl`` adds that override for you).
* a user's own estimator: its module goes into the same variable, after ours
  (``VERL_USE_EXTERNAL_MODULES=ebpo.integrations.verl.plugin,my_pkg.my_est``), so that every
  process that imports verl imports it, in either order.

Registration is idempotent: verl's ``register_adv_est`` raises ValueError when a *different*
function object is registered under an existing name, which happens if this module is executed
twice (``importlib.reload``, or imported once by the entry point and once under another path).
We therefore replace our own earlier registrations directly and refuse to shadow a function that
is not ours (but for verl's own names, which we leave to verl). Only verl's ``core_algos`` is
imported (no Ray actors, no models).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ebpo.estimators.registry import on_register
from ebpo.integrations.verl.advantage import VERL_OWN_NAMES, function_for, plugin_names

__all__ = ["PLUGIN_MARKER", "register", "registered_functions"]

#: attribute set on every function we register, so a re-import recognises its own entries
PLUGIN_MARKER = "__ebpo_verl_plugin__"


def _is_ours(fn: Any) -> bool:
    return bool(getattr(fn, PLUGIN_MARKER, False))


def register() -> dict[str, Callable[..., Any]]:
    """Register the plug-in's estimators in verl; returns ``{name: function}`` as registered.

    Raises:
        ValueError: a name is already taken by a function that does not come from ebpo.
    """
    for name in plugin_names():
        _register_one(name)
    return registered_functions()


def _register_one(name: str) -> None:
    from verl.trainer.ppo import core_algos  # optional heavy dependency (verl extra)

    if name in VERL_OWN_NAMES:
        return
    registry = core_algos.ADV_ESTIMATOR_REGISTRY
    fn = function_for(name)
    setattr(fn, PLUGIN_MARKER, True)
    current = registry.get(name)
    if current is fn:
        return
    if current is not None and not _is_ours(current):
        raise ValueError(
            f"verl already has an advantage estimator named {name!r} ({current!r}) that is not "
            "ebpo's; refusing to replace it"
        )
    if current is not None:  # our own function from an earlier execution of this module
        registry[name] = fn
    else:
        core_algos.register_adv_est(name)(fn)


def registered_functions() -> dict[str, Callable[..., Any]]:
    """The ebpo functions currently in verl's registry, by name."""
    from verl.trainer.ppo import core_algos  # optional heavy dependency (verl extra)

    return {
        name: core_algos.ADV_ESTIMATOR_REGISTRY[name]
        for name in plugin_names()
        if name in core_algos.ADV_ESTIMATOR_REGISTRY
    }


register()
on_register(_register_one)
