"""Pieces every experiment of the simulation shares: independent seeded random streams, the
optional progress bar, the group-size check and the zero-signal test."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

__all__ = [
    "SIGNAL_TOL",
    "check_group_size",
    "progress_bar",
    "seeded_generator",
    "zero_signal_frac",
]

#: |advantage| below this counts as no signal. Centring a constant vector leaves rounding residue
#: of ~1e-17, which dividing by (std + eps) inflates to ~1e-11: that is not a signal.
SIGNAL_TOL = 1e-9


def seeded_generator(seed: int, *stream: int) -> torch.Generator:
    """An independent, reproducible torch generator for ``(seed, stream...)``."""
    state = np.random.SeedSequence([int(seed) & 0xFFFFFFFF, *stream]).generate_state(
        2, dtype=np.uint32
    )
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


def progress_bar(items: Sequence[Any], enabled: bool, desc: str) -> Iterable[Any]:
    """``items`` wrapped in a transient tqdm bar when ``enabled``, else ``items`` itself."""
    if not enabled:
        return items
    return tqdm(items, desc=desc, leave=False)


def check_group_size(g: Any) -> None:
    """ValueError unless ``g`` is an integer >= 2 (a group needs two responses to compare)."""
    if isinstance(g, bool) or not isinstance(g, (int, np.integer)) or g < 2:
        raise ValueError(f"group_size must be an integer >= 2, got {g!r}")


def zero_signal_frac(advantages: torch.Tensor) -> float:
    """Fraction of groups (rows of ``[M, G]``) whose advantages are all below :data:`SIGNAL_TOL`."""
    return float((advantages.abs() <= SIGNAL_TOL).all(-1).double().mean())
