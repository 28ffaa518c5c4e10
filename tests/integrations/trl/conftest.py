"""Under TRL 1.15 without triton (``make test-compat``'s trl-1.15 leg), TRL's own GRPOTrainer
cannot train (:mod:`tests.compat.trl_kernels`): the tests that train through it (marker ``trl``)
are skipped with that reason."""

from __future__ import annotations

import pytest

from tests.compat.trl_kernels import REASON, trl_lacks_its_kernel


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not trl_lacks_its_kernel():
        return
    for item in items:
        if item.get_closest_marker("trl") and "integrations/trl/" in item.nodeid:
            item.add_marker(pytest.mark.skip(reason=REASON))
