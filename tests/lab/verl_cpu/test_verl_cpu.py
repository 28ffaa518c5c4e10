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
    from ebpo.lab.verl_cpu.sampling import generation_seed

    seeds = {generation_seed(0, step, validate) for step in range(50) for validate in (0, 1)}
    assert len(seeds) == 100
    assert generation_seed(3, 7, False) == generation_seed(3, 7, False)


def test_contiguous_blocks():
    from ebpo.lab.verl_cpu.checks import contiguous_blocks

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


def test_the_curriculum_checks_take_a_step_in_any_row_order_but_not_another_batch(tmp_path):
    """verl's balance_batch reorders a step's rows by length: the checks must pass on any order
    inside a step and fail when a step trained on prompts of another batch."""
    from types import SimpleNamespace

    import pandas as pd

    from ebpo.integrations.verl.curriculum_sampler import CurriculumSampler
    from ebpo.lab.verl_cpu.checks import contiguous_blocks, curriculum_checks
    from ebpo.lab.verl_cpu.results import StepTrace

    topics = ["mul", "add", "sub", "add", "sub", "mul", "add", "mul"] * 2
    frame = pd.DataFrame({"extra_info": [{"id": i, "topic": t} for i, t in enumerate(topics)]})
    frame.to_parquet(tmp_path / "train.parquet")
    files = {"train.shuffle": str(tmp_path / "train.parquet")}
    sampler = CurriculumSampler(frame, order="topic", seed=0)
    order = [str(i) for i in sampler.indices(0)]  # the ids are the row numbers
    assert contiguous_blocks([topics[int(i)] for i in order])
    batches = [order[k * 4 : (k + 1) * 4] for k in range(4)]
    settings = SmokeSettings(work_dir=".", steps=4, save_step=2, batch_size=4)
    run = ESTIMATORS["ebpo_topic"]

    def result(steps):  # each prompt of a step twice (G = 2), in the given order
        return SimpleNamespace(
            trace=[
                StepTrace(0, None, None, None, prompt_ids=s + s, uids=["u"] * 2 * len(s))
                for s in steps
            ]
        )

    reordered = [list(reversed(b)) for b in batches]
    checks = curriculum_checks(settings, run, files, result(reordered), result(reordered[2:]))
    assert [c.ok for c in checks] == [True, True], checks

    swapped = [batches[0][:3] + batches[1][:1], batches[1][1:] + batches[0][3:], *batches[2:]]
    checks = curriculum_checks(settings, run, files, result(swapped), result(batches[:0:-1][:2]))
    assert [c.ok for c in checks] == [False, False], checks
