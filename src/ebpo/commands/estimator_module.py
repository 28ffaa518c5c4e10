"""``--estimator-module``: the flag of ``ebpo replay``, ``ebpo bench`` and ``ebpo simulate`` that
imports a user's module registering estimators (``@ebpo.register_estimator("mine")``) before any
name is read, so that ``--estimators mine`` works. ``ebpo grpo`` takes the same as
``--estimator_module`` (an ``EBPOConfig`` field, so a YAML key too)."""

from __future__ import annotations

import argparse

from ebpo.estimators import import_estimator_modules

__all__ = ["add_estimator_module_argument", "import_estimator_module_of"]


def add_estimator_module_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--estimator-module",
        default=None,
        metavar="MODULE",
        help="import this module (my_pkg.my_est) or .py file first: the estimators it registers "
        "with @ebpo.register_estimator(name) can then be named (several: comma-separated)",
    )


def import_estimator_module_of(args: argparse.Namespace) -> None:
    """Import ``args.estimator_module`` (ValueError, one line: it cannot be imported)."""
    try:
        import_estimator_modules(args.estimator_module)
    except ValueError as error:
        raise ValueError(f"--estimator-module: {error}") from None
