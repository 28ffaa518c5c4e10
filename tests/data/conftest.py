"""Shared by the tests of ebpo.data: the dataset fixture files and an offline hub."""

from __future__ import annotations

from pathlib import Path

import pytest

#: One file per registered dataset, in its hub schema, plus ``unified`` (the unified schema).
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "datasets"


def fixture(name: str) -> Path:
    """The fixture file of dataset ``name`` (whatever its suffix)."""
    (path,) = [p for p in FIXTURES.iterdir() if p.stem == name]
    return path


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # huggingface_hub and datasets read the variable once, at import; another test may have
    # imported them before it was set, so set their constants too.
    import datasets
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
