"""ebpo.utils.runtime.torch_threads: the thread count inside the block, restored after it (also
when the block raises), and refused arguments."""

from __future__ import annotations

import logging

import pytest
import torch

from ebpo.utils.runtime import quiet_logger, torch_threads


@pytest.fixture(autouse=True)
def three_threads():
    """Start every test from 3 threads (not 1, so that setting 1 is visible), restore afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    yield
    torch.set_num_threads(before)


def test_sets_the_count_inside_and_restores_it_after():
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 3


def test_restores_the_count_when_the_block_raises():
    with pytest.raises(RuntimeError, match="boom"), torch_threads(2):
        assert torch.get_num_threads() == 2
        raise RuntimeError("boom")
    assert torch.get_num_threads() == 3


def test_none_and_the_current_count_leave_the_setting_alone():
    with torch_threads(None):
        assert torch.get_num_threads() == 3
    with torch_threads(3):
        assert torch.get_num_threads() == 3
    assert torch.get_num_threads() == 3


def test_nested_blocks_restore_in_order():
    with torch_threads(1):
        with torch_threads(2):
            assert torch.get_num_threads() == 2
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 3


@pytest.mark.parametrize("count", [0, -1, 1.5, True, "2"])
def test_a_bad_count_is_refused_before_anything_changes(count):
    with (
        pytest.raises(ValueError, match=r"count must be a positive integer, got "),
        torch_threads(count),
    ):
        pytest.fail("the block must not run")  # pragma: no cover
    assert torch.get_num_threads() == 3


def test_quiet_logger_keeps_only_the_level_asked_for_and_restores_the_logger(caplog):
    log = logging.getLogger("ebpo.tests.quiet")
    log.setLevel(logging.INFO)
    with caplog.at_level(logging.INFO, logger="ebpo.tests.quiet"):
        with quiet_logger("ebpo.tests.quiet", logging.ERROR):
            log.warning("dropped")
            log.error("kept")
        log.warning("after")
    assert [r.getMessage() for r in caplog.records] == ["kept", "after"]
    assert log.level == logging.INFO
