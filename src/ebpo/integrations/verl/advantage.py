"""The advantage functions the plug-in registers in verl's ``ADV_ESTIMATOR_REGISTRY``.

verl (``ray_trainer.compute_advantage``) calls a registered estimator with keyword arguments only::

    fn(token_level_rewards=[bs, T], response_mask=[bs, T], config=<algorithm config>, index=uids, ...)

and expects ``(advantages, returns)``, both ``[bs, T]``. For each row ``i`` this module

1. takes the outcome reward ``r_i = Σ_t token_level_rewards[i, t]`` (verl puts the verifier's score
   on the last response token);
2. marks the row valid iff ``Σ_t response_mask[i, t] > 0`` — verl pads the batch to a multiple of
   the data-parallel size with rows whose mask is all zero, and those must not reach the running
   prior;
3. groups rows by ``index`` (verl's ``uid``: fresh per prompt per step, rows not contiguous);
4. runs the core estimator held in :data:`~ebpo.integrations.verl.state.STORE` (one per
   configuration, so the prior persists across steps in the process that computes advantages);
5. broadcasts the scalar advantage over the response tokens with one multiply by the mask:
   ``A[i, t] = Â_i · response_mask[i, t]``; returns are the same tensor (outcome supervision, as
   verl's GRPO).

Which names are registered is :func:`plugin_names`: every name of ebpo's registry
(:func:`ebpo.available_estimators`: ``ebpo``, ``ebpo_batch``, ..., a user's own once its module is
imported) but those verl computes itself (:data:`VERL_OWN_NAMES`: ``grpo``, ``rloo``, ...), so
``algorithm.adv_estimator=ebpo_batch`` means what ``ebpo.make_estimator("ebpo_batch")`` means. One
function per name is made by :func:`function_for`. Options come from the ``algorithm`` config,
``algorithm.ebpo.<option>`` (``+algorithm.ebpo.prior=ema`` on the Hydra command line), for every
registered name. See :func:`resolve_options`.

Multi-output agent sessions (verl's v1 trainer, ``compute_advantage_for_multi_trajectories``):
the rows' TransferQueue keys ``{uid}_{session}_{output}`` are read from that function's frame
(:mod:`ebpo.integrations.verl.call_stack`, as are the trainer's ``metrics`` dict and SPO's
prompt keys; :func:`session_final_rows`), the estimator sees ONE row per session (its final
output) and every output of a session gets its final output's advantage, as verl's GRPO does.
A session that returned no output or raised never reaches the estimator (verl keeps the rest of
its group); ``<name>/missing_sessions`` counts them: for each group present,
``actor_rollout_ref.rollout.n`` less the sessions seen, summed (:func:`missing_sessions`). It is
logged only where the keys and the trainer's config are at hand, and it counts against
``rollout.n``: a prompt given fewer samples on purpose (verl's per-row ``__rollout_n__``) counts
its missing ones too.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ebpo.estimators import available_estimators, estimator_options, estimator_spec
from ebpo.integrations.verl.call_stack import (
    session_keys,
    trainer_frame_metrics,
    verl_prompt_keys,
)
from ebpo.integrations.verl.guards import (
    MISSING_STATE_POLICIES,
    check_calls_per_step,
    check_clusters,
    check_resume,
    check_rewards,
    check_trainer_mode,
    parameter_sync_step,
)
from ebpo.integrations.verl.state import METRICS_FILENAME, STORE
from ebpo.integrations.verl.sub_steps import SubStepMetrics, sub_step_position
from ebpo.utils.runtime import torch_threads

__all__ = [
    "ALGORITHM_KEYS",
    "FUNCTIONS",
    "PLUGIN_KEYS",
    "VERL_OWN_NAMES",
    "advantage_function",
    "function_for",
    "missing_sessions",
    "outcome_advantage",
    "plugin_names",
    "resolve_options",
]

logger = logging.getLogger(__name__)

#: the names of verl's own registry (verl 0.9, ``core_algos.AdvantageEstimator``): where ebpo's
#: registry has one too (``grpo``, ``rloo``), verl computes it and the plug-in leaves it alone
VERL_OWN_NAMES = frozenset(
    (
        "gae",
        "gdpo",
        "grpo",
        "grpo_passk",
        "grpo_vectorized",
        "gpg",
        "opo",
        "optimal_token_baseline",
        "reinforce_plus_plus",
        "reinforce_plus_plus_baseline",
        "remax",
        "rloo",
        "rloo_vectorized",
        "tir_optimal_token_baseline",
    )
)
#: keys of ``algorithm.ebpo`` that configure the plug-in rather than the estimator
#: (``on_missing_state``, ``allow_async_trainer``: see :mod:`ebpo.integrations.verl.guards`)
PLUGIN_KEYS = ("metrics_file", "log_to_trainer", "on_missing_state", "allow_async_trainer")
OPTIONS_SECTION = "ebpo"
#: estimator option ← the ``algorithm`` key that sets it when ``algorithm.ebpo.<option>`` does not:
#: the JSPO authors' verl fork reads the smoothing of ``jspo_plus_plus`` from ``algorithm.js_smooth_coef``
ALGORITHM_KEYS = {"smooth_coef": "js_smooth_coef"}


# ---------------------------------------------------------------------- config
def _get(config: Any, key: str, default: Any = None) -> Any:
    """``config[key]`` for a DictConfig, verl's AlgoConfig dataclass, a dict or None."""
    if config is None:
        return default
    if isinstance(config, Mapping) or hasattr(config, "get"):
        try:
            value = config.get(key, default)
        except (AttributeError, KeyError):  # struct configs / dataclasses without the key
            value = getattr(config, key, default)
    else:
        value = getattr(config, key, default)
    return default if value is None else value


def _plain(section: Any) -> dict[str, Any]:
    """A plain dict from a DictConfig / mapping section (OmegaConf only if it is one)."""
    if section is None:
        return {}
    if type(section).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf

        section = OmegaConf.to_container(section, resolve=True)
    if not isinstance(section, Mapping):
        raise ValueError(
            f"algorithm.{OPTIONS_SECTION} must be a mapping of options, got {section!r}"
        )
    return dict(section)


def resolve_options(name: str, config: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(estimator_options, plugin_options)`` for registry name ``name`` from the algorithm config.

    Rules (verl's own keys are honoured; explicit ``algorithm.ebpo.*`` wins):

    * ``eps``: ``algorithm.ebpo.eps``, else ``algorithm.epsilon`` if present, else the
      estimator's default (1e-6, verl's for GRPO; ``krpo``: 1e-8, as its reference in verl).
    * ``smooth_coef`` (jspo_plus_plus): ``algorithm.ebpo.smooth_coef``, else the JSPO authors' key
      ``algorithm.js_smooth_coef`` if present (``+algorithm.js_smooth_coef=0.99`` on stock verl,
      whose schema lacks it), else the estimator's default 0 (no smoothing). See :data:`ALGORITHM_KEYS`.
    * ``normalize`` (ebpo, ebpo_bb): ``algorithm.ebpo.normalize``, else ``"batch"`` when
      ``algorithm.norm_adv_by_std_in_grpo`` is True (default) and ``"center"`` when False — the
      authors' code skips the std division in that case. JSPO never divides by a std.
    * the options the name fixes (``ebpo_batch``: :func:`ebpo.estimator_spec`) come first; the
      ``algorithm`` keys override them.
    * ``nan_policy`` defaults to ``"mask"``: a NaN score is a failed verifier call, not a reason
      to kill a multi-node job.

    Raises:
        ValueError: an unknown key under ``algorithm.ebpo`` (naming it and the allowed keys).
    """
    core, fixed_options = estimator_spec(name)
    section = _plain(_get(config, OPTIONS_SECTION))
    allowed_defaults = estimator_options(core)
    allowed = set(allowed_defaults)
    valid = sorted(allowed | set(PLUGIN_KEYS))
    unknown = sorted(set(section) - set(valid), key=str)
    if unknown:
        guesses = [m for key in unknown for m in difflib.get_close_matches(str(key), valid, n=1)]
        hint = f" (did you mean {', '.join(map(repr, guesses))}?)" if guesses else ""
        raise ValueError(
            f"unknown key(s) {', '.join(map(repr, unknown))} under algorithm.{OPTIONS_SECTION} for "
            f"adv_estimator={name!r}{hint}; valid keys: {', '.join(valid)}"
        )
    plugin = {key: section.pop(key) for key in PLUGIN_KEYS if key in section}
    policy = plugin.get("on_missing_state", "error")
    if policy not in MISSING_STATE_POLICIES:
        raise ValueError(
            f"algorithm.{OPTIONS_SECTION}.on_missing_state must be one of "
            f"{', '.join(MISSING_STATE_POLICIES)}, got {policy!r}"
        )
    options = {**fixed_options, **section}
    for option, key in ALGORITHM_KEYS.items():
        value = _get(config, key)
        if option in allowed and option not in options and value is not None:
            options[option] = value
    options.setdefault("eps", float(_get(config, "epsilon", allowed_defaults["eps"])))
    options.setdefault("nan_policy", "mask")
    if "normalize" in allowed and "normalize" not in options:
        by_std = _get(config, "norm_adv_by_std_in_grpo", True)
        options["normalize"] = "batch" if bool(by_std) else "center"
    return options, plugin


# ---------------------------------------------------------------------- threads and padding
def nonempty_rows(response_mask: torch.Tensor) -> torch.Tensor:
    """``[bs]`` bool: rows with at least one response token (``Σ_t mask[i, t] > 0``).

    verl right-pads responses, so a real response has ``mask[i, 0] = 1`` and only padding rows
    (and, in other layouts, left-padded rows) fail that O(bs) test; only those rows are then
    summed in full. Same result as ``response_mask.sum(-1) > 0`` without a second pass over the
    whole ``[bs, T]`` tensor (one pass is already spent on the rewards).
    """
    valid = response_mask[:, 0] != 0
    suspect = (~valid).nonzero().flatten()
    if suspect.numel():
        valid[suspect] = response_mask[suspect].ne(0).any(dim=-1)
    return valid


# ---------------------------------------------------------------------- agent sessions
def session_final_rows(keys: list[str]) -> tuple[list[bool], list[int]] | None:
    """For verl's keys ``{uid}_{session}_{output}``: which rows are the final output of their
    session (the highest ``output``), and for every row the position of its session's final row;
    None if a key is not of that form. verl's GRPO path groups the same rows
    (``compute_advantage_for_multi_trajectories``)."""
    final: dict[str, tuple[int, int]] = {}
    sessions = []
    for row, key in enumerate(keys):
        parts = key.rsplit("_", 2)
        if len(parts) != 3 or not parts[2].isdigit():
            return None
        session, output = f"{parts[0]}_{parts[1]}", int(parts[2])
        sessions.append(session)
        if session not in final or final[session][0] < output:
            final[session] = (output, row)
    owner = [final[session][1] for session in sessions]
    return [owner[row] == row for row in range(len(keys))], owner


def missing_sessions(keys: list[str], seen: list[bool], index: Any, rollout_n: int) -> int:
    """Sessions that never reached the estimator: for each group (verl's uid, ``index``) with a
    row the estimator ``seen``, ``rollout_n`` less the distinct sessions of its seen rows (``keys``
    are verl's ``{uid}_{session}_{output}``), clamped at 0, summed. A group with no row seen
    (verl's padding rows) is not counted."""
    sessions: dict[str, set[str]] = {}
    for key, group, row_seen in zip(keys, index, seen, strict=True):
        if row_seen:
            sessions.setdefault(str(group), set()).add(key.rsplit("_", 2)[1])
    return sum(max(0, int(rollout_n) - len(found)) for found in sessions.values())


def _rollout_n(trainer_config: Any) -> int | None:
    """``actor_rollout_ref.rollout.n`` of the trainer's config, or None."""
    rollout = _get(_get(trainer_config, "actor_rollout_ref"), "rollout")
    n = _get(rollout, "n")
    return int(n) if isinstance(n, int) and not isinstance(n, bool) else None


# ---------------------------------------------------------------------- side channel
#: the batch counts of the current step's sub-steps (verl's ``parameter_sync_step`` > 1)
SUB_STEPS = SubStepMetrics()


def _trainer_run_dir(trainer: Any) -> str | None:
    """``trainer.config.trainer.default_local_dir`` (absolute), or None."""
    try:
        path = trainer.config.trainer.get("default_local_dir")
    except Exception:  # not a verl trainer config (tests' stand-ins, foreign trainers)
        return None
    return os.path.abspath(path) if isinstance(path, str) and path else None


def _report(
    name: str,
    metrics: Mapping[str, float],
    steps: int,
    plugin: Mapping[str, Any],
    trainer_metrics: dict | None,
    trainer: Any,
) -> None:
    prefixed = {f"{name}/{key}": float(value) for key, value in metrics.items()}
    if plugin.get("log_to_trainer", True):
        if trainer_metrics is not None:
            # a step of sub-steps: counts summed over the step (ebpo.integrations.verl.sub_steps)
            shown = SUB_STEPS.fold(name, metrics, *sub_step_position(trainer))
            trainer_metrics.update({f"{name}/{key}": value for key, value in shown.items()})
        if STORE.run_dir is None and trainer is not None:
            # Trainers that never build the checkpoint callback (legacy use_v1=False, experimental
            # ones) still get the JSONL in their run directory.
            STORE.run_dir = _trainer_run_dir(trainer)
    if plugin.get("log_to_trainer", True) and trainer_metrics is None:
        path = STORE.metrics_path(plugin.get("metrics_file"))
        STORE.warn_once(
            "no-trainer-metrics",
            "ebpo: no verl trainer `metrics` dict on the call stack of %s (a trainer outside "
            "verl.trainer / verl.experimental?): the estimator statistics do not reach the "
            "trainer's loggers; they go to %s",
            name,
            path
            or f"no file either — set +algorithm.{OPTIONS_SECTION}.metrics_file=PATH/{METRICS_FILENAME}",
        )
    step = getattr(trainer, "global_steps", None)
    record = {
        "estimator": name,
        "estimator_step": steps,
        "global_step": step if isinstance(step, int) else None,
        **prefixed,
    }
    try:
        STORE.log_metrics(record, plugin.get("metrics_file"))
    except OSError as error:  # logging must never stop training
        logger.warning("ebpo: could not append metrics: %s", error)


# ---------------------------------------------------------------------- the estimator
def outcome_advantage(
    name: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    config: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages ``[bs, T]`` of registry estimator ``name`` (see module docstring)."""
    if token_level_rewards.dim() != 2 or token_level_rewards.shape != response_mask.shape:
        raise ValueError(
            "token_level_rewards and response_mask must both be [batch, response_length]; got "
            f"{tuple(token_level_rewards.shape)} and {tuple(response_mask.shape)}"
        )
    if index is None:
        raise ValueError(f"index (verl's uid per row) is required by adv_estimator={name!r}")
    options, plugin = resolve_options(name, config)
    core = estimator_spec(name)[0]
    trainer_metrics, trainer = trainer_frame_metrics()
    estimator = STORE.get(core, options)  # built on the first call of this configuration only
    check_clusters(estimator)
    check_rewards(name, estimator, config)
    trainer_config = _trainer_config(trainer)
    if trainer_config is not None:
        check_calls_per_step(name, estimator, parameter_sync_step(trainer_config))
        check_trainer_mode(name, trainer_config, plugin.get("allow_async_trainer", False))
        steps = getattr(trainer, "global_steps", None)
        policy = plugin.get("on_missing_state", "error")
        if check_resume(STORE, name, core, options, trainer_config.get("trainer"), steps, policy):
            estimator = STORE.get(core, options)
    sessions = session_final_rows(keys) if (keys := session_keys(len(index))) else None
    prompt_keys = verl_prompt_keys(name, len(index)) if estimator.uses_prompt_keys else None
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        valid = nonempty_rows(response_mask)
        if sessions is not None:  # one row per agent session: its final output (as verl's GRPO)
            valid = valid & torch.tensor(sessions[0])
        # The big [bs, T] ops (reward sum, token broadcast) keep every thread; the estimator's
        # small [bs] ops run on one (see ebpo.utils.runtime.torch_threads).
        with torch_threads(1):
            # the core hashes verl's uid strings (and the prompt keys) once; token counts for an
            # estimator that reads them (a whitening over tokens)
            tokens = response_mask.sum(dim=-1) if estimator.uses_token_counts else None
            result = estimator(
                scores, index, mask=valid, prompt_keys=prompt_keys, token_counts=tokens
            )
        per_row = result.advantages
        if sessions is not None:  # every output of a session gets its final output's advantage
            per_row = per_row[torch.tensor(sessions[1])]
        advantages = per_row.to(token_level_rewards.dtype).unsqueeze(-1) * response_mask
    metrics = dict(result.metrics)
    rollout_n = _rollout_n(trainer_config)
    if sessions is not None and keys is not None and rollout_n is not None:
        metrics["missing_sessions"] = float(
            missing_sessions(keys, valid.tolist(), index, rollout_n)
        )
    _report(
        name,
        metrics,
        getattr(estimator, "steps", 0),
        plugin,
        trainer_metrics if plugin.get("log_to_trainer", True) else None,
        trainer,
    )
    return advantages, advantages


def _trainer_config(trainer: Any) -> Any:
    """The full config of the trainer on the call stack (verl's trainers keep it as ``config``)."""
    config = getattr(trainer, "config", None)
    return config if config is not None and hasattr(config, "get") else None


def advantage_function(name: str) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """The function registered in verl under ``name``: verl's keyword-only call signature, run by
    :func:`outcome_advantage` (verl's other keyword arguments, e.g. ``reward_baselines``, are
    ignored)."""

    def compute_advantage(
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Any = None,
        config: Any = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return outcome_advantage(name, token_level_rewards, response_mask, index, config)

    compute_advantage.__name__ = compute_advantage.__qualname__ = f"compute_{name}_advantage"
    compute_advantage.__doc__ = (
        f"verl advantage estimator {name!r}: ebpo.make_estimator({name!r}) on the outcome "
        "rewards, broadcast over the tokens."
    )
    return compute_advantage


def plugin_names() -> dict[str, str]:
    """verl ``adv_estimator`` name → the estimator class's own name (``ebpo_batch`` → ``ebpo``),
    for every name the plug-in registers: ebpo's registry less :data:`VERL_OWN_NAMES`."""
    return {
        name: estimator_spec(name)[0]
        for name in available_estimators()
        if name not in VERL_OWN_NAMES
    }


#: verl name → the function registered for it (one object per name: verl refuses a second)
FUNCTIONS: dict[str, Callable[..., tuple[torch.Tensor, torch.Tensor]]] = {}


def function_for(name: str) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """The one function registered in verl under ``name`` (:func:`advantage_function`)."""
    if name not in FUNCTIONS:
        FUNCTIONS[name] = advantage_function(name)
    return FUNCTIONS[name]
