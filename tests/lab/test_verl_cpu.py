"""The pieces of ``ebpo.lab.verl_cpu`` that need no Ray: settings checks, the CPU platform, the
sampling seeds, the topic-block test (the loop itself: tests/integrations/verl/test_verl_fit_cpu.py)."""

from __future__ import annotations

import os

import pytest

from ebpo.lab.verl_cpu.settings import ESTIMATORS, SmokeSettings

pytest.importorskip("verl")
pytestmark = pytest.mark.verl


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        (
            {"estimators": ("grpo",)},
            r"--estimator must be some of ebpo, jspo_plus_plus, ebpo_topic",
        ),
        ({"estimators": ()}, r"--estimator must be some of"),
        ({"steps": 0}, r"--steps must be a positive integer"),
        ({"group_size": 1}, r"--group-size"),
        ({"save_step": 4}, r"--save-step must be below --steps"),
        ({"train_size": 8}, r"--train-size must hold --steps × --batch-size = 16"),
    ],
)
def test_smoke_settings_refuse_bad_values(changes, match):
    with pytest.raises(ValueError, match=match):
        SmokeSettings(work_dir=".", **changes).check()


def test_smoke_settings_defaults_are_valid():
    SmokeSettings(work_dir=".", estimators=tuple(ESTIMATORS)).check()


def test_cpu_platform_is_registered_with_gloo_and_no_accelerator():
    from verl.plugin.platform.platform_manager import PlatformRegistry

    from ebpo.lab.verl_cpu.platform import PLATFORM_NAME, PlatformCPU

    assert PlatformRegistry.get(PLATFORM_NAME) is PlatformCPU
    platform = PlatformCPU()
    assert platform.device_name == "cpu"
    assert platform.communication_backend_name() == "gloo"
    assert platform.ray_resource_name() == "CPU" and platform.ray_resource_options(1.0) == {}
    assert not platform.is_platform_available(use_smi_check=True)  # never auto-selected


def test_generation_seed_depends_on_the_step_only():
    from ebpo.lab.verl_cpu.worker import generation_seed

    seeds = {generation_seed(0, step, validate) for step in range(50) for validate in (0, 1)}
    assert len(seeds) == 100
    assert generation_seed(3, 7, False) == generation_seed(3, 7, False)


def test_contiguous_blocks():
    from ebpo.lab.verl_cpu.smoke import contiguous_blocks

    assert contiguous_blocks(["add", "add", "mul", "sub", "sub"])
    assert not contiguous_blocks(["add", "mul", "add"])


def test_cpu_platform_is_put_back_after_the_block(monkeypatch):
    """The smoke switches the driver to the CPU platform; verl code running later in the same
    process (e.g. a dry run's auto_set_device) must see the platform it would have seen."""
    from verl.plugin.platform.platform_manager import get_platform

    from ebpo.lab.verl_cpu.platform import PLATFORM_NAME, PlatformCPU, cpu_platform

    monkeypatch.delenv("VERL_PLATFORM", raising=False)
    before = get_platform()
    with cpu_platform() as platform:
        assert isinstance(platform, PlatformCPU) and get_platform() is platform
        assert os.environ["VERL_PLATFORM"] == PLATFORM_NAME
    assert get_platform() is before and "VERL_PLATFORM" not in os.environ
