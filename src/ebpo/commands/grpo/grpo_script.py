"""``ebpo grpo``: TRL's own ``trl grpo`` script, training with :class:`EBPOTrainer` and
:class:`EBPOConfig` instead of ``GRPOTrainer`` and ``GRPOConfig``.

The parser is TRL's ``TrlParser`` over the same four dataclasses as ``trl grpo``
(``GRPOScriptArguments``, the config, ``ModelConfig``, ``DatasetMixtureConfig``), with
``EBPOConfig`` — GRPOConfig plus ``advantage_estimator`` / ``estimator_options`` /
``cluster_column`` — in the config's place. So every GRPOConfig and ModelConfig flag and
``--config recipe.yaml`` work unchanged, and a YAML written for ``trl grpo`` runs here unchanged
(with EBPO, the default estimator; ``--advantage_estimator grpo`` is TRL's GRPO,
:mod:`.estimator_settings`). What TRL's parser does not know is a launcher key, handed to
``accelerate launch`` as ``trl grpo`` does (:func:`parse_run`, :mod:`.launcher`).

The training itself is TRL's ``trl.scripts.grpo.main``, not a copy: reward functions by TRL's
registry names or by import path, model loading, the dataset mixture, PEFT (``--use_peft``),
``resume_from_checkpoint`` and saving are TRL's code. ``main`` imports ``GRPOTrainer`` from ``trl``
when it runs and takes no trainer class, so :func:`ebpo_trainer_in_trl` swaps ``trl.GRPOTrainer``
for :class:`EBPOTrainer` for the duration of the call (restored afterwards, also on error). That
swap is the one thing repeated around TRL's script; ours is the reward-name alias table
:data:`REWARD_ALIASES`, rewritten to import paths before TRL's registry sees them.

``ebpo grpo --dry-run`` (:mod:`ebpo.commands.grpo.dry_run`) parses with :func:`parse` too and
runs the same ``main`` up to the trainer's construction, on a tiny local model.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NoReturn

import datasets
import trl
import yaml
from trl import DatasetMixtureConfig, ModelConfig, TrlParser
from trl.scripts import grpo as trl_grpo

from ebpo.commands.grpo.launcher import launch, launcher_arguments, plan, script_arguments
from ebpo.commands.grpo.output_dir import check_output_dir
from ebpo.commands.grpo.recipe_file import check_recipe_file
from ebpo.integrations.trl.config import EBPOConfig
from ebpo.integrations.trl.trainer import EBPOTrainer

__all__ = [
    "REWARD_ALIASES",
    "describe_launch",
    "check_splits",
    "ebpo_trainer_in_trl",
    "main",
    "make_parser",
    "parse",
    "parse_run",
    "splits_checked",
    "splits_read",
]

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
    "trl grpo with an ebpo estimator: TRL's own script, flags and YAML configs (GRPOConfig, "
    "ModelConfig, the datasets mixture, --config recipe.yaml) with EBPOConfig's fields added. "
    "ESTIMATOR: the default is --advantage_estimator ebpo (the paper's Algorithm 1: running history "
    "prior, batch normalisation); --advantage_estimator grpo is exactly TRL's GRPO (TRL's "
    "std + 1e-4, every scale_rewards and loss_type, equal logs on the same seed). It also takes "
    "every named variant (ebpo_batch = the authors' batch prior, ebpo_within, ebpo_ema, "
    "reinforce_pp, ...) and scale_rewards keeps TRL's meaning (none with ebpo: centred, no std "
    "division; a setting the estimator cannot honour is an error). LAUNCHER: keys and flags of "
    "accelerate launch (num_processes, multi_gpu, config_file, ..., TRL's accelerate_config: a file "
    "or a TRL profile: single_gpu, multi_gpu, zero1-3, fsdp1, fsdp2) launch the processes as trl grpo does; on CPUs, "
    "num_processes: N starts N processes (gloo). DRY RUN: ebpo's own flag --dry-run parses the arguments "
    "exactly as a run would, builds the trainer on this machine's CPU with a tiny local model and a "
    "few rows in place of the model and the data, prints what the run would do and stops (no GPU, "
    "no Hub). Recipes of the paper's methods: recipes/trl/README.md; details: docs/trl.md."
)


#: the dataclasses of ``trl grpo``'s parser, with EBPOConfig in GRPOConfig's place
PARSER_TYPES = (trl_grpo.GRPOScriptArguments, EBPOConfig, ModelConfig, DatasetMixtureConfig)


def make_parser(prog: str = "ebpo grpo") -> TrlParser:
    """``trl grpo``'s parser with :class:`EBPOConfig` in ``GRPOConfig``'s place."""
    return GrpoParser(PARSER_TYPES, prog=prog, description=DESCRIPTION)


def parse(argv: Sequence[str]) -> tuple[Any, EBPOConfig, Any, Any]:
    """The four argument objects of ``argv`` (flags and ``--config FILE``); launcher keys are
    checked and left out (:func:`parse_run`)."""
    return parse_run(argv)[0]


def parse_run(argv: Sequence[str]) -> tuple[tuple[Any, EBPOConfig, Any, Any], list[str], list[str]]:
    """``(the four argument objects, accelerate launch arguments, the script's argv)`` of ``argv``,
    split as ``trl grpo`` splits them: what TRL's parser does not know is an ``accelerate launch``
    option (:mod:`.launcher`). Flags or YAML keys that are neither are an error (ValueError naming
    them), as are unknown reward names, a ``--config`` file that cannot be read and one that is
    not YAML."""
    argv = list(argv)
    if "--config" in argv:  # TRL reads the file after the first --config and ignores any other
        index = argv.index("--config")
        if argv.count("--config") > 1 or index + 1 == len(argv):
            raise ValueError("--config takes one YAML file, given once")
        check_recipe_file(argv[index + 1], PARSER_TYPES)  # before TRL's parser reads it
    try:
        *arguments, config_rest, cli_rest = make_parser().parse_args_and_config(
            args=argv, return_remaining_strings=True, separate_remaining_strings=True
        )
    except yaml.YAMLError as error:
        raise ValueError(f"--config: not valid YAML: {error}") from error
    source = argv[argv.index("--config") + 1] if "--config" in argv else "the config file"
    launch_args = launcher_arguments(config_rest, cli_rest, source)
    script_args, training_args, model_args, dataset_args = arguments
    names = script_args.reward_funcs or []
    if isinstance(names, str):  # `reward_funcs: math_reward` in a YAML: one name, not its letters
        names = [names]
    script_args.reward_funcs = [REWARD_ALIASES.get(n, n) for n in names]
    unknown = [n for n in script_args.reward_funcs if "." not in n and n not in TRL_REWARDS]
    if unknown:
        raise ValueError(
            f"reward_funcs: unknown name(s) {unknown}; expected one of "
            f"{sorted(TRL_REWARDS + tuple(REWARD_ALIASES))} or an import path (package.module.function)"
        )
    arguments = (script_args, training_args, model_args, dataset_args)
    return arguments, launch_args, script_arguments(argv, cli_rest)


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


def splits_read(script_args: Any, training_args: EBPOConfig) -> list[str]:
    """The splits TRL's script takes from the loaded data: ``dataset_train_split``, and
    ``dataset_test_split`` when it evaluates (``eval_strategy`` is not ``"no"``)."""
    evaluates = getattr(training_args.eval_strategy, "value", training_args.eval_strategy) != "no"
    splits = [script_args.dataset_train_split]
    if evaluates:
        splits.append(script_args.dataset_test_split)
    return list(dict.fromkeys(splits))


def check_splits(data: Mapping[str, Any], needed: Sequence[str], source: str) -> None:
    """Raises ValueError (one line naming the missing splits and the ones ``data`` has) unless
    ``data`` holds every split in ``needed``."""
    missing = [split for split in needed if split not in data]
    if missing:
        raise ValueError(
            f"{source}: no split {missing} (dataset_train_split / dataset_test_split); "
            f"its splits are {sorted(data)}"
        )


@contextlib.contextmanager
def splits_checked(script_args: Any, training_args: EBPOConfig) -> Iterator[None]:
    """TRL's script loads the data (``trl.get_dataset`` or ``datasets.load_dataset``) and then
    indexes the splits it reads, a ``KeyError`` traceback when one is missing. Inside the block
    both loaders check :func:`splits_read` first (:func:`check_splits`): one line, before the
    model is loaded. Restored on exit."""
    needed = splits_read(script_args, training_args)
    source = script_args.dataset_name or "the dataset mixture (datasets:)"

    def checked(load: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(load)
        def load_and_check(*args: Any, **kwargs: Any) -> Any:
            data = load(*args, **kwargs)
            if isinstance(data, (datasets.DatasetDict, datasets.IterableDatasetDict)):
                check_splits(data, needed, source)
            return data

        return load_and_check

    originals = (trl.get_dataset, datasets.load_dataset)
    trl.get_dataset, datasets.load_dataset = (checked(load) for load in originals)
    try:
        yield
    finally:
        trl.get_dataset, datasets.load_dataset = originals


#: what the dry run adds to parse a GPU recipe on a CPU
DRY_RUN_CPU = ("--use_cpu", "true")


def describe_launch(argv: Sequence[str]) -> str:
    """The line ``ebpo grpo --dry-run`` prints about the processes ``argv`` would start."""
    # parsed on this CPU as the dry run parses (a bf16 recipe is refused without use_cpu)
    _, launch_args, script_argv = parse_run([*argv, *DRY_RUN_CPU])
    planned = plan(launch_args, script_argv[: -len(DRY_RUN_CPU)])
    return "  launch      on this machine: " + (
        planned.command()
        if planned
        else "one process, this one (no launcher key, nothing to launch)"
    )


def main(argv: Sequence[str]) -> int:
    """Parse ``argv`` as ``trl grpo`` would; launch it as ``trl grpo`` would (launcher keys and
    flags, :mod:`.launcher`), or, for one plain process, run TRL's script with :class:`EBPOTrainer`
    here. The exit code of the run. ``output_dir`` is checked first (:mod:`.output_dir`), here and
    in every launched process."""
    arguments, launch_args, script_argv = parse_run(argv)
    check_output_dir(arguments[1].output_dir, arguments[1].resume_from_checkpoint)
    planned = plan(launch_args, script_argv)
    if planned is not None:
        return launch(planned)
    with ebpo_trainer_in_trl(), splits_checked(arguments[0], arguments[1]):
        trl_grpo.main(*arguments)
    return 0
