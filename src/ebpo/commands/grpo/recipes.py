"""``ebpo grpo recipe`` and ``ebpo grpo prepare-data``: the shipped TRL recipes
(:mod:`ebpo.integrations.trl.recipes`) listed, printed and prepared for, and ``--config NAME``
resolved to a shipped recipe where no file of that name exists.

    ebpo grpo recipe --list                       the recipes, one line each
    ebpo grpo recipe qwen3-1.7b/ebpo_batch        print one (the YAML ``--config`` reads)
    ebpo grpo recipe --readme                     every choice the recipes make, and why
    ebpo grpo prepare-data [--out-dir DIR] ...    the data they read (DAPO-Math-17K, AIME 2024)
    ebpo grpo --config qwen3-1.7b/ebpo_batch --dry-run
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ebpo.commands import Parser
from ebpo.commands.verl.prepare_data import add_arguments, run_prepare
from ebpo.integrations.trl.recipes import (
    readme_text,
    recipe_description,
    recipe_names,
    recipe_path,
)

__all__ = ["SUBCOMMANDS", "resolve_config_name", "run_subcommand"]

#: the words after ``ebpo grpo`` that are ebpo's own commands (TRL's parser takes no positional)
SUBCOMMANDS = ("recipe", "prepare-data")

#: the training orders the recipes read: ``dataset_name: DATA_DIR/trl/<order>``
TRL_ORDERS = ("file", "shuffle")


def run_subcommand(argv: Sequence[str]) -> int:
    """``ebpo grpo recipe ...`` or ``ebpo grpo prepare-data ...`` (``argv[0]`` names which)."""
    command, rest = argv[0], list(argv[1:])
    if command == "recipe":
        return _recipe(_recipe_parser().parse_args(rest))
    return _prepare(_prepare_parser().parse_args(rest))


def resolve_config_name(argv: Sequence[str]) -> list[str]:
    """``argv`` with ``--config NAME`` (or ``--config=NAME``) replaced by the file it names: a file
    here wins (``NAME`` itself, or ``NAME.yaml`` where a shipped recipe is also called ``NAME``),
    else the shipped recipe called ``NAME`` (``.yaml`` optional); a line on stderr says which file
    it used unless ``NAME`` is that file. Anything else is left as it is (the recipe check names a
    missing file). ValueError for a ``--config`` without a value, or with an empty one."""
    out: list[str] = []
    tokens = list(argv)
    for index, token in enumerate(tokens):
        name, equals, value = token.partition("=")
        if name == "--config" and equals:
            out.append(f"--config={_resolved(value)}")
        elif token == "--config" and index == len(tokens) - 1:
            raise ValueError(f"--config is the last word on the line: {_EXPECTED} after it")
        elif index > 0 and tokens[index - 1] == "--config":
            out.append(_resolved(token))
        else:
            out.append(token)
    return out


#: what --config takes
_EXPECTED = "expected a YAML file or a shipped recipe's name (ebpo grpo recipe --list)"


def _resolved(value: str) -> str:
    if not value.strip():
        raise ValueError(f"--config {value!r}: the value is empty; {_EXPECTED}")
    if os.path.lexists(value):
        return value
    shipped = recipe_path(value)
    if shipped is None:
        return value
    local = f"{value}.yaml"
    if os.path.lexists(local):  # the user's copy of the recipe, beside them
        print(f"ebpo grpo: --config {value}: your file {local} (a file here wins over the "
              "shipped recipe of that name)", file=sys.stderr)  # fmt: skip
        return local
    print(f"ebpo grpo: --config {value}: the shipped recipe {shipped}", file=sys.stderr)
    return str(shipped)


def _recipe_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="ebpo grpo recipe",
        description="The TRL recipes shipped with ebpo: the paper's seven methods for two models. "
        "Run one with `ebpo grpo --config NAME` (add --dry-run to check it on any CPU).",
    )
    p.add_argument("name", nargs="?", help="a recipe's name, e.g. qwen3-1.7b/ebpo_batch (--list)")
    p.add_argument("--list", action="store_true", help="list the recipes")
    p.add_argument(
        "--print", action="store_true", dest="print_recipe", help="print NAME's YAML (the default)"
    )
    p.add_argument(
        "--readme", action="store_true", help="print the recipes' README (every choice, and why)"
    )
    return p


def _recipe(args: argparse.Namespace) -> int:
    if args.readme:
        print(readme_text(), end="")
        return 0
    if args.list:
        for name in recipe_names():
            print(f"{name:28s} {recipe_description(name)}")
        return 0
    if not args.name:
        raise ValueError(f"NAME: expected a recipe's name such as {recipe_names()[0]} (ebpo grpo "
                         f"recipe --list names all {len(recipe_names())}), or --list or --readme")  # fmt: skip
    path = recipe_path(args.name)
    if path is None:
        raise ValueError(
            f"no shipped recipe {args.name!r}; expected one of {recipe_names()} "
            "(ebpo grpo recipe --list)"
        )
    print(path.read_text(encoding="utf-8"), end="")
    return 0


def _prepare_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="ebpo grpo prepare-data",
        description="The data of the TRL recipes: `ebpo verl prepare-data` (it needs no verl) "
        "writes DAPO-Math-17K and the evaluation sets as parquet files into --out-dir, then each "
        "training order the recipes read gets a folder TRL's script loads as it is "
        "(dataset_name: OUT_DIR/trl/<order>): train.parquet and test.parquet (AIME 2024), "
        "symbolic links to the prepared files.",
    )
    add_arguments(p)
    return p


def _prepare(args: argparse.Namespace) -> int:
    if "aime-2024" not in args.eval:
        raise ValueError(
            "--eval must keep aime-2024: the recipes validate on it (dataset_test_split: test)"
        )
    links = {}
    for order in TRL_ORDERS:
        links[f"trl/{order}/train.parquet"] = f"../../dapo_math_17k.{order}.parquet"
        links[f"trl/{order}/test.parquet"] = "../../aime24.parquet"
    run_prepare(args, links)  # every path checked before the first write, the links last
    for order in TRL_ORDERS:
        print(
            f"wrote {Path(args.out_dir) / 'trl' / order}: train.parquet -> "
            f"dapo_math_17k.{order}.parquet, test.parquet -> aime24.parquet"
        )
    return 0
