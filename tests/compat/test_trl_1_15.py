"""TRL 1.15.0 on the CPU: TRL's own ``GRPOTrainer`` fails inside ``train`` where triton is absent
(:mod:`tests.compat.trl_kernels`); ``make test-compat`` runs this in its trl-1.15 leg."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from ebpo.evaluation.models import save_tiny_llama  # noqa: E402
from tests.compat.trl_kernels import trl_lacks_its_kernel  # noqa: E402
from tests.integrations.trl.test_trl_grpo import train  # noqa: E402

pytestmark = pytest.mark.skipif(
    not trl_lacks_its_kernel(), reason="needs trl 1.15 without triton (make test-compat)"
)


def test_trls_own_grpo_trainer_fails_on_its_missing_triton_kernel(tmp_path) -> None:
    save_tiny_llama(tmp_path / "model", num_layers=1, hidden_size=32, num_heads=2, seed=0)
    data = Dataset.from_list([{"prompt": f"{a}+{a}="} for a in range(16)])
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'apply'") as info:
        train((tmp_path, data, {}), GRPOConfig, GRPOTrainer, "parity")
    frames = [entry.name for entry in info.traceback]
    assert "_fused_forward" in frames  # TRL's forward, where _ChunkedLogProbFunction is None
