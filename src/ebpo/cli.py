"""The ``ebpo`` command line. Each subcommand lives in ``ebpo.commands.<name>`` and exposes
``add_parser(subparsers)``; the parser it adds carries ``func=run`` (a function of the parsed
arguments returning an exit code).

A command's module is imported only when that command runs (or its ``--help`` is asked):
``ebpo --help`` lists the commands from :data:`COMMANDS` without importing any of them, so it
stays fast, and a missing optional extra (trl, verl, ...) fails only the commands that need it,
with one line naming the extra (``ebpo train needs the trl extra: pip install 'ebpo[trl]'``,
exit code 2).

User errors end in one line on stderr and exit code 2: a bad option (argparse) or any
``ValueError`` a command raises — the project's convention for bad input is a ValueError naming
the argument and what was expected. ``EBPO_DEBUG=1`` re-raises instead, with the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from ebpo import __version__
from ebpo.commands import Parser, user_error

__all__ = ["COMMANDS", "build_parser", "main", "missing_extra"]

#: command -> its one-line summary in ``ebpo --help`` (the ``help=`` its module's parser gives)
COMMANDS: dict[str, str] = {
    "train": "RL-train a causal LM with an ebpo estimator (no arguments: the built-in CPU default)",
    "grpo": "trl grpo with an ebpo estimator: TRL's flags and YAML configs + --advantage_estimator "
    "(--dry-run: check a recipe on CPU)",
    "eval": "Pass@k evaluation on math benchmarks",
    "simulate": "simulated experiments: baseline quality, saturated failure, bandit learning",
    "bench": "paired comparison of estimators with real token-level RL: paired differences with intervals",
    "data": "label data with topics / difficulty and sort it into curriculum orders",
    "verl": "run EBPO on verl (doctor, run, recipe, prepare-data, smoke)",
    "demo": "compare EBPO and GRPO advantages on a simulated batch (no model, seconds)",
    "replay": "replay a finished run's rewards through every estimator: would EBPO have helped?",
    "compare": "compare estimators on your finished runs: paired seeds, differences with intervals",
    "docs": "print one of the project's pages (no PAGE: list them)",
}

#: top-level module of an optional dependency -> the extra of pyproject.toml that installs it
MODULE_EXTRAS: dict[str, str] = {
    "trl": "trl",
    "accelerate": "trl",
    "tensorboard": "trl",
    "gguf": "trl",
    "verl": "verl",
    "hydra": "verl",
    "omegaconf": "verl",
    "ray": "verl",
    "matplotlib": "plot",
    "math_verify": "rewards",
    "datasets": "data",
    "pyarrow": "data",
    "pandas": "data",
    "sklearn": "cluster",
    "umap": "embed",
    "sentence_transformers": "embed",
}
#: the extra that brings ``transformers`` (several do) for each command that needs it
TRANSFORMERS_EXTRA: dict[str, str] = {
    "train": "trl",
    "grpo": "trl",
    "bench": "trl",
    "eval": "trl",
    "verl": "verl",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``ebpo`` parser. Only ``command``'s module is imported and adds its real parser; every
    other command is a placeholder carrying its summary (enough for ``ebpo --help`` and for
    argparse's "invalid choice" message). Raises ModuleNotFoundError when ``command``'s module
    needs a package that is not installed."""
    parser = Parser(prog="ebpo", description="Empirical Bayes Policy Optimization for RLVR.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, summary in COMMANDS.items():
        if name == command:
            importlib.import_module(f"ebpo.commands.{name}").add_parser(subparsers)
        else:
            subparsers.add_parser(name, help=summary, add_help=False)
    return parser


def missing_extra(command: str | None, error: ModuleNotFoundError) -> str | None:
    """The extra that installs the module ``error`` misses, or None when it is not an optional
    dependency (then the error is a bug, not a missing extra)."""
    module = (error.name or "").split(".")[0]
    if module == "transformers":
        return TRANSFORMERS_EXTRA.get(command or "", "trl")
    return MODULE_EXTRAS.get(module)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = _command_word(argv)
    try:
        parser = build_parser(command)
    except ModuleNotFoundError as error:
        return _needs_extra(command, error)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except ModuleNotFoundError as error:
        return _needs_extra(getattr(args, "command", None), error)
    except ValueError as error:
        if os.environ.get("EBPO_DEBUG"):
            raise
        return user_error(_command_prog(args), error)


def _command_word(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names: its first positional word (``ebpo`` itself has only flags)."""
    for index, word in enumerate(argv):
        if word == "--":
            word = argv[index + 1] if index + 1 < len(argv) else ""
        elif word.startswith("-"):
            continue
        return word if word in COMMANDS else None
    return None


def _needs_extra(command: str | None, error: ModuleNotFoundError) -> int:
    """``ebpo train needs the trl extra: pip install 'ebpo[trl]'`` on stderr, exit code 2; any
    other missing module (or ``EBPO_DEBUG=1``) re-raises."""
    extra = missing_extra(command, error)
    if extra is None or os.environ.get("EBPO_DEBUG"):
        raise error
    print(f"ebpo {command} needs the {extra} extra: pip install 'ebpo[{extra}]'", file=sys.stderr)
    return 2


def _command_prog(args: argparse.Namespace) -> str:
    words = ["ebpo", getattr(args, "command", None), getattr(args, "data_command", None)]
    return " ".join(w for w in words if w)


if __name__ == "__main__":
    sys.exit(main())
