"""verl before 0.9 (no plug-in entry points): ``VERL_USE_EXTERNAL_MODULES`` registers ebpo's
estimators when verl is imported, and only then; ``make test-compat``'s verl-0.8 leg runs this, and
verl's own ``compute_advantage`` giving the core's numbers (tests/integrations/verl/
test_verl_advantage.py) in a process started with that variable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata

import pytest

pytest.importorskip("verl")

from ebpo.integrations.supported_versions import release_tuple  # noqa: E402
from ebpo.integrations.verl.advantage import FUNCTIONS  # noqa: E402

pytestmark = pytest.mark.skipif(
    release_tuple(metadata.version("verl")) >= (0, 9, 0),
    reason="verl >= 0.9 loads the plug-in by its entry point (tests/integrations/verl)",
)

REGISTRY = (
    "import json, verl; from verl.trainer.ppo import core_algos; "
    "print(json.dumps(sorted(core_algos.ADV_ESTIMATOR_REGISTRY)))"
)


def registry(**env: str) -> set[str]:
    """The names in verl's estimator registry once ``import verl`` ran, in a fresh process."""
    environ = {k: v for k, v in os.environ.items() if k != "VERL_USE_EXTERNAL_MODULES"}
    done = subprocess.run(
        [sys.executable, "-c", REGISTRY],
        capture_output=True,
        text=True,
        timeout=300,
        env={**environ, **env},
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_verl_use_external_modules_registers_every_estimator_of_the_plugin() -> None:
    assert not set(FUNCTIONS) & registry()  # no entry point here: nothing without the variable
    assert set(FUNCTIONS) <= registry(VERL_USE_EXTERNAL_MODULES="ebpo.integrations.verl.plugin")
