"""Run verl's PPO entry point with the plug-in loaded, after checking the overrides.

``ebpo verl <overrides>`` ≡ ``python -m verl.trainer.main_ppo <overrides + our defaults>``:

* ``algorithm.adv_estimator=ebpo`` unless the overrides choose an estimator;
* ``trainer.checkpoint_callback_class=ebpo.integrations.verl.checkpoint.EBPOCheckpointCallback``
  when the estimator is one of ours and no callback is set (persists the prior, points the
  metrics JSONL at the run directory);
* when verl does not load the ``verl.plugins`` entry point (verl < 0.9, or
  ``VERL_USE_EXTERNAL_PLUGINS`` excludes it), ``VERL_USE_EXTERNAL_MODULES`` is set for the driver
  and forwarded to the Ray workers with
  ``+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES=…``.

Before launching, :func:`check_overrides` parses the overrides with Hydra's own grammar and
builds the estimator from the ``algorithm.*`` ones, so a typo (``+algorithm.ebpo.prir=ema``) or a
bad value — or a combination :mod:`~ebpo.integrations.verl.guards` refuses — fails in a second on
the command line instead of after the first rollout in a Ray actor; then
:func:`check_launchable` runs the dry run's checks and refuses a configuration this machine cannot
run as written (GPUs asked for and not here, data files or a model folder missing), before Ray
starts; :func:`check_plugin_where_it_runs` makes sure ``import verl`` registers ebpo's estimators where
verl will compute advantages (every node of the Ray cluster ``main_ppo`` joins, or a fresh
interpreter here when it starts its own).

A dry run composes and validates the config on CPU: :mod:`ebpo.commands.verl.validation`
(its ``compose``, ``dry_run`` and ``validate`` are also importable from here).
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from importlib.metadata import entry_points
from typing import Any

from ebpo.commands.verl.address import cluster_address
from ebpo.commands.verl.validation import (
    check_options_read,
    compose,
    dry_run,
    validate,
)
from ebpo.estimators import make_estimator
from ebpo.integrations.verl.advantage import (
    ALGORITHM_KEYS,
    OPTIONS_SECTION,
    plugin_names,
    resolve_options,
)
from ebpo.integrations.verl.guards import (
    CALLBACK_FQN,
    check_calls_per_step,
    check_clusters,
    check_rewards,
    check_trainer_mode,
    parameter_sync_step,
)

__all__ = [
    "CALLBACK_FQN",
    "PLUGIN_MODULE",
    "LaunchCheckFailed",
    "PluginUnavailable",
    "check_launchable",
    "check_options_read",
    "check_overrides",
    "check_plugin_where_it_runs",
    "compose",
    "dry_run",
    "entry_point_active",
    "override_value",
    "run",
    "validate",
    "with_defaults",
]

PLUGIN_MODULE = "ebpo.integrations.verl.plugin"
ENV_FORWARD = f"+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES={PLUGIN_MODULE}"


def _key(override: str) -> str:
    """``algorithm.adv_estimator`` of ``++algorithm.adv_estimator=x`` (Hydra's +/++/~ prefixes)."""
    return override.split("=", 1)[0].lstrip("+~")


def override_value(overrides: Sequence[str], key: str) -> str | None:
    """The value the LAST override for ``key`` sets (Hydra applies them in order), or None."""
    value = None
    for override in overrides:
        if "=" in override and _key(override) == key:
            value = override.split("=", 1)[1]
    return value


def entry_point_active() -> bool:
    """Whether ``import verl`` will load our ``verl.plugins`` entry point in every process."""
    import verl  # optional heavy dependency (verl extra)
    from packaging.version import Version  # comes with verl

    if Version(verl.__version__) < Version("0.9.0"):
        return False
    policy = os.getenv("VERL_USE_EXTERNAL_PLUGINS", "auto").strip().lower()
    if policy == "none":
        return False
    ours = [ep for ep in entry_points(group="verl.plugins") if ep.value == PLUGIN_MODULE]
    if not ours:
        return False
    return policy == "auto" or any(ep.name in {p.strip() for p in policy.split(",")} for ep in ours)


def with_defaults(overrides: Sequence[str], *, plugin_via_env: bool = False) -> list[str]:
    """``overrides`` plus the launcher's defaults (see module docstring); user overrides win."""
    out = list(overrides)
    estimator = override_value(out, "algorithm.adv_estimator")
    if estimator is None:
        out.insert(0, "algorithm.adv_estimator=ebpo")
        estimator = "ebpo"
    if (
        estimator in plugin_names()
        and override_value(out, "trainer.checkpoint_callback_class") is None
    ):
        out.append(f"trainer.checkpoint_callback_class={CALLBACK_FQN}")
    if plugin_via_env and override_value(out, _key(ENV_FORWARD)) is None:
        out.append(ENV_FORWARD)
    return out


def _external_modules_env() -> dict[str, str]:
    env = dict(os.environ)
    current = [m for m in env.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    if PLUGIN_MODULE not in current:
        env["VERL_USE_EXTERNAL_MODULES"] = ",".join([*current, PLUGIN_MODULE])
    return env


def _parse_overrides(overrides: Sequence[str]) -> list[Any]:
    """Hydra's parsed overrides; a word that is not an override is a one-line ValueError."""
    # optional heavy dependencies (verl extra)
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    for text in overrides:
        if "=" not in text and not text.startswith("~"):
            raise ValueError(
                f"{text!r} is not a Hydra override (expected key=value, +key=value or ~key)"
            )
    try:
        return OverridesParser.create().parse_overrides(list(overrides))
    except HydraException as error:
        raise ValueError(f"cannot parse the Hydra overrides: {error}") from error


def parsed_overrides(overrides: Sequence[str]) -> dict[str, Any]:
    """What the overrides set, as a nested plain dict (Hydra's typed values, later overrides win,
    ``~`` deletes). Only what the overrides say: verl's defaults are not included."""
    tree: dict[str, Any] = {}
    for override in _parse_overrides(overrides):
        path = override.key_or_group.split(".")
        node = tree
        for part in path[:-1]:
            child = node.get(part)
            node[part] = node = dict(child) if isinstance(child, dict) else {}
        if override.is_delete():
            node.pop(path[-1], None)
        else:
            node[path[-1]] = override.value()
    return tree


def algorithm_overrides(overrides: Sequence[str]) -> dict[str, Any]:
    """The ``algorithm`` section the overrides set (see :func:`parsed_overrides`)."""
    section = parsed_overrides(overrides).get("algorithm")
    return section if isinstance(section, dict) else {}


def check_overrides(overrides: Sequence[str]) -> None:
    """Refuse, before anything is launched, overrides that would fail inside verl's actor.

    Checks that every word is a Hydra override and, when the estimator is one of ebpo's, that
    ``algorithm.ebpo.*`` names only options of that estimator (the allowed keys come from the
    estimator's constructor, :func:`ebpo.estimators.estimator_options`) with values the estimator
    accepts — values taken from verl's or the authors' ``algorithm`` keys included
    (``algorithm.js_smooth_coef``, see :func:`~ebpo.integrations.verl.advantage.resolve_options`).
    Values that are interpolations (``${...}``) are left to the dry run.

    Raises:
        ValueError: naming the bad override, key or value.
    """
    parsed = parsed_overrides(overrides)
    algorithm = parsed.get("algorithm")
    if not isinstance(algorithm, dict):
        algorithm = {}
    estimator = algorithm.get("adv_estimator", "gae")  # verl's default when none is given
    check_options_read(estimator, algorithm)
    if estimator not in plugin_names():
        return
    options, plugin = resolve_options(estimator, algorithm)  # unknown keys
    check_trainer_mode(estimator, parsed, plugin.get("allow_async_trainer", False))
    if any(isinstance(v, str) and "${" in v for v in options.values()):
        return
    try:
        instance = make_estimator(estimator, **options)
    except ValueError as error:
        section = algorithm.get(OPTIONS_SECTION)
        explicit = section if isinstance(section, dict) else {}
        aliases = [
            f"{option} from algorithm.{key}"
            for option, key in ALGORITHM_KEYS.items()
            if option in options and option not in explicit
        ]
        source = f" ({', '.join(aliases)})" if aliases else ""
        raise ValueError(
            f"invalid algorithm.{OPTIONS_SECTION} option for adv_estimator={estimator}{source}: {error}"
        ) from error
    check_clusters(instance)
    check_rewards(estimator, instance, algorithm)
    check_calls_per_step(estimator, instance, parameter_sync_step(parsed))


class PluginUnavailable(RuntimeError):
    """ebpo's estimators are not registered where verl will compute advantages (one line)."""


def check_plugin_where_it_runs(args: Sequence[str], env: Mapping[str, str] | None) -> None:
    """Before launching: on the Ray cluster ``main_ppo`` will join (``RAY_ADDRESS``,
    ``ray_kwargs.ray_init.address`` or the one ``ray start`` started here:
    :func:`~ebpo.commands.verl.address.cluster_address`), every node must register ebpo's
    estimators on ``import verl`` (verl's ``TaskRunnerV1`` lands on any of them); without a
    cluster, a fresh interpreter here must (``main_ppo`` starts its Ray workers on this machine).

    Raises:
        PluginUnavailable: one line naming the node (or this machine) and why.
    """
    from ebpo.commands.verl.nodes import (
        check_nodes,
        first_failure,
        fresh_process_report,
        registered_everywhere,
    )

    forwarded = {
        key: value for key, value in (env or {}).items() if key == "VERL_USE_EXTERNAL_MODULES"
    }
    address = cluster_address(override_value(args, "ray_kwargs.ray_init.address"))
    if address:
        failure = first_failure(check_nodes(address, env_vars=forwarded))
        if failure:
            raise PluginUnavailable(failure)
        return
    report = fresh_process_report(env=forwarded)
    if not registered_everywhere(report):
        cause = (report.get("error") or "").strip().splitlines()
        raise PluginUnavailable(
            "ebpo's verl plug-in is not usable on this machine, where main_ppo starts its Ray "
            "workers: `import verl` in a fresh interpreter did not register "
            + ", ".join(sorted(report.get("registered") or plugin_names()))
            + (f" ({cause[-1]})" if cause else "")
        )


def check_launchable(args: Sequence[str]) -> None:
    """The dry run's checks before a real launch: the full argument list composed and validated
    as ``main_ppo`` will (:func:`dry_run`), and refused when this machine cannot run it as written
    (:func:`~ebpo.commands.verl.machine.launch_problems`: GPUs, data files, the model folder, a
    cluster nothing answers at). Ray is not started; nothing is written.

    Raises:
        ValueError: the configuration is invalid or cannot run here (one line; exit 2).
        LaunchCheckFailed: verl failed on a configuration nothing refused (one line; exit 1).
    """
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # verl's "checks passed" print
            dry_run(args, launch=True)
    except ValueError:
        raise
    except Exception as error:  # verl itself failing while composing / validating
        raise LaunchCheckFailed(
            f"the dry run before the launch FAILED: {type(error).__name__}: {error}"
        ) from error


class LaunchCheckFailed(RuntimeError):
    """verl failed on a configuration no check refused, in the dry run before a launch."""


def run(overrides: Sequence[str], *, defaults: bool = True) -> int:
    """Run ``python -m verl.trainer.main_ppo`` with the plug-in; returns its exit code.

    Raises:
        ValueError: the overrides fail :func:`check_overrides`, or :func:`check_launchable`
            (nothing is launched, Ray is not started).
        LaunchCheckFailed: verl fails in :func:`check_launchable`'s dry run.
        PluginUnavailable: ebpo's estimators are not registered where verl will run them
            (:func:`check_plugin_where_it_runs`; nothing is launched).
    """
    check_overrides(
        with_defaults(overrides) if defaults else overrides
    )  # before importing verl: fast
    via_env = not entry_point_active()
    args = with_defaults(overrides, plugin_via_env=via_env) if defaults else list(overrides)
    env = _external_modules_env() if via_env else None
    check_launchable(args)
    estimator = override_value(args, "algorithm.adv_estimator")
    if estimator in plugin_names():
        check_plugin_where_it_runs(args, env)
    command = [sys.executable, "-m", "verl.trainer.main_ppo", *args]
    print("+ " + " ".join(command), flush=True)
    return subprocess.call(command, env=env)
