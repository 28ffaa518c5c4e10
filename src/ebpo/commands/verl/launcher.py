"""Run verl's PPO entry point with the plug-in loaded, or compose and validate its config on CPU.

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
:func:`check_plugin_where_it_runs` makes sure ``import verl`` registers ebpo's estimators where
verl will compute advantages (every node of the Ray cluster ``main_ppo`` joins, or a fresh
interpreter here when it starts its own).

A dry run (:func:`dry_run`) composes the config with Hydra exactly as ``main_ppo`` would
(``verl/trainer/config/ppo_trainer.yaml`` + overrides), resolves every interpolation, runs verl's
own ``validate_config`` and then our checks (estimator registered, ``algorithm.ebpo.*`` options
valid, checkpoint callback and reward function importable). Nothing needs a GPU. Whatever makes
the configuration invalid — an override Hydra cannot apply, an assertion of verl's validation, one
of our checks — is a ValueError (``ebpo verl … --dry-run`` exits 2 with one line); only verl failing
on a configuration nothing refused is reported as "dry run FAILED" (exit 1). verl's warnings about
the machine (no accelerator) and its Python warnings become notes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from importlib.metadata import entry_points
from typing import Any

from ebpo.estimators import estimator_options, make_estimator
from ebpo.integrations.verl.advantage import (
    ALGORITHM_KEYS,
    OPTIONS_SECTION,
    REGISTERED_NAMES,
    resolve_options,
)
from ebpo.integrations.verl.guards import (
    CALLBACK_FQN,
    check_calls_per_step,
    check_resume_folder,
    check_rewards,
    parameter_sync_step,
)
from ebpo.integrations.verl.resume import resume_folder

__all__ = [
    "CALLBACK_FQN",
    "PLUGIN_MODULE",
    "PluginUnavailable",
    "check_overrides",
    "check_plugin_where_it_runs",
    "compose",
    "dry_run",
    "entry_point_active",
    "override_value",
    "run",
    "with_defaults",
]

PLUGIN_MODULE = "ebpo.integrations.verl.plugin"
#: the ``algorithm.adv_estimator`` names the plug-in registers (ebpo, ebpo_bb, jspo, jspo_plus_plus)
OUR_ESTIMATORS = tuple(REGISTERED_NAMES)
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
        estimator in OUR_ESTIMATORS
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


def compose(overrides: Sequence[str]) -> Any:
    """The DictConfig ``verl.trainer.main_ppo`` would build from ``overrides`` (interpolations resolved)."""
    import verl.trainer.main_ppo as main_ppo  # optional heavy dependencies (verl extra)
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    config_dir = os.path.join(os.path.dirname(os.path.abspath(main_ppo.__file__)), "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = hydra_compose(config_name="ppo_trainer", overrides=list(overrides))
    OmegaConf.resolve(config)
    return config


def validate(config: Any) -> list[str]:
    """verl's ``validate_config`` plus the plug-in's checks; returns notes (raises on errors).

    Raises:
        ValueError: the estimator is unknown to verl, ``algorithm.ebpo`` options are invalid, or
            the checkpoint callback / reward function cannot be loaded.
    """
    from verl.trainer.ppo import core_algos  # optional heavy dependency (verl extra)
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    # imports verl and registers the estimators in this process (verl extra)
    import ebpo.integrations.verl.plugin  # noqa: F401

    notes: list[str] = []
    auto_set_device(config)
    validate_config(
        config=config,
        use_reference_policy=need_reference_policy(config),
        use_critic=need_critic(config),
    )

    # Checks verl leaves to run time (minutes into a job, inside an actor).
    mini = _positive_int(config, "actor_rollout_ref.actor.ppo_mini_batch_size")
    if mini > _positive_int(config, "data.train_batch_size"):
        raise ValueError(
            f"actor_rollout_ref.actor.ppo_mini_batch_size ({mini}) must not exceed data.train_batch_size "
            f"({config.data.train_batch_size})"
        )
    folder = resume_folder(config.trainer)  # raises on an unknown resume_mode
    if folder:
        notes.append(f"will resume from {folder}")

    estimator = config.algorithm.adv_estimator
    if estimator not in ("gae", "grpo") and estimator not in core_algos.ADV_ESTIMATOR_REGISTRY:
        raise ValueError(f"algorithm.adv_estimator={estimator!r} is not registered in verl")
    if estimator in OUR_ESTIMATORS:
        options, plugin = resolve_options(estimator, config.algorithm)
        instance = make_estimator(estimator, **options)  # validates option values
        check_rewards(estimator, instance, config.algorithm)
        check_calls_per_step(estimator, instance, parameter_sync_step(config))
        if folder and os.path.isdir(folder) and plugin.get("on_missing_state", "error") == "error":
            check_resume_folder(estimator, instance, folder)
        # every option, defaults included: what the run will use (the prior above all)
        effective = {**estimator_options(estimator), **options}
        notes.append(f"estimator {estimator} with options {effective}")
        if not config.trainer.get("checkpoint_callback_class"):
            notes.append(
                "WARNING: no trainer.checkpoint_callback_class: the EBPO prior is not saved with checkpoints"
            )
        if not config.trainer.get("use_v1", True):
            notes.append(
                "WARNING: trainer.use_v1=False: the legacy trainer never calls checkpoint callbacks"
            )

    fqn = config.trainer.get("checkpoint_callback_class")
    if fqn:
        from verl.utils.import_utils import load_class_from_fqn  # optional heavy dependency

        with _names_override("trainer.checkpoint_callback_class", fqn):
            load_class_from_fqn(fqn, "CheckpointCallback")
    reward_fn = config.reward.get("custom_reward_function") or {}
    if reward_fn.get("path"):
        from verl.utils.import_utils import load_extern_object  # optional heavy dependency

        path = reward_fn["path"]
        if path.startswith("pkg://") or os.path.exists(path.removeprefix("file://")):
            with _names_override("reward.custom_reward_function", path):
                load_extern_object(
                    module_path=path, object_name=reward_fn.get("name") or "compute_score"
                )
        else:
            notes.append(f"WARNING: reward function file {path} does not exist here")
    for key in ("train_files", "val_files"):
        files = config.data.get(key)
        files = [files] if isinstance(files, str) else list(files or [])
        missing = [f for f in files if "://" not in f and not os.path.exists(f)]
        if missing:
            notes.append(
                f"WARNING: data.{key} not found here: {missing} (run `ebpo verl prepare-data`)"
            )
    return notes


def _positive_int(config: Any, key: str) -> int:
    """``config.<key>`` (a dotted path), which must be a positive integer: a ValueError naming
    the key otherwise (``data.train_batch_size=abc`` composes, as a string)."""
    from omegaconf import OmegaConf  # optional heavy dependency (verl extra)

    value = OmegaConf.select(config, key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{key} must be a positive integer, got {value!r}")
    return value


@contextlib.contextmanager
def _names_override(key: str, value: str) -> Iterator[None]:
    """Turn the failure to import what ``key=value`` names into a ValueError naming the key."""
    try:
        yield
    except (ImportError, AttributeError, FileNotFoundError) as error:
        raise ValueError(f"{key}={value!r} cannot be loaded: {error}") from error


def dry_run(overrides: Sequence[str]) -> tuple[Any, list[str]]:
    """Compose and validate; returns ``(config, notes)``.

    Raises:
        ValueError: the configuration is invalid — the overrides do not compose with verl's
            config (an unknown key without ``+``, a missing config group, a bad interpolation),
            verl's ``validate_config`` refuses it (its assertions included), or one of our
            checks does. The message is one the user can act on (``ebpo verl`` exits 2).
        Exception: anything else — verl or its dependencies failing on a configuration nothing
            refused (``ebpo verl`` reports "dry run FAILED" and exits 1).
    """
    from hydra.errors import HydraException  # optional heavy dependencies (verl extra)
    from omegaconf.errors import OmegaConfBaseException

    with _warnings_as_notes() as noise:
        try:
            config = compose(overrides)
        except (HydraException, OmegaConfBaseException) as error:
            raise ValueError(f"the overrides do not compose into verl's config: {error}") from error
        try:
            notes = validate(config)
        except (AssertionError, HydraException, OmegaConfBaseException) as error:
            raise ValueError(f"verl refuses the configuration: {error}") from error
    return config, notes + noise


#: loggers whose warnings describe the machine a dry run runs on (no accelerator, by design)
#: rather than the configuration: reported as notes instead of on stderr
MACHINE_LOGGERS = ("verl.plugin.platform.platform_manager",)


class _Collect(logging.Filter):
    def __init__(self, into: list[str]) -> None:
        super().__init__()
        self.into = into

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:  # errors stay where verl sends them
            return True
        self.into.append(f"verl: {record.getMessage()}")
        return False


@contextlib.contextmanager
def _warnings_as_notes() -> Iterator[list[str]]:
    """Python warnings and the machine loggers' records raised inside the block, collected as
    notes (``verl: …``) rather than printed: a dry run's stderr holds only its error, if any."""
    notes: list[str] = []
    collect = _Collect(notes)
    # a logger's filters survive the setLevel() its module runs when first imported
    loggers = [logging.getLogger(name) for name in MACHINE_LOGGERS]
    for logger in loggers:
        logger.addFilter(collect)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield notes
        notes.extend(f"verl: {w.category.__name__}: {w.message}" for w in caught)
    finally:
        for logger in loggers:
            logger.removeFilter(collect)


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
    algorithm = parsed.get("algorithm") if isinstance(parsed.get("algorithm"), dict) else {}
    estimator = algorithm.get("adv_estimator", "gae")  # verl's default when none is given
    if estimator not in OUR_ESTIMATORS:
        return
    options, _ = resolve_options(estimator, algorithm)  # unknown keys
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
    check_rewards(estimator, instance, algorithm)
    check_calls_per_step(estimator, instance, parameter_sync_step(parsed))


class PluginUnavailable(RuntimeError):
    """ebpo's estimators are not registered where verl will compute advantages (one line)."""


def check_plugin_where_it_runs(args: Sequence[str], env: Mapping[str, str] | None) -> None:
    """Before launching: on the Ray cluster ``main_ppo`` will join (``ray_kwargs.ray_init.address``
    or ``RAY_ADDRESS``), every node must register ebpo's estimators on ``import verl`` (verl's
    ``TaskRunnerV1`` lands on any of them); without a cluster, a fresh interpreter here must
    (``main_ppo`` starts its Ray workers on this machine).

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
    address = override_value(args, "ray_kwargs.ray_init.address") or os.environ.get("RAY_ADDRESS")
    if address and address != "local":
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
            + ", ".join(sorted(report.get("registered") or OUR_ESTIMATORS))
            + (f" ({cause[-1]})" if cause else "")
        )


def run(overrides: Sequence[str], *, defaults: bool = True) -> int:
    """Run ``python -m verl.trainer.main_ppo`` with the plug-in; returns its exit code.

    Raises:
        ValueError: the overrides fail :func:`check_overrides` (nothing is launched).
        PluginUnavailable: ebpo's estimators are not registered where verl will run them
            (:func:`check_plugin_where_it_runs`; nothing is launched).
    """
    check_overrides(
        with_defaults(overrides) if defaults else overrides
    )  # before importing verl: fast
    via_env = not entry_point_active()
    args = with_defaults(overrides, plugin_via_env=via_env) if defaults else list(overrides)
    env = _external_modules_env() if via_env else None
    estimator = override_value(args, "algorithm.adv_estimator")
    if estimator in OUR_ESTIMATORS:
        check_plugin_where_it_runs(args, env)
    command = [sys.executable, "-m", "verl.trainer.main_ppo", *args]
    print("+ " + " ".join(command), flush=True)
    return subprocess.call(command, env=env)
