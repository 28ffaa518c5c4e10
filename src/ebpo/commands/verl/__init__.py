"""``ebpo verl``: run EBPO at cluster scale on verl (Ray + FSDP + vLLM) through the plug-in.

    ebpo verl doctor [--address HOST:PORT]    check that verl sees the plug-in (on every Ray node)
    ebpo verl [run] [--dry-run] OVERRIDES...  verl's PPO entry point with the plug-in and our defaults
    ebpo verl recipe NAME [--dry-run] [OVERRIDES...]   the paper's runs (--list to see them)
    ebpo verl prepare-data --out-dir DIR      DAPO-Math-17K + eval sets as verl parquet files
    ebpo verl smoke [--all] [--trainer legacy] [--steps N]
                                              verl's default path (main_ppo, v1 trainer) on CPU
                                              with ebpo inside; prints the `ebpo replay` command

OVERRIDES are Hydra overrides of ``verl/trainer/config/ppo_trainer.yaml``; EBPO's options go under
``algorithm.ebpo`` with a ``+``, e.g. ``+algorithm.ebpo.prior=ema +algorithm.ebpo.half_life=20``.
"""

from __future__ import annotations

import argparse
import difflib
import sys

from ebpo.commands import Parser, one_line, user_error
from ebpo.commands.verl import launcher
from ebpo.commands.verl.address import check_reachable, cluster_address
from ebpo.commands.verl.doctor import SMOKE_HINT, run_checks, run_node_checks
from ebpo.commands.verl.prepare_data import add_arguments, run_prepare
from ebpo.commands.verl.smoke import run_smoke_command, smoke_parser
from ebpo.integrations.verl.recipes import PAPER, RECIPES, recipe_overrides

SUBCOMMANDS = ("doctor", "run", "recipe", "prepare-data", "smoke")


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "verl",
        help="run EBPO on verl (doctor, run, recipe, prepare-data, smoke)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # The `run` flags are also accepted here so that `ebpo verl --dry-run OVERRIDES` works
    # (argparse's REMAINDER cannot start with an option).
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="compose and validate the config on CPU, do not train",
    )
    parser.add_argument(
        "--no-defaults", action="store_true", help="do not add ebpo's default overrides"
    )
    parser.add_argument(
        "--print-config", action="store_true", help="with --dry-run: print the composed YAML"
    )
    parser.add_argument(
        "rest", nargs=argparse.REMAINDER, help="subcommand and its arguments, or Hydra overrides"
    )
    parser.set_defaults(func=run)
    return parser


# ---------------------------------------------------------------------- sub-parsers
def _doctor_parser() -> argparse.ArgumentParser:
    p = Parser(prog="ebpo verl doctor", description="Check that verl registers ebpo's estimators.")
    p.add_argument(
        "--no-fresh-process", action="store_true", help="skip the fresh-interpreter probe (faster)"
    )
    p.add_argument(
        "--address",
        default=None,
        help="a Ray cluster: its head node's GCS address HOST:PORT (as `ray start --head` prints "
        "it), or auto (RAY_ADDRESS, else the cluster `ray start` started here): check that every "
        "node registers ebpo's estimators on `import verl` (verl's TaskRunner lands on any of "
        "them); an address where no Ray cluster answers is refused in one line",
    )
    return p


def _run_parser() -> argparse.ArgumentParser:
    p = Parser(prog="ebpo verl run", description="Run verl.trainer.main_ppo with the plug-in.")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="compose and validate the config on CPU, do not train",
    )
    p.add_argument("--no-defaults", action="store_true", help="do not add ebpo's default overrides")
    p.add_argument(
        "--print-config", action="store_true", help="with --dry-run: print the composed YAML"
    )
    return p


def _recipe_parser() -> argparse.ArgumentParser:
    p = Parser(prog="ebpo verl recipe", description="Reproduce one of the paper's verl runs.")
    p.add_argument("name", nargs="?", help="recipe name (see --list)")
    p.add_argument("--list", action="store_true", help="list the recipes")
    p.add_argument(
        "--dry-run", action="store_true", help="compose and validate the full config on CPU"
    )
    p.add_argument(
        "--print", action="store_true", dest="print_command", help="print the command line and exit"
    )
    p.add_argument(
        "--print-config", action="store_true", help="with --dry-run: print the composed YAML"
    )
    p.add_argument(
        "--data-dir",
        default="data/ebpo",
        help="where `ebpo verl prepare-data` wrote the parquet files",
    )
    p.add_argument(
        "--model", default=None, help="HF model id or path (default: the paper's Qwen/Qwen3-8B)"
    )
    p.add_argument("--experiment", default=None, help="trainer.experiment_name")
    return p  # anything else on the line is an extra Hydra override (wins over the recipe)


def _prepare_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="ebpo verl prepare-data",
        description="Write DAPO-Math-17K and the evaluation sets as verl parquet files.",
    )
    add_arguments(p)
    return p


# ---------------------------------------------------------------------- dispatch
def run(args: argparse.Namespace) -> int:
    rest = list(args.rest or [])
    if rest and rest[0] == "--":
        rest = rest[1:]
    flags = [
        f
        for f, on in (
            ("--dry-run", args.dry_run),
            ("--no-defaults", args.no_defaults),
            ("--print-config", args.print_config),
        )
        if on
    ]
    if not rest and not flags or rest[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0 if rest else 2
    if rest and rest[0] not in SUBCOMMANDS:
        _refuse_unknown_subcommand(rest[0])
    command = rest[0] if rest and rest[0] in SUBCOMMANDS else "run"
    argv = (rest[1:] if rest and rest[0] in SUBCOMMANDS else rest) + flags
    try:
        if command == "doctor":
            return _doctor(_doctor_parser().parse_args(argv))
        if command == "recipe":
            return _recipe(*_recipe_parser().parse_known_args(argv))
        if command == "prepare-data":
            return run_prepare(_prepare_parser().parse_args(argv))
        if command == "smoke":
            return run_smoke_command(smoke_parser().parse_args(argv))
        return _run(*_run_parser().parse_known_args(argv))
    except ValueError as error:
        return user_error(f"ebpo verl {command}", error)
    except (launcher.PluginUnavailable, launcher.LaunchCheckFailed) as error:  # exit 1: not argv
        print(f"ebpo verl {command}: {one_line(error)}", file=sys.stderr)
        return 1


def _refuse_unknown_subcommand(word: str) -> None:
    """``ebpo verl docter``: a first word that is neither a subcommand nor a Hydra override (no
    ``=``, no ``-``/``+``/``~`` prefix) is a typo — refuse it instead of launching a run with it."""
    if "=" in word or word.startswith(("-", "+", "~")):
        return
    guess = difflib.get_close_matches(word, SUBCOMMANDS, n=1)
    hint = f"; did you mean {guess[0]!r}?" if guess else ""
    raise ValueError(
        f"unknown subcommand {word!r}{hint} (expected one of {', '.join(SUBCOMMANDS)}, or Hydra overrides key=value)"
    )


def _overrides(extra: list[str]) -> list[str]:
    """Hydra overrides among the arguments argparse did not recognise (``--`` separators dropped)."""
    unknown = [a for a in extra if a.startswith("-") and a != "--"]
    if unknown:
        raise ValueError(f"unknown option(s) {unknown}; Hydra overrides look like key=value")
    return [a for a in extra if a != "--"]


def _doctor(args: argparse.Namespace) -> int:
    if args.address is not None:  # before anything slow: ray.init hangs on a wrong address
        check_reachable(args.address, "--address")
    print(
        "ebpo verl doctor: checking the verl plug-in in a fresh interpreter "
        "(it imports verl: 12–35 s measured on 2 cores, the longer on a busy machine)...",
        flush=True,
    )
    checks = run_checks(fresh_process=not args.no_fresh_process and args.address is None)
    if args.address is not None:
        checks += run_node_checks(cluster_address(args.address) or args.address)
    failed = False
    for check in checks:
        mark = "ok  " if check.ok else ("FAIL" if check.fatal else "warn")
        failed |= not check.ok and check.fatal
        first, *more = check.detail.splitlines() or [""]
        print(f"[{mark}] {check.name}: {first}")
        for line in more:
            print(f"       {line}")
    broken = [check for check in checks if not check.ok and check.fatal]
    if broken:
        worst = broken[0]
        print(f"verl plug-in is BROKEN: {worst.name}: {(worst.detail.splitlines() or [''])[-1]}")
    else:
        print("verl plug-in OK")
    if not failed:
        print(SMOKE_HINT)
    return 1 if failed else 0


def _dry_run(overrides: list[str], print_config: bool) -> int:
    from omegaconf import OmegaConf  # optional heavy dependency (verl extra)

    # ebpo's own keys first (a typo under algorithm.ebpo, a bad value, a combination the plug-in
    # refuses): in ebpo's words, before verl's validation complains about anything else
    launcher.check_overrides(overrides)
    try:
        config, notes = launcher.dry_run(overrides)
    except ValueError:  # an invalid configuration (bad override included): a user error, exit 2
        raise
    except Exception as error:  # verl failing on a configuration nothing refused: exit 1, one line
        print(f"dry run FAILED: {type(error).__name__}: {one_line(error)}", file=sys.stderr)
        return 1
    if print_config:
        print(OmegaConf.to_yaml(config))
    for note in notes:
        print(note)
    print(
        f"dry run OK: adv_estimator={config.algorithm.adv_estimator}, {len(overrides)} overrides composed and validated"
    )
    return 0


def _run(args: argparse.Namespace, extra: list[str]) -> int:
    overrides = _overrides(extra)
    if args.dry_run:
        full = (
            overrides
            if args.no_defaults
            else launcher.with_defaults(overrides, plugin_via_env=not launcher.entry_point_active())
        )
        return _dry_run(full, args.print_config)
    return launcher.run(overrides, defaults=not args.no_defaults)


def _recipe(args: argparse.Namespace, extra: list[str]) -> int:
    if args.list:
        for recipe in RECIPES.values():
            print(f"{recipe.name:14s} {recipe.description} [data order: {recipe.order}]")
        return 0
    if not args.name:
        raise ValueError(f"NAME: expected a recipe's name, one of {', '.join(RECIPES)} "
                         "(ebpo verl recipe --list says what each runs)")  # fmt: skip
    overrides = recipe_overrides(
        args.name,
        data_dir=args.data_dir,
        model=args.model or PAPER["model"],
        experiment=args.experiment,
        extra=_overrides(extra),
    )
    if args.print_command:
        print(
            " \\\n  ".join(["python -m verl.trainer.main_ppo", *launcher.with_defaults(overrides)])
        )
        return 0
    if args.dry_run:
        return _dry_run(
            launcher.with_defaults(overrides, plugin_via_env=not launcher.entry_point_active()),
            args.print_config,
        )
    return launcher.run(overrides)
