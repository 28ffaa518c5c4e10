"""Under TRL 1.15 without triton (``make test-compat``'s trl-1.15 leg), TRL's own GRPOTrainer
cannot train (:mod:`tests.compat.trl_kernels`): the tests that train through it (marker ``trl``)
are skipped with that reason.

Also the check that a run resumed inside a generation batch is the uninterrupted run
(:func:`assert_resume_continues_the_run`), shared by the resume tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.compat.trl_kernels import REASON, trl_lacks_its_kernel


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not trl_lacks_its_kernel():
        return
    for item in items:
        if item.get_closest_marker("trl") and "integrations/trl/" in item.nodeid:
            item.add_marker(pytest.mark.skip(reason=REASON))


def assert_resume_continues_the_run(full: Any, resumed: Any, checkpoint: Path) -> None:
    """Train ``resumed`` (an EBPOTrainer built as ``full`` was) from ``checkpoint``, taken after
    micro-step 2 of the first of ``full``'s two generation batches: it generates only the second
    batch (the first is replayed from the checkpoint), trains micro-steps 2.. on the same
    advantages bit for bit, and ends with ``full``'s estimator state and policy."""
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert len(resumed.outputs) == 1  # the buffered batch was replayed, only the second generated
    assert resumed.estimator.state_dict() == full.estimator.state_dict()
    assert len(resumed.loss_advantages) == len(full.loss_advantages) - 2
    for theirs, ours in zip(full.loss_advantages[2:], resumed.loss_advantages, strict=True):
        assert torch.equal(theirs, ours)
    for (name, a), (_, b) in zip(
        full.model.named_parameters(), resumed.model.named_parameters(), strict=True
    ):
        torch.testing.assert_close(a, b, msg=name)
