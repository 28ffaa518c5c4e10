"""`ebpo verl doctor` confirms the registration, and says so loudly when verl would not load it."""

from __future__ import annotations

import pytest

from ebpo.commands.verl.doctor import run_checks
from ebpo.integrations.verl.advantage import plugin_names

pytestmark = pytest.mark.verl


def test_doctor_passes_on_this_install():
    checks = run_checks(fresh_process=False)
    assert [c.name for c in checks] == [
        "verl version",
        "entry point",
        "compute_advantage(dr_grpo, ebpo, ebpo_bb, grpo_bn, jspo, jspo_plus_plus, krpo, reinforce_pp_baseline, spo)",
        "checkpoint callback",
    ]
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]


@pytest.mark.parametrize("policy", ["none", "someone_else"])
def test_doctor_fails_when_verl_would_skip_the_entry_point(monkeypatch, capsys, policy):
    from ebpo.cli import main

    monkeypatch.setenv("VERL_USE_EXTERNAL_PLUGINS", policy)
    entry = {c.name: c for c in run_checks(fresh_process=False)}["entry point"]
    assert not entry.ok and "VERL_USE_EXTERNAL_PLUGINS" in entry.detail
    assert main(["verl", "doctor", "--no-fresh-process"]) == 1
    assert "BROKEN" in capsys.readouterr().out


def test_doctor_fails_when_the_entry_point_is_missing(monkeypatch):
    import ebpo.commands.verl.doctor as doctor

    monkeypatch.setattr(doctor, "entry_points", lambda group: [])
    entry = {c.name: c for c in doctor.run_checks(fresh_process=False)}["entry point"]
    assert not entry.ok and "reinstall" in entry.detail


@pytest.mark.slow
def test_doctor_fresh_interpreter_probe():
    checks = {c.name: c for c in run_checks(fresh_process=True)}
    probe = checks["fresh `import verl` registers"]
    assert probe.ok and probe.detail == ", ".join(sorted(plugin_names()))


def test_doctor_points_to_the_cpu_smoke_when_healthy(capsys):
    """After its checks pass, the doctor names the deeper check: verl's own loop on CPU."""
    from ebpo.cli import main
    from ebpo.commands.verl.doctor import SMOKE_HINT

    assert main(["verl", "doctor", "--no-fresh-process"]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith(SMOKE_HINT) and "ebpo verl smoke" in SMOKE_HINT
