"""The ``ebpo`` subcommands, one module each (``add_parser(subparsers)`` and ``run(args)``), and
the error helpers they share with :mod:`ebpo.cli`: a user error is one line on stderr and exit
code 2.

=============  ==================================================================
module         command
=============  ==================================================================
``train``      ``ebpo train``: the main job (:mod:`ebpo.lab.train.job`)
``grpo``       ``ebpo grpo``: ``trl grpo`` + an estimator (:mod:`ebpo.commands.grpo.grpo_script`)
``eval``       ``ebpo eval``: Pass@k on math benchmarks (:mod:`ebpo.evaluation`)
``simulate``   ``ebpo simulate``: simulated experiments (:mod:`ebpo.lab.simulation`)
``bench``      ``ebpo bench``: the paired comparison of estimators (:mod:`ebpo.lab.bench.run`)
``data``       ``ebpo data``: curriculum labels and orders (:mod:`ebpo.curriculum`)
``verl``       ``ebpo verl``: the verl plug-in (:mod:`ebpo.integrations.verl`), ``smoke`` (:mod:`ebpo.lab.verl_cpu`)
``demo``       ``ebpo demo``: EBPO and GRPO advantages on a simulated batch
``replay``     ``ebpo replay``: a finished run's rewards through every estimator (:mod:`ebpo.analysis.replay`)
``compare``    ``ebpo compare``: estimators against a baseline, paired by seed (:mod:`ebpo.analysis.compare`)
=============  ==================================================================
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

__all__ = ["Parser", "one_line", "user_error"]


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
