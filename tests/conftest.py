"""Test-wide settings.

Hypothesis explores new random examples on every local run (that is how it finds edge cases);
under CI (``CI`` set) it derandomises, so that a landing is decided by the code, not by the draw.
"""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
