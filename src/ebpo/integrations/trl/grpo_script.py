"""``ebpo grpo``: TRL's own ``trl grpo`` script, training with :class:`EBPOTrainer` and
:class:`EBPOConfig` instead of ``GRPOTrainer`` and ``GRPOConfig``.

The parser is TRL's ``TrlParser`` over the same four dataclasses as ``trl grpo``
(``GRPOScriptArguments``, the config, ``ModelConfig``, ``DatasetMixtureConfig``), with
``EBPOConfig`` — GRPOConfig plus ``advantage_estimator`` / ``estimator_options`` /
``cluster_column`` — in the config's place. So every GRPOConfig and ModelConfig flag and
``--config recipe.yaml`` work unchanged, and a YAML written for ``trl grpo`` runs here with one
added line (``advantage_estimator: ebpo``).

The training itself is TRL's ``trl.scripts.grpo.main``, not a copy: reward functions by TRL's
registry names or by import path, model loading, the dataset mixture, PEFT (``--use_peft``),
``resume_from_checkpoint`` and saving are TRL's code. ``main`` imports ``GRPOTrainer`` from ``trl``
when it runs and takes no trainer class, so :func:`ebpo_trainer_in_trl` swaps ``trl.GRPOTrainer``
for :class:`EBPOTrainer` for the duration of the call (restored afterwards, also on error). That
swap is the one thing repeated around TRL's script; ours is the reward-name alias table
:data:`REWARD_ALIASES`, rewritten to import paths before TRL's registry sees them.

``ebpo grpo --dry-run`` (:mod:`ebpo.integrations.trl.dry_run`) parses with :func:`parse` too and
runs the same ``main`` up to the trainer's construction, on a tiny local model.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

import trl
import yaml
from trl import DatasetMixtureConfig, ModelConfig, TrlParser
from trl.scripts import grpo as trl_grpo

from ebpo.estimators import available_estimators
from ebpo.integrations.trl.config import EBPOConfig
from ebpo.integrations.trl.presets import available_presets, preset_arguments
from ebpo.integrations.trl.trainer import EBPOTrainer

__all__ = ["REWARD_ALIASES", "ebpo_trainer_in_trl", "main", "make_parser", "parse"]

#: our reward functions by short name -> their import path (TRL's own names pass through)
REWARD_ALIASES: dict[str, str] = {
    "math_reward": "ebpo.integrations.trl.math_reward",
    "ebpo_math": "ebpo.integrations.trl.math_reward",
}


class GrpoParser(TrlParser):
    """TRL's parser whose errors are one line (``ebpo grpo: error: ...``) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)\n")


#: what ``ebpo grpo --help`` says above TRL's flags
DESCRIPTION = (
    "trl grpo with an ebpo estimator: TRL's own script and flags (GRPOConfig, ModelConfig, the "
    "datasets mixture, --config recipe.yaml) with EBPOConfig's fields added (advantage_estimator, "
    "estimator_options, data_order, ...). ebpo's own flag: --dry-run parses the arguments exactly as "
    "a run would, builds the trainer on this machine's CPU with a tiny local model and a few rows "
    "in place of the model and the data, prints what the run would do and stops (no GPU, no Hub). "
    "Recipes of the paper's methods: recipes/trl/README.md."
)


def make_parser(prog: str = "ebpo grpo") -> TrlParser:
    """``trl grpo``'s parser with :class:`EBPOConfig` in ``GRPOConfig``'s place."""
    types = (trl_grpo.GRPOScriptArguments, EBPOConfig, ModelConfig, DatasetMixtureConfig)
    return GrpoParser(types, prog=prog, description=DESCRIPTION)


def parse(argv: Sequence[str]) -> tuple[Any, EBPOConfig, Any, Any]:
    """The four argument objects of ``argv`` (flags and ``--config FILE``). Unknown flags or YAML
    keys are an error (ValueError naming them), as are unknown reward names, a ``--config`` file
    that cannot be read and one that is not YAML."""
    argv = list(argv)
    if "--config" in argv:  # TRL reads the file after the first --config and ignores any other
        index = argv.index("--config")
        if argv.count("--config") > 1 or index + 1 == len(argv):
            raise ValueError("--config takes one YAML file, given once")
        if not Path(argv[index + 1]).is_file():
            raise ValueError(f"--config {argv[index + 1]!r}: no such file")
    _refuse_a_preset_as_estimator(argv)
    try:
        script_args, training_args, model_args, dataset_args = make_parser().parse_args_and_config(
            args=argv, fail_with_unknown_args=True
        )
    except yaml.YAMLError as error:
        raise ValueError(f"--config: not valid YAML: {error}") from error
    script_args.reward_funcs = [REWARD_ALIASES.get(n, n) for n in script_args.reward_funcs or []]
    unknown = [n for n in script_args.reward_funcs if "." not in n and n not in TRL_REWARDS]
    if unknown:
        raise ValueError(
            f"reward_funcs: unknown name(s) {unknown}; expected one of "
            f"{sorted(TRL_REWARDS + tuple(REWARD_ALIASES))} or an import path (package.module.function)"
        )
    return script_args, training_args, model_args, dataset_args


def _refuse_a_preset_as_estimator(argv: Sequence[str]) -> None:
    """``advantage_estimator`` takes an estimator name; a preset (``dapo``, ``ebpo_batch``, ...) is
    trainer settings as well, which only :func:`make_config` applies. Given one, say so and write
    it out as the flags that reproduce it (the same keys work in the YAML)."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--advantage_estimator")
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(argv)
    name = known.advantage_estimator
    if name is None and known.config is not None:
        try:
            recipe = yaml.safe_load(Path(known.config).read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            return  # TRL's parser reports it
        name = recipe.get("advantage_estimator") if isinstance(recipe, dict) else None
    if not isinstance(name, str) or name in available_estimators():
        return
    if name in available_presets():
        raise ValueError(
            f"advantage_estimator {name!r} is a preset, not an estimator "
            f"({', '.join(available_estimators())}); a preset reaches the command line as its "
            f"settings written out: {shlex.join(preset_arguments(name))} (the same keys work in "
            "the YAML; docs/trl.md, Presets)"
        )


#: the names ``trl grpo``'s registry knows (TRL 1.16, ``trl/scripts/grpo.py``)
TRL_REWARDS: tuple[str, ...] = (
    "accuracy_reward",
    "reasoning_accuracy_reward",
    "think_format_reward",
    "get_soft_overlong_punishment",
)


@contextlib.contextmanager
def ebpo_trainer_in_trl() -> Iterator[None]:
    """``trl.GRPOTrainer`` is :class:`EBPOTrainer` inside the block (TRL's script imports the
    trainer from ``trl`` when it runs); the original is restored on exit."""
    original = trl.GRPOTrainer
    trl.GRPOTrainer = EBPOTrainer  # type: ignore[misc]
    try:
        yield
    finally:
        trl.GRPOTrainer = original  # type: ignore[misc]


def main(argv: Sequence[str]) -> int:
    """Parse ``argv`` as ``trl grpo`` would and run TRL's script with :class:`EBPOTrainer`."""
    script_args, training_args, model_args, dataset_args = parse(argv)
    with ebpo_trainer_in_trl():
        trl_grpo.main(script_args, training_args, model_args, dataset_args)
    return 0
