"""The ``ebpo verl`` command-line tests need verl (an optional extra): skipped without it."""

from __future__ import annotations

import pytest

pytest.importorskip("verl")
