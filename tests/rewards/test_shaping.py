"""ebpo.rewards.shaping: DAPO's soft overlong punishment."""

from __future__ import annotations

import pytest

from ebpo.rewards import overlong_penalty


def _overlong_reference(length, max_length, buffer_length, factor):
    if length <= max_length - buffer_length:
        return 0.0
    if length <= max_length:
        return factor * ((max_length - buffer_length) - length) / buffer_length
    return -factor


def test_overlong_penalty_matches_dapo_formula():
    for length in range(0, 130, 3):
        for factor in (1.0, 0.5):
            got = overlong_penalty(length, max_length=100, buffer_length=40, penalty_factor=factor)
            assert got == pytest.approx(_overlong_reference(length, 100, 40, factor))
    assert overlong_penalty(100, max_length=100, buffer_length=40) == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="buffer_length"):
        overlong_penalty(5, max_length=10, buffer_length=20)
