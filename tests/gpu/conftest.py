"""The GPU tests (``make test-gpu``). cuBLAS reads its workspace setting when it starts, so the
setting that deterministic algorithms need (what ``full_determinism=True`` asks for) is given
before any test touches the GPU."""

from __future__ import annotations

import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
