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

import argparse
import contextlib
import functools
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn, cast

import datasets
import trl
import yaml
from trl import DatasetMixtureConfig, ModelConfig, TrlParser
from trl.scripts import grpo as trl_grpo

from ebpo.commands.grpo.launcher import (
    accelerator_count,
    die_with_launcher,
    holds_output_dir,
    launch,
    launcher_arguments,
    plan,
    process_counts,
    script_arguments,
)
from ebpo.commands.grpo.output_dir import (
    check_output_dir,
    clear_interrupted_saves,
    remove_stale_temporaries,
)
from ebpo.commands.grpo.recipe_file import check_recipe_file
from ebpo.commands.grpo.this_machine import RECIPE_KEYS, cpu_parse_flags, this_machine_line
from ebpo.integrations.trl.config import EBPOConfig
from ebpo.integrations.trl.trainer import EBPOTrainer
from ebpo.utils.run_lock import check_not_in_use, lock_run_dir
from ebpo.utils.structured_input import read_yaml_file

__all__ = [
    "REWARD_ALIASES",
    "describe_launch",
    "check_splits",
    "check_this_machine",
    "config_source",
    "ebpo_trainer_in_trl",
    "main",
    "make_parser",
    "parse",
    "parse_here",
    "parse_run",
    "recipe_values",
    "splits_checked",
    "split_config_flag",
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
        parser = cast(argparse.ArgumentParser, self)  # TrlParser is Any to mypy (trl unfollowed)
        parser.exit(
            2, f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)\n"
        )


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
    "no Hub). RECIPES of the paper's methods ship with ebpo: --config NAME runs one (ebpo grpo recipe --list, "
    "--readme for why each setting); ebpo grpo prepare-data writes their data. Details: ebpo docs trl."
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
    argv = split_config_flag(argv)
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
    source = config_source(argv, "the config file")
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
    training_args.resume_from_checkpoint = resume_value(training_args.resume_from_checkpoint)
    arguments = (script_args, training_args, model_args, dataset_args)
    return arguments, launch_args, script_arguments(argv, cli_rest)


def resume_value(value: Any) -> Any:
    """``resume_from_checkpoint`` as transformers' ``Trainer.train`` takes it: the command line
    gives a string, so ``true`` / ``false`` there (no path of that name existing) mean what
    ``true`` / ``false`` mean in a YAML file: the newest checkpoint of ``output_dir``, no resume."""
    if isinstance(value, str) and value.lower() in ("true", "false") and not Path(value).exists():
        return value.lower() == "true" or None
    return None if value is False else value


def split_config_flag(argv: Sequence[str]) -> list[str]:
    """``argv`` with ``--config=FILE`` written as ``--config FILE``, the only form TRL's parser
    looks for (it would take ``--config=FILE`` for an unknown flag)."""
    out: list[str] = []
    for token in argv:
        name, has_value, value = token.partition("=")
        out += [name, value] if name == "--config" and has_value else [token]
    return out


def config_source(argv: Sequence[str], default: str) -> str:
    """The ``--config`` file of ``argv`` (either spelling), or ``default`` when there is none."""
    argv = split_config_flag(argv)
    index = argv.index("--config") if "--config" in argv else -1
    return argv[index + 1] if 0 <= index < len(argv) - 1 else default


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
    trl.GRPOTrainer = EBPOTrainer
    try:
        yield
    finally:
        trl.GRPOTrainer = original


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


def recipe_values(argv: Sequence[str], names: Sequence[str]) -> dict[str, Any]:
    """The values of ``names`` that TRL's parser gives ``argv`` (its ``--config`` file as the
    defaults, the command line over them), read before any config class is built (whose
    ``__post_init__`` may refuse them on this machine)."""
    argv = split_config_flag(argv)
    parser = make_parser()
    if "--config" in argv[:-1]:  # a --config without a file: parse_run says so
        index = argv.index("--config")
        path = argv[index + 1]
        argv = argv[:index] + argv[index + 2 :]
        check_recipe_file(path, PARSER_TYPES)
        recipe = read_yaml_file(path, f"--config {path!r}")
        recipe.pop("env", None)
        parser.set_defaults_with_config(**recipe)
    namespace, _ = parser.parse_known_args(argv)
    return {name: getattr(namespace, name, None) for name in names}


def parse_here(
    argv: Sequence[str],
) -> tuple[tuple[Any, EBPOConfig, Any, Any], list[str], list[str], str | None]:
    """:func:`parse_run` of ``argv`` as this machine can parse it (a GPU recipe with
    ``use_cpu`` added where there is no GPU, :func:`.this_machine.cpu_parse_flags`; the script's
    argv without those flags), and :func:`.this_machine.this_machine_line`: what to set for a run
    here, or None."""
    values = recipe_values(argv, RECIPE_KEYS)
    added = cpu_parse_flags(values)
    arguments, launch_args, script_argv = parse_run([*argv, *added])
    line = this_machine_line(values, launch_args)
    return arguments, launch_args, script_argv[: -len(added)], line


def describe_launch(argv: Sequence[str]) -> tuple[str, int]:
    """The line ``ebpo grpo --dry-run`` prints about the processes ``argv`` would start, and how
    many processes that launch has (1 without a launch)."""
    _, launch_args, script_argv, _ = parse_here(argv)
    planned = plan(launch_args, script_argv)
    if planned is None:
        return (
            "  launch      on this machine: one process, this one (no launcher key, nothing to launch)",
            1,
        )
    counts, _ = process_counts(planned.args)
    processes = counts.get("num_processes") or max(1, accelerator_count())
    many = f"{processes} process{'es' if processes > 1 else ''}"
    return f"  launch      on this machine: {planned.command()} ({many})", processes


def check_this_machine(argv: Sequence[str]) -> None:
    """Raise ValueError (one line, :func:`.this_machine.this_machine_line`) unless ``argv`` runs
    on this machine as it is."""
    line = parse_here(argv)[3]
    if line is not None:
        raise ValueError(line)


def main(argv: Sequence[str]) -> int:
    """Parse ``argv`` as ``trl grpo`` would; launch it as ``trl grpo`` would (launcher keys and
    flags, :mod:`.launcher`), or, for one plain process, run TRL's script with :class:`EBPOTrainer`
    here. The exit code of the run.

    Before anything loads: a recipe this machine cannot run as it is stops with the line naming
    what to set (:mod:`.this_machine`), and ``output_dir`` is checked (:mod:`.output_dir`), here
    and in every launched process. The process that holds ``output_dir``
    (:func:`.launcher.holds_output_dir`: this one, not the processes it launches) holds its lock
    (:mod:`ebpo.utils.run_lock`) for the whole run, launch included: another run on it is refused,
    naming the holder's pid. A launched process dies with its launcher
    (:func:`.launcher.die_with_launcher`)."""
    die_with_launcher()
    check_this_machine(argv)
    arguments, launch_args, script_argv = parse_run(argv)
    config = arguments[1]
    holds = holds_output_dir()
    if holds:
        check_not_in_use(Path(config.output_dir))  # refused before anything is touched
    check_output_dir(config.output_dir, config.resume_from_checkpoint)
    planned = plan(launch_args, script_argv)
    with contextlib.ExitStack() as held:
        if holds:
            held.enter_context(lock_run_dir(Path(config.output_dir)))
            # again under the lock: a run that ended between the first check and the lock
            check_output_dir(config.output_dir, config.resume_from_checkpoint)
            _tidy_output_dir(config.output_dir, config.resume_from_checkpoint)
        if planned is not None:
            return launch(planned)
        with ebpo_trainer_in_trl(), splits_checked(arguments[0], arguments[1]):
            trl_grpo.main(*arguments)
    return 0


def _tidy_output_dir(output_dir: str, resume_from_checkpoint: Any) -> None:
    """What a run that holds ``output_dir`` removes before it starts: a plain run, the interrupted
    saves of a run killed before its first complete checkpoint (it starts again from step 0); any
    run, our own temporary files a kill left (:mod:`.output_dir`)."""
    if resume_from_checkpoint in (None, False, ""):
        clear_interrupted_saves(output_dir, say=lambda line: print(line, file=sys.stderr))
    remove_stale_temporaries(output_dir)
