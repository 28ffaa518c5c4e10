"""Length shaping: DAPO's soft overlong punishment, a term added to the task reward that depends
only on the response length in tokens."""

from __future__ import annotations

__all__ = ["overlong_penalty"]


def overlong_penalty(
    length: int, *, max_length: int, buffer_length: int, penalty_factor: float = 1.0
) -> float:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), added to the task reward:

        0                                   if L <= L_max - L_cache
        ((L_max - L_cache) - L) / L_cache   if L_max - L_cache < L <= L_max
        -1                                  if L > L_max

    times ``penalty_factor`` (verl: ``overlong_buffer.penalty_factor``). ``length`` is the
    response length in tokens, ``max_length`` = L_max, ``buffer_length`` = L_cache."""
    if buffer_length <= 0 or buffer_length > max_length:
        raise ValueError(
            f"buffer_length must be in (0, max_length={max_length}], got {buffer_length!r}"
        )
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length!r}")
    expected = max_length - buffer_length
    if length <= expected:
        return 0.0
    if length > max_length:
        return -1.0 * penalty_factor
    return (expected - length) / buffer_length * penalty_factor
