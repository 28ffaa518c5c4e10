"""The ``ebpo`` command line. Each subcommand lives in ``ebpo.commands.<name>`` and exposes
``add_parser(subparsers)``; the parser it adds carries ``func=run`` (a function of the parsed
arguments returning an exit code). Command modules import heavy libraries inside ``run`` only, so
``ebpo --help`` stays fast.

User errors end in one line on stderr and exit code 2: a bad option (argparse) or any
``ValueError`` a command raises — the project's convention for bad input is a ValueError naming
the argument and what was expected. ``EBPO_DEBUG=1`` re-raises instead, with the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import NoReturn

COMMANDS = ("train", "eval", "simulate", "bench", "data", "verl", "demo")


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (``ebpo train: error: ...``), exit code 2.
    Subcommand parsers inherit it (``add_subparsers`` uses the parent's class)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


def one_line(message: object) -> str:
    """``message`` with its line breaks folded, so an error is one line of a terminal or log."""
    return " ".join(str(message).split())


def user_error(prog: str, error: BaseException) -> int:
    """Print ``prog: error: ...`` on one line to stderr and return 2."""
    print(f"{prog}: error: {one_line(error) or type(error).__name__}", file=sys.stderr)
    return 2


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="ebpo", description="Empirical Bayes Policy Optimization for RLVR.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"ebpo.commands.{name}")
        except ModuleNotFoundError as error:
            if error.name == f"ebpo.commands.{name}":
                continue  # command not shipped in this version
            raise
        module.add_parser(subparsers)
    return parser


def _version() -> str:
    from ebpo import __version__

    return __version__


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except ValueError as error:
        if os.environ.get("EBPO_DEBUG"):
            raise
        return user_error(_command_prog(args), error)


def _command_prog(args: argparse.Namespace) -> str:
    words = ["ebpo", getattr(args, "command", None), getattr(args, "data_command", None)]
    return " ".join(w for w in words if w)


if __name__ == "__main__":
    sys.exit(main())
