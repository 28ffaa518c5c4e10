"""``ebpo docs [PAGE]``: the project's pages, printed wherever ebpo is installed. A wheel user has
no checkout to open them in, so every help text and message names ``ebpo docs PAGE``.

The pages travel in the wheel as data files (installed under ``<prefix>/share/ebpo/docs``); in a
checkout (an editable install) they are read where they are.
"""

from __future__ import annotations

import argparse
import site
import sys
from pathlib import Path
from typing import Any

import ebpo

__all__ = ["PAGES", "add_parser", "page_path", "run"]

#: page name -> (its file, relative to the repository root and to the installed docs folder; what it covers)
PAGES: dict[str, tuple[str, str]] = {
    "readme": ("README.md", "start here: set-up, quick answers for TRL, verl and researchers"),
    "trl": ("docs/trl.md", "ebpo grpo, EBPOTrainer, presets, resume, metrics, several GPUs"),
    "unsloth": ("docs/unsloth.md", "EBPO on Unsloth's GRPO: one changed import, caveats"),
    "verl": (
        "recipes/verl/README.md",
        "the verl plug-in, main_ppo keys, clusters, ebpo verl smoke",
    ),
    "estimators": ("docs/estimators.md", "every estimator and named variant, formulas, options"),
    "compare": ("docs/compare.md", "ebpo compare: paired differences over seeds, the verdict"),
    "replay": ("docs/replay.md", "ebpo replay: your run's rewards through every estimator"),
    "lab": ("docs/lab.md", "the CPU lab: ebpo train, bench, simulate, demo"),
    "results": ("docs/results.md", "what we measured, with its limits; timings"),
    "simulation": ("docs/simulation.md", "ebpo simulate: the theory tested without a model"),
    "toolkit": ("docs/toolkit.md", "math reward, datasets, ebpo eval, curriculum labels"),
    "changelog": ("CHANGELOG.md", "what changed in each version"),
}


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "docs",
        help="print one of the project's pages (no PAGE: list them)",
        description=__doc__,
    )
    parser.add_argument("page", nargs="?", choices=sorted(PAGES), help="the page to print")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.page is None:
        for name, (_, covers) in PAGES.items():
            print(f"{name:12s} {covers}")
        return 0
    print(page_path(args.page).read_text(encoding="utf-8"), end="")
    return 0


def page_path(page: str) -> Path:
    """Where ``page`` is on this machine: the checkout's file (editable install), else the one
    the wheel installed under ``<prefix>/share/ebpo/docs``. ValueError when neither exists."""
    relative = PAGES[page][0]
    checkout = Path(ebpo.__file__).resolve().parents[2]
    prefixes = [Path(sys.prefix), Path(site.getuserbase())]
    for candidate in [checkout / relative, *(p / "share/ebpo/docs" / relative for p in prefixes)]:
        if candidate.is_file():
            return candidate
    raise ValueError(f"page {page!r} ({relative}) is not installed here; reinstall the ebpo wheel")
