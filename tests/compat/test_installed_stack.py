"""Each leg of ``make test-compat`` runs the releases its requirements file pins (the Makefile
names the leg in ``EBPO_COMPAT_LEG``), and inside the supported range importing the TRL
integration says nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata

import pytest

from ebpo.integrations.supported_versions import COMPAT_LEGS, release_tuple

LEG = os.environ.get("EBPO_COMPAT_LEG")

pytestmark = pytest.mark.skipif(not LEG, reason="make test-compat names its leg (EBPO_COMPAT_LEG)")


def test_the_leg_runs_the_releases_it_pins() -> None:
    assert LEG in COMPAT_LEGS
    installed = {package: metadata.version(package) for package in COMPAT_LEGS[LEG]}
    assert {p: release_tuple(v) for p, v in installed.items()} == {
        p: release_tuple(v) for p, v in COMPAT_LEGS[str(LEG)].items()
    }, installed


def test_importing_the_trl_integration_inside_the_range_says_nothing() -> None:
    if "trl" not in COMPAT_LEGS[str(LEG)]:
        pytest.skip("a leg without trl")
    done = subprocess.run(
        [sys.executable, "-W", "always", "-c", "import ebpo.integrations.trl"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "supports trl" not in done.stderr, done.stderr
