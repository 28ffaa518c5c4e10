"""The core's shape (issue 51, item 6): following ``ebpo.make_estimator("ebpo")(rewards, groups)``
to the advantages runs code in few files — the registry, the algorithm, the contract and the math,
plus the input and option checks. A new layer of indirection on that path fails here."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

import ebpo

SRC = Path(ebpo.__file__).resolve().parent

#: the files whose code runs, and what each does there
EXPECTED = {
    "estimators/registry.py": "make_estimator: the name to the class",
    "estimators/ebpo.py": "the algorithm: running prior, shrinkage, baseline",
    "estimators/base.py": "the contract: input to Batch, _compute, result",
    "estimators/functional.py": "the math: group moments, shrinkage, normalisation, metrics",
    "estimators/validation.py": "converts and checks the rewards and group ids",
    "utils/checks.py": "checks the constructor's option values",
}


def files_run(call) -> set[str]:
    """The files of src/ebpo with a Python frame during ``call()``."""
    seen: set[str] = set()

    def tracer(frame, event, arg):
        path = Path(frame.f_code.co_filename)
        if path.is_relative_to(SRC):
            seen.add(path.relative_to(SRC).as_posix())
        return None  # no line events: a call event per frame is enough

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        call()
    finally:
        sys.settrace(previous)
    return seen


def test_ebpo_advantages_are_computed_in_six_files():
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    groups = torch.tensor([0, 0, 1, 1, 2, 2])
    seen = files_run(lambda: ebpo.make_estimator("ebpo")(rewards, groups).advantages)
    assert seen == set(EXPECTED), sorted(seen)
