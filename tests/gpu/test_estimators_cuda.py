"""Every estimator name on CUDA rewards gives the CPU's advantages, baselines,
shrinkage and running state, with its output on the rewards' device and in their dtype (bfloat16
included), over three batches (so the running statistics of the stateful ones act)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from ebpo.estimators import available_estimators, make_estimator
from tests.gpu.cuda import GPU, needs_bf16

pytestmark = GPU

G, GROUPS, STEPS = 4, 8, 3


def batches() -> list[dict[str, torch.Tensor]]:
    """Three batches of 8 groups x G = 4: 0/1 and quarter rewards, an all-correct and an all-wrong
    group, a masked row, three clusters, uneven token counts (seeded)."""
    generator = torch.Generator().manual_seed(0)
    out = []
    for step in range(STEPS):
        n = GROUPS * G
        rewards = (torch.rand(n, generator=generator) < 0.4).float()
        if step == 1:
            rewards = torch.randint(0, 5, (n,), generator=generator).float() / 4
        rewards[:G] = 1.0  # a group all right
        rewards[G : 2 * G] = 0.0  # and one all wrong
        ids = torch.arange(GROUPS).repeat_interleave(G)
        mask = torch.ones(n, dtype=torch.bool)
        mask[-1] = False
        out.append(
            {
                "rewards": rewards,
                "group_ids": ids,
                "mask": mask,
                "clusters": ids % 3,
                "token_counts": torch.randint(1, 20, (n,), generator=generator),
                "prompt_keys": ids,  # SPO's: the same prompts every step
            }
        )
    return out


def run(name: str, device: str, dtype: torch.dtype) -> tuple[list[Any], dict[str, Any]]:
    """Each batch's result, and the estimator's state at the end."""
    estimator = make_estimator(name)
    results = []
    for batch in batches():
        placed = {key: value.to(device) for key, value in batch.items()}
        placed["rewards"] = placed["rewards"].to(dtype)
        results.append(estimator(placed.pop("rewards"), placed.pop("group_ids"), **placed))
    return results, estimator.state_dict()


def numbers(value: Any, path: str = "") -> dict[str, Any]:
    """Every leaf of a nested state as ``path -> value``."""
    if isinstance(value, dict):
        return {k: v for key in value for k, v in numbers(value[key], f"{path}/{key}").items()}
    if isinstance(value, (list, tuple)):
        return {
            k: v for i, item in enumerate(value) for k, v in numbers(item, f"{path}/{i}").items()
        }
    return {path: value}


def assert_same_state(ours: dict[str, Any], cpus: dict[str, Any]) -> None:
    a, b = numbers(ours), numbers(cpus)
    assert a.keys() == b.keys()
    for key, value in b.items():
        if isinstance(value, float):
            assert math.isclose(a[key], value, rel_tol=1e-9, abs_tol=1e-12), key
        else:
            assert a[key] == value, key


@pytest.mark.parametrize(
    "dtype", [torch.float32, pytest.param(torch.bfloat16, marks=needs_bf16)], ids=str
)
@pytest.mark.parametrize("name", available_estimators())
def test_an_estimator_on_cuda_rewards_gives_the_cpus_numbers(name, dtype):
    cpu, cpu_state = run(name, "cpu", dtype)
    cuda, cuda_state = run(name, "cuda", dtype)
    for step, (mine, reference) in enumerate(zip(cuda, cpu, strict=True)):
        for field in ("advantages", "baselines", "shrinkage"):
            value = getattr(mine, field)
            assert value.device.type == "cuda", (step, field)
            assert value.dtype == getattr(reference, field).dtype, (step, field)
            if field == "advantages":
                assert value.dtype == dtype, step
            got, want = value.float().cpu(), getattr(reference, field).float()
            assert (got - want).abs().max().item() < 1e-5, (step, field)
        assert mine.metrics.keys() == reference.metrics.keys()
        for key, want in reference.metrics.items():
            assert math.isclose(mine.metrics[key], want, rel_tol=1e-9, abs_tol=1e-12), key
    assert_same_state(cuda_state, cpu_state)
    assert any(r.advantages.abs().sum() > 0 for r in cpu)  # the batches carry a signal
