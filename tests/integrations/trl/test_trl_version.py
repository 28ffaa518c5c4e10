"""The TRL version check made when EBPOTrainer is imported (:mod:`ebpo.integrations.trl.trl_version`):
one warning line under an untested TRL, one refusal where a method EBPOTrainer overrides is gone."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import pytest

pytest.importorskip("trl")

from trl import GRPOTrainer  # noqa: E402

from ebpo.integrations.trl.save_and_resume import CheckpointingMixin  # noqa: E402
from ebpo.integrations.trl.trainer import EBPOTrainerMixin  # noqa: E402
from ebpo.integrations.trl.trl_version import (  # noqa: E402
    OVERRIDDEN_METHODS,
    TESTED_TRL,
    UntestedTRLWarning,
    check_trl,
)


def test_the_installed_trl_is_a_tested_one_and_passes_silently() -> None:
    import trl

    assert trl.__version__ in TESTED_TRL  # the trl extra pins 1.16.0; make test-unsloth has 1.15.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_trl(trl.__version__, GRPOTrainer)


def test_the_list_of_overrides_is_every_grpo_trainer_method_we_replace() -> None:
    ours = {
        name
        for cls in (EBPOTrainerMixin, CheckpointingMixin)
        for name, value in vars(cls).items()
        if callable(value) and hasattr(GRPOTrainer, name)
    }
    assert set(OVERRIDDEN_METHODS) == ours


def test_another_trl_version_warns_naming_the_tested_ones() -> None:
    with pytest.warns(
        UntestedTRLWarning,
        match=r"tested with trl 1\.15\.0 and 1\.16\.0; trl 1\.14\.0 is installed "
        r"\(pip install 'trl==1\.16\.0' for a tested one\)",
    ):
        check_trl("1.14.0", GRPOTrainer)


@pytest.mark.parametrize("version", ["1.15.0", "1.16.0"])
def test_both_tested_versions_pass_silently(version: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_trl(version, GRPOTrainer)


@pytest.mark.parametrize("gone", ["_generate_and_score_completions", "_save_checkpoint"])
def test_a_missing_overridden_method_is_refused_by_name(gone: str) -> None:
    stripped = type("OldGRPOTrainer", (), {n: None for n in OVERRIDDEN_METHODS if n != gone})
    with pytest.raises(ImportError, match=rf"trl 0\.9: its GRPOTrainer has no {gone} "):
        check_trl("0.9", stripped)


def test_importing_the_trainer_under_another_trl_prints_one_line() -> None:
    script = textwrap.dedent(
        """
        import trl
        trl.__version__ = "1.15.2"
        from ebpo.integrations.trl import EBPOTrainer
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if "EBPOTrainer" in line]
    assert len(lines) == 1 and "trl 1.15.2 is installed" in lines[0], done.stderr
    assert "tested with trl 1.15.0 and 1.16.0" in lines[0]
