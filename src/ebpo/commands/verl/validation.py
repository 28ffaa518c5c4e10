"""Compose verl's config as ``main_ppo`` would and validate it on CPU: ``ebpo verl … --dry-run``.

A dry run (:func:`dry_run`) composes the config with Hydra exactly as ``main_ppo`` would
(``verl/trainer/config/ppo_trainer.yaml`` + overrides), resolves every interpolation, runs verl's
own ``validate_config`` and then our checks (estimator registered, ``algorithm.ebpo.*`` options
valid and set only for an estimator that reads them, checkpoint callback and reward function
importable) and what :func:`~ebpo.commands.verl.machine.launch_problems` finds that this machine
lacks to launch it (GPUs, data files, the model folder: warnings here, refusals for a real
launch). Nothing needs a GPU. Whatever makes the configuration invalid — an override Hydra
cannot apply, an assertion of verl's validation, one of our checks — is a ValueError (``ebpo verl
… --dry-run`` exits 2 with one line); only verl failing on a configuration nothing refused is
reported as "dry run FAILED" (exit 1). verl's warnings about the machine (no accelerator) and its
Python warnings become notes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

from ebpo.commands.verl.machine import launch_problems
from ebpo.estimators import estimator_options, make_estimator
from ebpo.integrations.verl.advantage import OPTIONS_SECTION, plugin_names, resolve_options
from ebpo.integrations.verl.guards import (
    check_calls_per_step,
    check_clusters,
    check_resume_folder,
    check_rewards,
    check_trainer_mode,
    parameter_sync_step,
)
from ebpo.integrations.verl.resume import resume_folder

__all__ = [
    "MACHINE_LOGGERS",
    "check_options_read",
    "compose",
    "dry_run",
    "validate",
]


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
        ValueError: the estimator is unknown to verl, ``algorithm.ebpo`` options are invalid (or
            set for an estimator that does not read them), or the checkpoint callback / reward
            function cannot be loaded.
    """
    # imports verl and registers the estimators in this process (verl extra)
    import ebpo.integrations.verl.plugin  # noqa: F401

    _verl_validate_config(config)
    # Checks verl leaves to run time (minutes into a job, inside an actor).
    _check_mini_batch(config)
    notes: list[str] = []
    folder = resume_folder(config.trainer)  # raises on an unknown resume_mode
    if folder:
        notes.append(f"will resume from {folder}")
    notes += _check_estimator(config, folder)
    _load_checkpoint_callback(config)
    notes += _load_reward_function(config)
    return notes


def _verl_validate_config(config: Any) -> None:
    """verl's own ``validate_config``, with the device chosen as ``main_ppo`` chooses it."""
    from verl.trainer.ppo.utils import (
        need_critic,
        need_reference_policy,
    )  # optional heavy dependency
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    auto_set_device(config)
    validate_config(
        config=config,
        use_reference_policy=need_reference_policy(config),
        use_critic=need_critic(config),
    )


def _check_mini_batch(config: Any) -> None:
    mini = _positive_int(config, "actor_rollout_ref.actor.ppo_mini_batch_size")
    if mini > _positive_int(config, "data.train_batch_size"):
        raise ValueError(
            f"actor_rollout_ref.actor.ppo_mini_batch_size ({mini}) must not exceed data.train_batch_size "
            f"({config.data.train_batch_size})"
        )


def _check_estimator(config: Any, folder: str | None) -> list[str]:
    """The estimator registered in verl; ebpo's built from ``algorithm.*`` (every option checked,
    the guards' combinations refused, a resume folder's state checked); ``algorithm.ebpo`` refused
    for an estimator that ignores it. Returns notes."""
    from verl.trainer.ppo import core_algos  # optional heavy dependency (verl extra)

    estimator = config.algorithm.adv_estimator
    if estimator not in ("gae", "grpo") and estimator not in core_algos.ADV_ESTIMATOR_REGISTRY:
        raise ValueError(f"algorithm.adv_estimator={estimator!r} is not registered in verl")
    check_options_read(estimator, config.algorithm)
    if estimator not in plugin_names():
        return []
    options, plugin = resolve_options(estimator, config.algorithm)
    instance = make_estimator(estimator, **options)  # validates option values
    check_clusters(instance)
    check_rewards(estimator, instance, config.algorithm)
    check_calls_per_step(estimator, instance, parameter_sync_step(config))
    check_trainer_mode(estimator, config, plugin.get("allow_async_trainer", False))
    if folder and os.path.isdir(folder) and plugin.get("on_missing_state", "error") == "error":
        check_resume_folder(estimator, instance, folder)
    # every option, defaults included: what the run will use (the prior above all)
    effective = {**estimator_options(estimator), **options}
    notes = [f"estimator {estimator} with options {effective}"]
    if not config.trainer.get("checkpoint_callback_class"):
        notes.append(
            "WARNING: no trainer.checkpoint_callback_class: the EBPO prior is not saved with checkpoints"
        )
    if not config.trainer.get("use_v1", True):
        notes.append(
            "WARNING: trainer.use_v1=False: the legacy trainer never calls checkpoint callbacks"
        )
    return notes


def check_options_read(estimator: str, algorithm: Any) -> None:
    """Refuse ``algorithm.ebpo.*`` options when ``estimator`` is not one of ebpo's: verl's own
    estimators never read them, so a typo or a bad value there would pass unnoticed and a
    deliberate option would silently do nothing.

    Raises:
        ValueError: naming the options and the two ways out.
    """
    section = algorithm.get(OPTIONS_SECTION) if hasattr(algorithm, "get") else None
    if estimator in plugin_names() or section is None or section == {}:
        return
    keys = sorted(map(str, section)) if hasattr(section, "keys") else []
    named = ", ".join(f"algorithm.{OPTIONS_SECTION}.{key}" for key in keys)
    raise ValueError(
        f"{named or f'algorithm.{OPTIONS_SECTION}'} {'are' if len(keys) > 1 else 'is'} read only by "
        f"ebpo's estimators ({', '.join(plugin_names())}), not by adv_estimator={estimator!r}, "
        f"which would ignore {'them' if len(keys) > 1 else 'it'}: drop the "
        f"algorithm.{OPTIONS_SECTION} override(s), or set algorithm.adv_estimator to one of "
        "ebpo's estimators"
    )


def _load_checkpoint_callback(config: Any) -> None:
    fqn = config.trainer.get("checkpoint_callback_class")
    if fqn:
        from verl.utils.import_utils import load_class_from_fqn  # optional heavy dependency

        with _names_override("trainer.checkpoint_callback_class", fqn):
            load_class_from_fqn(fqn, "CheckpointCallback")


def _load_reward_function(config: Any) -> list[str]:
    """Import the custom reward function as verl will; a note when its file is not here."""
    reward_fn = config.reward.get("custom_reward_function") or {}
    if not reward_fn.get("path"):
        return []
    from verl.utils.import_utils import load_extern_object  # optional heavy dependency

    path = reward_fn["path"]
    if not (path.startswith("pkg://") or os.path.exists(path.removeprefix("file://"))):
        return [f"WARNING: reward function file {path} does not exist here"]
    with _names_override("reward.custom_reward_function", path):
        load_extern_object(module_path=path, object_name=reward_fn.get("name") or "compute_score")
    return []


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


def dry_run(overrides: Sequence[str], *, launch: bool = False) -> tuple[Any, list[str]]:
    """Compose and validate; returns ``(config, notes)``. What this machine lacks to launch the
    config (:func:`~ebpo.commands.verl.machine.launch_problems`) is a warning note — or, with
    ``launch`` (``ebpo verl`` before a real launch), a ValueError.

    Raises:
        ValueError: the configuration is invalid — the overrides do not compose with verl's
            config (an unknown key without ``+``, a missing config group, a bad interpolation),
            verl's ``validate_config`` refuses it (its assertions included), or one of our
            checks does; with ``launch``, this machine cannot run it as written. The message is
            one the user can act on (``ebpo verl`` exits 2).
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
    problems = launch_problems(config)
    if launch and problems:
        raise ValueError(
            "this machine cannot run the configuration as written (nothing was launched): "
            + "; ".join(problems)
        )
    notes += [f"WARNING: a launch from this machine would stop here: {p}" for p in problems]
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
