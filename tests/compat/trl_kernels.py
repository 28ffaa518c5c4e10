"""TRL 1.15 on a machine without triton: its ``GRPOTrainer`` computes log-probabilities with a
triton kernel (``trl.kernels.ChunkedLogProbFunction``) that it imports only where triton is
installed, and then calls it anyway (``None.apply``): TRL's own trainer cannot train there.
tests/compat/test_trl_1_15.py shows it; the TRL training tests skip with :data:`REASON`."""

from __future__ import annotations

import importlib.util
from importlib import metadata

from ebpo.integrations.supported_versions import release_tuple

REASON = (
    "trl 1.15 calls a triton kernel for log-probabilities that it could not import (triton is not "
    "installed beside the CPU build of torch): TRL's own GRPOTrainer fails here "
    "(tests/compat/test_trl_1_15.py)"
)


def trl_lacks_its_kernel() -> bool:
    """Whether the installed TRL is a 1.15 release and triton is absent."""
    try:
        version = metadata.version("trl")
    except metadata.PackageNotFoundError:
        return False
    return release_tuple(version)[:2] == (1, 15) and importlib.util.find_spec("triton") is None
