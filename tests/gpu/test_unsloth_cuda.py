"""EBPO on Unsloth's real GPU path (``make test-gpu`` where Unsloth's GPU install is): after
``import unsloth`` on a GPU, ``trl.GRPOTrainer`` is Unsloth's generated ``UnslothGRPOTrainer``; the
model comes from ``FastLanguageModel`` with LoRA, in 4-bit where bitsandbytes is installed. In a
process of its own (tests/integrations/unsloth/worker.py, path ``cuda``: ``import unsloth`` must come
before trl and transformers), under ``full_determinism``:

* ``advantage_estimator="grpo"`` logs exactly what Unsloth's own GRPOTrainer logs for 3 steps;
* every key of Unsloth's generation batch (``max_left_pad`` included) reaches its loss, the
  advantages 1-D float32 on the GPU;
* ``ebpo`` trains, and a LoRA run (beta 0) resumed from its step-2 checkpoint ends as the
  uninterrupted run: the same estimator state and logs.

A 2-layer, 128-wide Llama with a character tokenizer (nothing downloaded)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gpu.cuda import GPU

pytestmark = [
    *GPU,
    pytest.mark.unsloth,
    pytest.mark.skipif(
        importlib.util.find_spec("unsloth") is None,
        reason="needs unsloth's GPU install (pip install unsloth; see docs/unsloth.md)",
    ),
]

WORKER = Path(__file__).parents[1] / "integrations" / "unsloth" / "worker.py"


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    from ebpo.evaluation.models import save_tiny_llama

    root = tmp_path_factory.mktemp("unsloth_cuda")
    model = save_tiny_llama(root / "model", num_layers=2, hidden_size=128, num_heads=4, seed=0)
    out = root / "out"
    out.mkdir()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("UNSLOTH_")}
    done = subprocess.run(
        [sys.executable, str(WORKER), "cuda", str(model), str(out)],
        capture_output=True, text=True, timeout=900, env=environment, cwd=out,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads((out / "results.json").read_text())


def test_ebpo_sits_on_unsloths_generated_trainer(results):
    assert results["generated"] is True
    assert results["ebpo_bases"][-1] == "UnslothGRPOTrainer"


def test_grpo_on_unsloths_gpu_path_is_unsloths_grpo(results):
    expected, got = results["unsloth"]["logs"], results["grpo"]["logs"]
    assert len(expected) == 3 and got == expected
    assert any(h["loss"] != 0 for h in expected)


def test_unsloths_keys_reach_its_loss(results):
    theirs = results["outputs"]["unsloth"]
    for job in ("grpo", "ebpo"):
        ours = results["outputs"][job]
        assert [o["keys"] for o in ours] == [o["keys"] for o in theirs[: len(ours)]]
        for output in ours:
            assert "max_left_pad" in output["keys"] and output["same_device"]
            assert output["advantages"][1] == "torch.float32" and len(output["advantages"][0]) == 1


def test_ebpo_trains_and_resumes_with_its_prior(results):
    assert all(math.isfinite(h["loss"]) for h in results["ebpo"]["logs"])
    assert "ebpo/shrinkage_mean" in results["ebpo"]["ebpo_metrics"]
    runs = results["resume_ebpo"]
    full, resumed = runs["full"], runs["resumed"]
    assert runs["checkpoint_state"]["steps"] == 2
    assert resumed["estimator"] == full["estimator"] and full["estimator"]["steps"] == 4
    assert len(full["logs"]) == 4 and resumed["logs"] == full["logs"]
