"""What every GPU test module shares: its markers (``gpu``; skipped, with the reason, where CUDA is
absent, so ``pytest -m gpu`` on a CPU machine reports them as skipped) and the CUDA device."""

from __future__ import annotations

import pytest
import torch

CUDA = torch.cuda.is_available()
#: bfloat16 arithmetic on this GPU (Ampere and newer)
BF16 = CUDA and torch.cuda.is_bf16_supported()

#: the marks of a module of tests/gpu: ``pytestmark = GPU``
GPU = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not CUDA,
        reason="needs a CUDA GPU (torch.cuda.is_available() is False); "
        "see docs/DEVELOPING.md, 'Tests on a GPU'",
    ),
]
needs_bf16 = pytest.mark.skipif(not BF16, reason="needs a GPU with bfloat16 support")
