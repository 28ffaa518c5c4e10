"""The ``ebpo`` command line. Each subcommand lives in ``ebpo.commands.<name>`` and exposes
``add_parser(subparsers)``; the parser it adds carries ``func=run`` (a function of the parsed
arguments returning an exit code). Command modules import heavy libraries inside ``run`` only, so
``ebpo --help`` stays fast."""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = ("train", "eval", "simulate", "bench", "data", "verl", "demo")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ebpo", description="Empirical Bayes Policy Optimization for RLVR.")
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


if __name__ == "__main__":
    sys.exit(main())
