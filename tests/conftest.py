"""Test-wide settings.

Hypothesis explores new random examples on every local run (that is how it finds edge cases);
under CI (``CI`` set) it derandomises, so that a landing is decided by the code, not by the draw.

Several worker processes (pytest-xdist; ``make test`` runs ``-n 2 --dist loadscope
--no-loadscope-reorder``): each test module goes to one worker as a whole, so a module-scoped
fixture (a training run, verl's ``fit()``, the kill-and-resume runs) is built once. Here:

* the cores are shared out: each worker, and every process its tests start, gets
  ``cores // workers`` torch intra-op threads (``OMP_NUM_THREADS``, unless already set) — two
  workers of two threads each on two cores wait on each other's threads and run slower than one;
* the modules holding a slow test are handed out first (in collection order otherwise), so that
  none of them starts last while the other worker has nothing left to do.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from types import ModuleType

import pytest
from hypothesis import settings

from ebpo.estimators import registry

# No per-example deadline: Hypothesis's 200 ms default is a wall-clock assertion, which a loaded
# 2-core CI (verl's actors starting on the other worker) breaks without any bug.
settings.register_profile("ebpo", deadline=None)
settings.register_profile("ci", derandomize=True, print_blob=True, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "ebpo")


def xdist_workers() -> int:
    """The number of xdist workers this process is one of (0: not a worker)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return 0
    return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


def pytest_configure(config: pytest.Config) -> None:
    workers = xdist_workers()
    if workers:
        threads = max(1, (os.cpu_count() or 1) // workers)
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        import torch  # heavy: imported here only in a worker, to apply the share before any test

        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def module_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not xdist_workers():
        return
    slow = {module_of(item) for item in items if item.get_closest_marker("slow")}
    # stable: every module stays in one piece, in its own order (the same in every worker)
    items.sort(key=lambda item: module_of(item) not in slow)


#: the user's estimators of ``ebpo docs estimators`` ("Your own estimator"), outside the package
USER_ESTIMATOR_MODULE = "tests.fixtures.user_estimator.my_estimator"


@pytest.fixture
def user_estimators(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The user's module imported afresh into a copy of the registry: its names (``running_mean``,
    ``group_centered``) exist during the test only, so no other test sees them."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    sys.modules.pop(USER_ESTIMATOR_MODULE, None)
    yield importlib.import_module(USER_ESTIMATOR_MODULE)
    sys.modules.pop(USER_ESTIMATOR_MODULE, None)
