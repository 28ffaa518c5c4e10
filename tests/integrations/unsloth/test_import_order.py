"""``ebpo.integrations.unsloth`` imported before ``unsloth``: one line saying to import unsloth
first (no unsloth needed: the check comes before anything is imported)."""

from __future__ import annotations

import subprocess
import sys


def test_importing_before_unsloth_is_one_line_saying_so():
    done = subprocess.run(
        [sys.executable, "-c", "import ebpo.integrations.unsloth"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: ebpo.integrations.unsloth: import unsloth first")
    assert "import unsloth` before this import" in last
