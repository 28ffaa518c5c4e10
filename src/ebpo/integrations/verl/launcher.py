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
bad value fails in a second on the command line instead of after the first rollout in a Ray actor.

A dry run (:func:`dry_run`) composes the config with Hydra exactly as ``main_ppo`` would
(``verl/trainer/config/ppo_trainer.yaml`` + overrides), resolves every interpolation, runs verl's
own ``validate_config`` and then our checks (estimator registered, ``algorithm.ebpo.*`` options
valid, checkpoint callback and reward function importable). Nothing needs a GPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import Any

from ebpo.estimators import make_estimator
from ebpo.integrations.verl.advantage import (
    ALGORITHM_KEYS,
    OPTIONS_SECTION,
    REGISTERED_NAMES,
    resolve_options,
)
from ebpo.integrations.verl.resume import resume_folder

__all__ = [
    "CALLBACK_FQN",
    "PLUGIN_MODULE",
    "check_overrides",
    "compose",
    "dry_run",
    "entry_point_active",
    "override_value",
    "run",
    "with_defaults",
]

PLUGIN_MODULE = "ebpo.integrations.verl.plugin"
CALLBACK_FQN = "ebpo.integrations.verl.checkpoint.EBPOCheckpointCallback"
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
    mini = config.actor_rollout_ref.actor.ppo_mini_batch_size
    if mini > config.data.train_batch_size:
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
        make_estimator(estimator, **options)  # validates option values
        notes.append(f"estimator {estimator} with options {options}")
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

        load_class_from_fqn(fqn, "CheckpointCallback")
    reward_fn = config.reward.get("custom_reward_function") or {}
    if reward_fn.get("path"):
        from verl.utils.import_utils import load_extern_object  # optional heavy dependency

        path = reward_fn["path"]
        if path.startswith("pkg://") or os.path.exists(path.removeprefix("file://")):
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


def dry_run(overrides: Sequence[str]) -> tuple[Any, list[str]]:
    """Compose and validate; returns ``(config, notes)``. Raises on an invalid configuration."""
    config = compose(overrides)
    return config, validate(config)


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


def algorithm_overrides(overrides: Sequence[str]) -> dict[str, Any]:
    """The ``algorithm`` section the overrides set, as a plain dict (Hydra's typed values, later
    overrides win, ``~`` deletes). Only what the overrides say: verl's defaults are not included."""
    algorithm: dict[str, Any] = {}
    for override in _parse_overrides(overrides):
        path = override.key_or_group.split(".")
        if path[0] != "algorithm" or len(path) < 2:
            continue
        node = algorithm
        for part in path[1:-1]:
            child = node.get(part)
            node[part] = node = dict(child) if isinstance(child, dict) else {}
        if override.is_delete():
            node.pop(path[-1], None)
        else:
            node[path[-1]] = override.value()
    return algorithm


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
    algorithm = algorithm_overrides(overrides)
    estimator = algorithm.get("adv_estimator", "gae")  # verl's default when none is given
    if estimator not in OUR_ESTIMATORS:
        return
    options, _ = resolve_options(estimator, algorithm)  # unknown keys
    if any(isinstance(v, str) and "${" in v for v in options.values()):
        return
    try:
        make_estimator(estimator, **options)
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


def run(overrides: Sequence[str], *, defaults: bool = True) -> int:
    """Run ``python -m verl.trainer.main_ppo`` with the plug-in; returns its exit code.

    Raises:
        ValueError: the overrides fail :func:`check_overrides` (nothing is launched).
    """
    check_overrides(
        with_defaults(overrides) if defaults else overrides
    )  # before importing verl: fast
    via_env = not entry_point_active()
    args = with_defaults(overrides, plugin_via_env=via_env) if defaults else list(overrides)
    env = _external_modules_env() if via_env else None
    command = [sys.executable, "-m", "verl.trainer.main_ppo", *args]
    print("+ " + " ".join(command), flush=True)
    return subprocess.call(command, env=env)
