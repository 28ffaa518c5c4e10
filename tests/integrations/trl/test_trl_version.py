"""The TRL version checks made when EBPOTrainer is imported (:mod:`ebpo.integrations.trl.trl_version`):
nothing inside the supported range, one warning line outside it (before any name of TRL is
imported), one refusal where a method EBPOTrainer overrides is gone."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import warnings

import pytest

pytest.importorskip("trl")

from trl import GRPOTrainer  # noqa: E402

from ebpo.integrations.supported_versions import SUPPORTED  # noqa: E402
from ebpo.integrations.trl.save_and_resume import CheckpointingMixin  # noqa: E402
from ebpo.integrations.trl.trainer import EBPOTrainerMixin  # noqa: E402
from ebpo.integrations.trl.trl_version import (  # noqa: E402
    OVERRIDDEN_METHODS,
    UnsupportedTRLWarning,
    check_trl,
    installed_trl,
    warn_outside_range,
)


def test_the_installed_trl_is_a_supported_one_and_passes_silently() -> None:
    import trl

    assert installed_trl() == trl.__version__
    assert SUPPORTED["trl"].contains(trl.__version__)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_outside_range(trl.__version__)
        check_trl(trl.__version__, GRPOTrainer)


def test_the_list_of_overrides_is_every_grpo_trainer_method_we_replace() -> None:
    ours = {
        name
        for cls in (EBPOTrainerMixin, CheckpointingMixin)
        for name, value in vars(cls).items()
        if callable(value) and hasattr(GRPOTrainer, name)
    }
    assert set(OVERRIDDEN_METHODS) == ours


@pytest.mark.parametrize("version", ["1.9.0", "1.17.0", "0.29.0"])
def test_a_trl_outside_the_range_warns_naming_it_and_the_range(version: str) -> None:
    with pytest.warns(
        UnsupportedTRLWarning,
        match=rf"supports trl 1\.10\.0–1\.16\.0; trl {re.escape(version)} is installed "
        r"\(pip install 'trl==1\.16\.0' for a supported one\)",
    ):
        warn_outside_range(version)


@pytest.mark.parametrize("version", ["1.10.0", "1.13.0", "1.14.2", "1.15.0", "1.16.0", "1.16.1"])
def test_every_release_of_the_range_passes_silently(version: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_outside_range(version)


@pytest.mark.parametrize("gone", ["_generate_and_score_completions", "_save_checkpoint"])
def test_a_missing_overridden_method_is_refused_by_name(gone: str) -> None:
    stripped = type("OldGRPOTrainer", (), {n: None for n in OVERRIDDEN_METHODS if n != gone})
    with pytest.raises(
        ImportError,
        match=rf"trl 0\.9: its GRPOTrainer has no {gone} .*supports trl 1\.10\.0–1\.16\.0",
    ):
        check_trl("0.9", stripped)


@pytest.mark.parametrize("version", ["1.9.0", "1.17.0"])
def test_importing_the_trainer_under_a_trl_outside_the_range_prints_one_line(version: str) -> None:
    # the release is read from TRL's metadata, before any name of TRL is imported
    script = textwrap.dedent(
        f"""
        from importlib import metadata
        real = metadata.version
        metadata.version = lambda name: "{version}" if name == "trl" else real(name)
        from ebpo.integrations.trl import EBPOTrainer
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if "trl" in line]
    assert len(lines) == 1, done.stderr
    assert f"supports trl 1.10.0–1.16.0; trl {version} is installed" in lines[0]
